package paysim

import (
	"bytes"
	"context"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// WeChat Pay notification constants.
const (
	WeChatSignatureType   = "WECHATPAY2-SHA256-RSA2048"
	WeChatAlgorithm       = "AEAD_AES_256_GCM"
	WeChatProbePrefix     = "WECHATPAY/SIGNTEST/"
	WeChatEventPayment    = "TRANSACTION.SUCCESS"
	WeChatEventRefund     = "REFUND.SUCCESS"
	WeChatEventRefundFail = "REFUND.ABNORMAL"
	WeChatEventRefundShut = "REFUND.CLOSED"
)

// WeChatPay signs and encrypts WeChat Pay APIv3 notifications the way WeChat Pay does.
type WeChatPay struct {
	// APIv3Key is the merchant's 32-byte APIv3 key (AES-256-GCM key of the resource).
	APIv3Key string
	// Serial is sent in Wechatpay-Serial: a platform certificate serial or a PUB_KEY_ID_ id.
	Serial string
	// Key is WeChat Pay's private key matching Serial.
	Key *rsa.PrivateKey
	// Now is the clock of Wechatpay-Timestamp and create_time; time.Now when nil.
	Now func() time.Time
}

// Notification is one signed provider request: headers and the exact body bytes.
type Notification struct {
	Header http.Header
	Body   []byte
}

// Request builds the POST of the notification to url.
func (n Notification) Request(ctx context.Context, url string) (*http.Request, error) {
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(n.Body))
	if err != nil {
		return nil, fmt.Errorf("paysim: new request: %w", err)
	}
	for k, v := range n.Header {
		r.Header[k] = append([]string(nil), v...)
	}
	return r, nil
}

// WeChatAmount is the amount object of a payment notification, in fen.
type WeChatAmount struct {
	Total         int64  `json:"total"`
	PayerTotal    int64  `json:"payer_total"`
	Currency      string `json:"currency"`
	PayerCurrency string `json:"payer_currency"`
}

// WeChatPayer is the payer object of a payment notification.
type WeChatPayer struct {
	OpenID string `json:"openid"`
}

// WeChatTransaction is the plaintext of a TRANSACTION.SUCCESS notification (direct merchant; a
// service provider's has sp_mchid/sub_mchid/sp_appid/sub_appid instead of mchid/appid).
type WeChatTransaction struct {
	MchID          string       `json:"mchid,omitempty"`
	AppID          string       `json:"appid,omitempty"`
	SpMchID        string       `json:"sp_mchid,omitempty"`
	SubMchID       string       `json:"sub_mchid,omitempty"`
	SpAppID        string       `json:"sp_appid,omitempty"`
	SubAppID       string       `json:"sub_appid,omitempty"`
	OutTradeNo     string       `json:"out_trade_no"`
	TransactionID  string       `json:"transaction_id"`
	TradeType      string       `json:"trade_type"`
	TradeState     string       `json:"trade_state"`
	TradeStateDesc string       `json:"trade_state_desc"`
	BankType       string       `json:"bank_type"`
	Attach         string       `json:"attach"`
	SuccessTime    string       `json:"success_time"`
	Payer          WeChatPayer  `json:"payer"`
	Amount         WeChatAmount `json:"amount"`
}

// WeChatRefundAmount is the amount object of a refund notification, in fen.
type WeChatRefundAmount struct {
	Total       int64 `json:"total"`
	Refund      int64 `json:"refund"`
	PayerTotal  int64 `json:"payer_total"`
	PayerRefund int64 `json:"payer_refund"`
}

// WeChatRefund is the plaintext of a REFUND.* notification.
type WeChatRefund struct {
	MchID               string             `json:"mchid,omitempty"`
	SpMchID             string             `json:"sp_mchid,omitempty"`
	SubMchID            string             `json:"sub_mchid,omitempty"`
	OutTradeNo          string             `json:"out_trade_no"`
	TransactionID       string             `json:"transaction_id"`
	OutRefundNo         string             `json:"out_refund_no"`
	RefundID            string             `json:"refund_id"`
	RefundStatus        string             `json:"refund_status"`
	SuccessTime         string             `json:"success_time,omitempty"`
	UserReceivedAccount string             `json:"user_received_account"`
	Amount              WeChatRefundAmount `json:"amount"`
}

// wechatResource and wechatBody are the notification's JSON envelope.
type wechatResource struct {
	Algorithm      string `json:"algorithm"`
	Ciphertext     string `json:"ciphertext"`
	Nonce          string `json:"nonce"`
	AssociatedData string `json:"associated_data"`
	OriginalType   string `json:"original_type"`
}

type wechatBody struct {
	ID           string         `json:"id"`
	CreateTime   string         `json:"create_time"`
	ResourceType string         `json:"resource_type"`
	EventType    string         `json:"event_type"`
	Summary      string         `json:"summary"`
	Resource     wechatResource `json:"resource"`
}

// WeChatOptions alter one notification, for negative tests. The zero value is a faithful one.
type WeChatOptions struct {
	// ID is the notification id; random when empty.
	ID string
	// Timestamp overrides Wechatpay-Timestamp (and create_time).
	Timestamp time.Time
	// Nonce overrides Wechatpay-Nonce.
	Nonce string
	// AssociatedData overrides resource.associated_data; "transaction" or "refund" otherwise.
	AssociatedData string
	// SignatureType, when set, is sent as Wechatpay-Signature-Type.
	SignatureType string
	// Probe replaces the signature with a WECHATPAY/SIGNTEST/ probe, as WeChat Pay's checks do.
	Probe bool
}

