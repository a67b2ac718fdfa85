// Package wechatpay is the WeChat Pay APIv3 notification adapter.
//
// A notification is verified before anything in it is believed: the Wechatpay-Signature is a
// SHA256withRSA signature over "timestamp\nnonce\nbody\n" of the raw body, made with the key
// named by Wechatpay-Serial (a platform certificate serial or a PUB_KEY_ID_ public key; both kinds
// verify at once during WeChat's migration), and the timestamp must be within five minutes of
// now. Signatures starting with WECHATPAY/SIGNTEST/ are WeChat's deliberate probes and are refused
// and counted as such. The resource is then decrypted with AES-256-GCM under the merchant's APIv3
// key, and the merchant identity in the plaintext (mchid / sp_mchid + sub_mchid, appid) must be
// this channel's.
//
// Signed bytes that different readers would read differently are refused: each signature header
// must appear once, and the envelope and the plaintext must be strict JSON (valid UTF-8, no two
// members of one name, shallow; package strictjson).
package wechatpay

import (
	"bytes"
	"context"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/keys"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/internal/reply"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/internal/strictjson"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/internal/telemetry"
)

// ProviderName is the adapter's name in metrics and logs.
const ProviderName = string(callbackdv1alpha1.ProviderWeChatPay)

// Protocol constants.
const (
	// SignatureType is the only signature scheme accepted.
	SignatureType = "WECHATPAY2-SHA256-RSA2048"
	// ProbePrefix starts the signatures of WeChat Pay's deliberate verification probes.
	ProbePrefix = "WECHATPAY/SIGNTEST/"
	// Algorithm is the only resource encryption accepted.
	Algorithm = "AEAD_AES_256_GCM"
	// DefaultTolerance: notifications whose timestamp is this far from now or farther are refused.
	DefaultTolerance = 5 * time.Minute
)

// strictOptions check the envelope and the plaintext: WeChat Pay's are at most four levels deep
// (promotion_detail[].goods_detail[]), and both are decoded into structs, whose fields
// encoding/json matches case-insensitively.
var strictOptions = strictjson.Options{MaxDepth: 16, FoldCase: true}

// signedHeaders are the headers the verification reads; each must appear at most once, or a
// proxy and callbackd could each believe a different one.
var signedHeaders = []string{"Wechatpay-Serial", "Wechatpay-Signature", "Wechatpay-Timestamp", "Wechatpay-Nonce", "Wechatpay-Signature-Type"}

// Event types.
const (
	EventTransactionSuccess = "TRANSACTION.SUCCESS"
	EventRefundSuccess      = "REFUND.SUCCESS"
	EventRefundAbnormal     = "REFUND.ABNORMAL"
	EventRefundClosed       = "REFUND.CLOSED"
)