// Payment builds a TRANSACTION.SUCCESS notification of tx.
func (w *WeChatPay) Payment(tx WeChatTransaction, opts WeChatOptions) (Notification, error) {
	return w.Event(WeChatEventPayment, "transaction", "支付成功", tx, opts)
}

// Refund builds a REFUND.SUCCESS, REFUND.ABNORMAL or REFUND.CLOSED notification of rf, chosen by
// rf.RefundStatus (SUCCESS, ABNORMAL, CLOSED).
func (w *WeChatPay) Refund(rf WeChatRefund, opts WeChatOptions) (Notification, error) {
	event := map[string]string{"SUCCESS": WeChatEventRefund, "ABNORMAL": WeChatEventRefundFail, "CLOSED": WeChatEventRefundShut}[rf.RefundStatus]
	if event == "" {
		return Notification{}, fmt.Errorf("paysim: wechat refund: unknown refund_status %q", rf.RefundStatus)
	}
	return w.Event(event, "refund", "退款成功", rf, opts)
}

// Event builds a notification of any event type: the plaintext is JSON-encoded, encrypted with
// AES-256-GCM under the APIv3 key, wrapped in the envelope, and the body signed with
// SHA256withRSA over "timestamp\nnonce\nbody\n".
func (w *WeChatPay) Event(eventType, originalType, summary string, plaintext any, opts WeChatOptions) (Notification, error) {
	if w.Key == nil || w.Serial == "" {
		return Notification{}, errors.New("paysim: wechat: signing key and serial are required")
	}
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	ts := opts.Timestamp
	if ts.IsZero() {
		ts = now()
	}
	plain, err := json.Marshal(plaintext)
	if err != nil {
		return Notification{}, fmt.Errorf("paysim: wechat: encode plaintext: %w", err)
	}
	gcmNonce, err := RandomString(12)
	if err != nil {
		return Notification{}, err
	}
	aad := opts.AssociatedData
	if aad == "" {
		aad = originalType
	}
	ciphertext, err := SealWeChatResource(w.APIv3Key, gcmNonce, aad, plain)
	if err != nil {
		return Notification{}, err
	}
	id := opts.ID
	if id == "" {
		if id, err = RandomUUID(); err != nil {
			return Notification{}, err
		}
	}
	body, err := json.Marshal(wechatBody{
		ID:           id,
		CreateTime:   ts.In(chinaTime).Format(time.RFC3339),
		ResourceType: "encrypt-resource",
		EventType:    eventType,
		Summary:      summary,
		Resource: wechatResource{
			Algorithm:      WeChatAlgorithm,
			Ciphertext:     ciphertext,
			Nonce:          gcmNonce,
			AssociatedData: aad,
			OriginalType:   originalType,
		},
	})
	if err != nil {
		return Notification{}, fmt.Errorf("paysim: wechat: encode body: %w", err)
	}
	nonce := opts.Nonce
	if nonce == "" {
		if nonce, err = RandomString(32); err != nil {
			return Notification{}, err
		}
	}
	tsText := strconv.FormatInt(ts.Unix(), 10)
	var sig string
	if opts.Probe {
		rnd, err := RandomString(40)
		if err != nil {
			return Notification{}, err
		}
		sig = WeChatProbePrefix + rnd
	} else if sig, err = SignWeChat(w.Key, tsText, nonce, body); err != nil {
		return Notification{}, err
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Wechatpay-Serial", w.Serial)
	h.Set("Wechatpay-Signature", sig)
	h.Set("Wechatpay-Timestamp", tsText)
	h.Set("Wechatpay-Nonce", nonce)
	if opts.SignatureType != "" {
		h.Set("Wechatpay-Signature-Type", opts.SignatureType)
	}
	return Notification{Header: h, Body: body}, nil
}

// chinaTime is UTC+8, WeChat Pay's time zone in create_time and success_time.
var chinaTime = time.FixedZone("CST", 8*3600)

// WeChatTime formats t as WeChat Pay does ("2026-01-02T15:04:05+08:00").
func WeChatTime(t time.Time) string { return t.In(chinaTime).Format(time.RFC3339) }

// SignWeChat returns the base64 SHA256withRSA (PKCS#1 v1.5) signature of
// "timestamp\nnonce\nbody\n".
func SignWeChat(key *rsa.PrivateKey, timestamp, nonce string, body []byte) (string, error) {
	h := sha256.New()
	h.Write([]byte(timestamp + "\n" + nonce + "\n"))
	h.Write(body)
	h.Write([]byte("\n"))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, h.Sum(nil))
	if err != nil {
		return "", fmt.Errorf("paysim: wechat: sign: %w", err)
	}
	return base64.StdEncoding.EncodeToString(sig), nil
}

// SealWeChatResource encrypts plaintext with AES-256-GCM (key = the APIv3 key's bytes, nonce =
// the 12-character nonce's bytes, AAD = associatedData) and returns base64(ciphertext || tag).
func SealWeChatResource(apiV3Key, nonce, associatedData string, plaintext []byte) (string, error) {
	block, err := aes.NewCipher([]byte(apiV3Key))
	if err != nil {
		return "", fmt.Errorf("paysim: wechat: APIv3 key must be 32 bytes: %w", err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return "", fmt.Errorf("paysim: wechat: GCM: %w", err)
	}
	if len(nonce) != gcm.NonceSize() {
		return "", fmt.Errorf("paysim: wechat: nonce must be %d bytes, got %d", gcm.NonceSize(), len(nonce))
	}
	return base64.StdEncoding.EncodeToString(gcm.Seal(nil, []byte(nonce), plaintext, []byte(associatedData))), nil
}

// RandomUUID returns a random (version 4) UUID string, the shape of WeChat notification ids.
func RandomUUID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("paysim: uuid: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:]), nil
}