// Config configures an Adapter.
type Config struct {
	// Channel is the channel name stamped on notifications and metrics.
	Channel string
	// MchID is the merchant (or, with SubMchID, the service provider) mchid.
	MchID string
	// SubMchID is the sub-merchant of a service-provider channel; empty for a direct merchant.
	SubMchID string
	// AppID, when set, must be the notification's appid (sp_appid or sub_appid for a service
	// provider).
	AppID string
	// Tolerance of Wechatpay-Timestamp; DefaultTolerance when zero.
	Tolerance time.Duration
	// Keys are the verification keys and the APIv3 key (re-read when their files change).
	Keys *keys.Set[Keys]
	// Metrics counts verifications per key and probes; nil records nothing.
	Metrics *telemetry.Metrics
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Adapter verifies, decrypts and normalizes WeChat Pay notifications. It is safe for concurrent
// use.
type Adapter struct {
	cfg Config
}

var _ notify.Adapter = (*Adapter)(nil)

// New validates cfg and returns the adapter.
func New(cfg Config) (*Adapter, error) {
	switch {
	case cfg.Channel == "":
		return nil, errors.New("wechatpay: new adapter: channel name is required")
	case cfg.MchID == "":
		return nil, errors.New("wechatpay: new adapter: merchant.merchantID (mchid) is required")
	case cfg.Keys == nil || cfg.Keys.Current() == nil:
		return nil, errors.New("wechatpay: new adapter: keys are required")
	}
	if cfg.Tolerance <= 0 {
		cfg.Tolerance = DefaultTolerance
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Adapter{cfg: cfg}, nil
}

// Provider implements notify.Adapter.
func (a *Adapter) Provider() string { return ProviderName }

// body is the notification envelope.
type body struct {
	ID           string `json:"id"`
	CreateTime   string `json:"create_time"`
	EventType    string `json:"event_type"`
	ResourceType string `json:"resource_type"`
	Summary      string `json:"summary"`
	Resource     *struct {
		Algorithm      string `json:"algorithm"`
		Ciphertext     string `json:"ciphertext"`
		Nonce          string `json:"nonce"`
		AssociatedData string `json:"associated_data"`
		OriginalType   string `json:"original_type"`
	} `json:"resource"`
}

// identity is the merchant identity part shared by payment and refund plaintexts.
type identity struct {
	MchID    string `json:"mchid"`
	AppID    string `json:"appid"`
	SpMchID  string `json:"sp_mchid"`
	SubMchID string `json:"sub_mchid"`
	SpAppID  string `json:"sp_appid"`
	SubAppID string `json:"sub_appid"`
}

type transaction struct {
	identity
	OutTradeNo    string `json:"out_trade_no"`
	TransactionID string `json:"transaction_id"`
	TradeState    string `json:"trade_state"`
	SuccessTime   string `json:"success_time"`
	Amount        *struct {
		Total    *int64 `json:"total"`
		Currency string `json:"currency"`
	} `json:"amount"`
}

type refund struct {
	identity
	OutTradeNo    string `json:"out_trade_no"`
	TransactionID string `json:"transaction_id"`
	OutRefundNo   string `json:"out_refund_no"`
	RefundID      string `json:"refund_id"`
	RefundStatus  string `json:"refund_status"`
	SuccessTime   string `json:"success_time"`
	Amount        *struct {
		Refund *int64 `json:"refund"`
	} `json:"amount"`
}

// Parse implements notify.Adapter. The order matters: nothing from the body is believed before
// the signature is verified, and the plaintext is read only after it decrypted under our key.
func (a *Adapter) Parse(_ context.Context, r *http.Request, raw []byte) (notify.Notification, error) {
	if err := a.verify(r.Header, raw); err != nil {
		return notify.Notification{}, err
	}
	// Signed bytes that parsers read differently (duplicate names, invalid UTF-8) are refused
	// before anything in them is believed.
	if err := strictjson.Check(raw, strictOptions); err != nil {
		return notify.Notification{}, &notify.Error{Reason: notify.ReasonMalformed, Detail: "body is not strict JSON", Err: err}
	}
	var env body
	if err := json.Unmarshal(raw, &env); err != nil || env.Resource == nil {
		return notify.Notification{}, notify.Errorf(notify.ReasonMalformed, "body is not a notification envelope")
	}
	if env.Resource.Algorithm != Algorithm {
		return notify.Notification{}, notify.Errorf(notify.ReasonUnsupported, "resource algorithm %q is not %s", truncate(env.Resource.Algorithm), Algorithm)
	}
	plain, err := a.decrypt(env.Resource.Ciphertext, env.Resource.Nonce, env.Resource.AssociatedData)
	if err != nil {
		return notify.Notification{}, err
	}
	if err := strictjson.Check(plain, strictOptions); err != nil {
		return notify.Notification{}, &notify.Error{Reason: notify.ReasonMalformed, Detail: "resource plaintext is not strict JSON", Err: err}
	}
	n := notify.Notification{
		Channel:    a.cfg.Channel,
		Provider:   ProviderName,
		MerchantID: a.cfg.MchID,
		NotifyID:   env.ID,
		BodyDigest: notify.Digest(raw),
	}
	switch env.EventType {
	case EventTransactionSuccess:
		err = a.payment(plain, &n)
	case EventRefundSuccess, EventRefundAbnormal, EventRefundClosed:
		err = a.refund(env.EventType, plain, &n)
	default:
		// A verified event this platform does not act on: acknowledge it, record nothing.
		var id identity
		if json.Unmarshal(plain, &id) == nil {
			if err := a.checkIdentity(id, false); err != nil {
				return notify.Notification{}, err
			}
		}
		n.Kind, n.Status = notify.KindPayment, notify.StatusIgnored
	}
	if err != nil {
		return notify.Notification{}, err
	}
	return n, nil
}

// verify checks the signature headers against the raw body.
func (a *Adapter) verify(h http.Header, raw []byte) error {
	for _, name := range signedHeaders {
		if n := len(h.Values(name)); n > 1 {
			return notify.Errorf(notify.ReasonMalformed, "header %s appears %d times", name, n)
		}
	}
	if st := h.Get("Wechatpay-Signature-Type"); st != "" && st != SignatureType {
		return notify.Errorf(notify.ReasonUnsupported, "Wechatpay-Signature-Type %q is not %s", truncate(st), SignatureType)
	}
	serial := strings.TrimSpace(h.Get("Wechatpay-Serial"))
	sig := strings.TrimSpace(h.Get("Wechatpay-Signature"))
	tsText := strings.TrimSpace(h.Get("Wechatpay-Timestamp"))
	nonce := strings.TrimSpace(h.Get("Wechatpay-Nonce"))
	if serial == "" || sig == "" || tsText == "" || nonce == "" {
		return notify.Errorf(notify.ReasonMalformed, "missing Wechatpay-Serial, -Signature, -Timestamp or -Nonce header")
	}
	if strings.HasPrefix(sig, ProbePrefix) {
		a.cfg.Metrics.Probe(a.cfg.Channel)
		return notify.Errorf(notify.ReasonProbe, "WeChat Pay signature probe refused as designed")
	}
	ts, err := parseUnix(tsText)
	if err != nil {
		return notify.Errorf(notify.ReasonMalformed, "Wechatpay-Timestamp is not a unix time in seconds")
	}
	// Whole seconds, as the provider compares: |now - ts| >= tolerance is refused.
	if d := time.Duration(a.cfg.Now().Unix()-ts.Unix()) * time.Second; d >= a.cfg.Tolerance || -d >= a.cfg.Tolerance {
		return notify.Errorf(notify.ReasonStaleTimestamp, "Wechatpay-Timestamp is %s away from now (tolerance %s)", d, a.cfg.Tolerance)
	}
	k := a.cfg.Keys.Current()
	pub, ok := k.Verifiers[serial]
	if !ok {
		// Upper-case hex is canonical; accept a lower-case certificate serial too.
		serial = strings.ToUpper(serial)
		pub, ok = k.Verifiers[serial]
	}
	if !ok {
		// The serial is attacker-controlled: it is not a metric label and is logged truncated.
		return notify.Errorf(notify.ReasonUnknownKey, "Wechatpay-Serial %q names no configured certificate or public key", truncate(serial))
	}
	sigBytes, err := base64.StdEncoding.DecodeString(sig)
	if err != nil {
		a.cfg.Metrics.Verified(a.cfg.Channel, serial, false)
		return notify.Errorf(notify.ReasonBadSignature, "Wechatpay-Signature is not base64")
	}
	hsh := sha256.New()
	hsh.Write([]byte(tsText))
	hsh.Write([]byte{'\n'})
	hsh.Write([]byte(nonce))
	hsh.Write([]byte{'\n'})
	hsh.Write(raw)
	hsh.Write([]byte{'\n'})
	if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, hsh.Sum(nil), sigBytes); err != nil {
		a.cfg.Metrics.Verified(a.cfg.Channel, serial, false)
		return notify.Errorf(notify.ReasonBadSignature, "signature does not verify with key %s", serial)
	}
	a.cfg.Metrics.Verified(a.cfg.Channel, serial, true)
	return nil
}

// decrypt opens the AES-256-GCM resource with the APIv3 key.
func (a *Adapter) decrypt(ciphertext, nonce, aad string) ([]byte, error) {
	ct, err := base64.StdEncoding.DecodeString(ciphertext)
	if err != nil {
		return nil, notify.Errorf(notify.ReasonMalformed, "resource ciphertext is not base64")
	}
	block, err := aes.NewCipher(a.cfg.Keys.Current().APIv3Key)
	if err != nil {
		return nil, &notify.Error{Reason: notify.ReasonDecrypt, Detail: "APIv3 key unusable", Err: err}
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, &notify.Error{Reason: notify.ReasonDecrypt, Detail: "GCM unavailable", Err: err}
	}
	if len(nonce) != gcm.NonceSize() || len(ct) < gcm.Overhead() {
		return nil, notify.Errorf(notify.ReasonDecrypt, "resource nonce or ciphertext has the wrong length")
	}
	plain, err := gcm.Open(nil, []byte(nonce), ct, []byte(aad))
	if err != nil {
		// Wrong APIv3 key, or ciphertext / associated data tampered with.
		return nil, notify.Errorf(notify.ReasonDecrypt, "resource does not decrypt with the APIv3 key")
	}
	return plain, nil
}

// checkIdentity refuses a plaintext of another merchant. requireApp applies the appid check to
// payments (refund plaintexts carry no appid).
func (a *Adapter) checkIdentity(id identity, requireApp bool) error {
	if a.cfg.SubMchID != "" {
		if id.SpMchID != a.cfg.MchID || id.SubMchID != a.cfg.SubMchID {
			return notify.Errorf(notify.ReasonMerchantMismatch, "notification is for another service provider or sub-merchant")
		}
		if requireApp && a.cfg.AppID != "" && id.SpAppID != a.cfg.AppID && id.SubAppID != a.cfg.AppID {
			return notify.Errorf(notify.ReasonMerchantMismatch, "notification is for another appid")
		}
		return nil
	}
	if id.MchID != a.cfg.MchID {
		return notify.Errorf(notify.ReasonMerchantMismatch, "notification is for another mchid")
	}
	if requireApp && a.cfg.AppID != "" && id.AppID != a.cfg.AppID {
		return notify.Errorf(notify.ReasonMerchantMismatch, "notification is for another appid")
	}
	return nil
}

func (a *Adapter) payment(plain []byte, n *notify.Notification) error {
	var tx transaction
	if err := decodeStrict(plain, &tx); err != nil {
		return notify.Errorf(notify.ReasonMalformed, "payment resource is not a transaction")
	}
	if err := a.checkIdentity(tx.identity, true); err != nil {
		return err
	}
	if tx.OutTradeNo == "" {
		return notify.Errorf(notify.ReasonMalformed, "payment resource without out_trade_no")
	}
	n.SubMerchantID = tx.SubMchID
	n.OutTradeNo = tx.OutTradeNo
	n.Kind = notify.KindPayment
	n.ProviderTxnID = tx.TransactionID
	if tx.TradeState != "SUCCESS" {
		n.Status = notify.StatusIgnored
		return nil
	}
	if tx.Amount == nil || tx.Amount.Total == nil || *tx.Amount.Total < 0 {
		return notify.Errorf(notify.ReasonMalformed, "payment resource without a non-negative amount.total")
	}
	n.Status = notify.StatusSucceeded
	n.Amount = *tx.Amount.Total
	n.Currency = strings.ToUpper(tx.Amount.Currency)
	if n.Currency == "" {
		n.Currency = "CNY"
	}
	n.OccurredAt = parseTime(tx.SuccessTime)
	return nil
}

func (a *Adapter) refund(eventType string, plain []byte, n *notify.Notification) error {
	var rf refund
	if err := decodeStrict(plain, &rf); err != nil {
		return notify.Errorf(notify.ReasonMalformed, "refund resource is not a refund")
	}
	if err := a.checkIdentity(rf.identity, false); err != nil {
		return err
	}
	if rf.OutTradeNo == "" || rf.OutRefundNo == "" {
		return notify.Errorf(notify.ReasonMalformed, "refund resource without out_trade_no or out_refund_no")
	}
	want := map[string]string{EventRefundSuccess: "SUCCESS", EventRefundAbnormal: "ABNORMAL", EventRefundClosed: "CLOSED"}[eventType]
	if rf.RefundStatus != want {
		return notify.Errorf(notify.ReasonMalformed, "refund_status %q contradicts event %s", truncate(rf.RefundStatus), eventType)
	}
	if rf.Amount == nil || rf.Amount.Refund == nil || *rf.Amount.Refund < 0 {
		return notify.Errorf(notify.ReasonMalformed, "refund resource without a non-negative amount.refund")
	}
	n.SubMerchantID = rf.SubMchID
	n.OutTradeNo = rf.OutTradeNo
	n.Kind = notify.KindRefund
	n.OutRefundNo = rf.OutRefundNo
	n.Status = notify.StatusSucceeded
	if eventType != EventRefundSuccess {
		n.Status = notify.StatusFailed
	}
	n.Amount = *rf.Amount.Refund
	n.Currency = "CNY"
	n.ProviderTxnID = rf.TransactionID
	n.ProviderRefundID = rf.RefundID
	n.OccurredAt = parseTime(rf.SuccessTime)
	return nil
}

// Respond implements notify.Adapter: 204 without a body on success; otherwise
// {"code":"FAIL","message":...} with 500 (WeChat resends) or 400 (refused; WeChat resends too,
// harmlessly). The status code, not the body, is what WeChat Pay reads.
func (a *Adapter) Respond(w http.ResponseWriter, v notify.Verdict, message string) {
	type failure struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	switch v {
	case notify.Success:
		w.WriteHeader(http.StatusNoContent)
	case notify.Reject:
		reply.JSON(w, http.StatusBadRequest, failure{Code: "FAIL", Message: message})
	default:
		reply.JSON(w, http.StatusInternalServerError, failure{Code: "FAIL", Message: message})
	}
}

// decodeStrict decodes JSON refusing a trailing second document; unknown fields are fine
// (WeChat adds fields over time).
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

// parseUnix parses decimal seconds without a sign.
func parseUnix(s string) (time.Time, error) {
	if s == "" || len(s) > 12 {
		return time.Time{}, errors.New("bad timestamp")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return time.Time{}, errors.New("bad timestamp")
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(v, 0), nil
}

// parseTime reads an RFC 3339 time; an absent or odd one is zero (informational only).
func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// truncate keeps attacker-controlled values short in errors and logs.
func truncate(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
