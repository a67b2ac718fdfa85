// Package alipay is the Alipay asynchronous notification adapter.
//
// The notification is a form-encoded POST body. Only the body is read (parameters appended to
// the notify URL's query string are ignored, since anyone can add them). The signature is
// verified over the body's own bytes in the charset the body declares: fields URL-decoded but
// not transcoded, sign and sign_type dropped, empty values skipped, keys sorted in byte order,
// k=v joined with &, SHA256withRSA (RSA2) with the configured Alipay public key. The request's
// sign_type cannot downgrade this: anything but RSA2 is refused. Values are transcoded to UTF-8
// (gbk bodies) only after verification, and yuan amounts are converted to fen exactly.
package alipay

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/text/encoding/simplifiedchinese"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/keys"
	"github.com/seed-1cff2221/callback-platform/callbackd/money"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/internal/telemetry"
)

// ProviderName is the adapter's name in metrics and logs.
const ProviderName = string(callbackdv1alpha1.ProviderAlipay)

// KeyID labels the (single) Alipay public key in verification metrics.
const KeyID = "alipay-public-key"

// Trade statuses.
const (
	TradeWaitBuyerPay = "WAIT_BUYER_PAY"
	TradeSuccess      = "TRADE_SUCCESS"
	TradeFinished     = "TRADE_FINISHED"
	TradeClosed       = "TRADE_CLOSED"
)

// answers are Alipay's exact expected bodies: "success" stops the resends, anything else
// (here "fail") asks for one.
var (
	answerSuccess = []byte("success")
	answerFail    = []byte("fail")
)

// chinaTime is UTC+8, the zone of Alipay's gmt_* fields.
var chinaTime = time.FixedZone("CST", 8*3600)

// Keys is the key material of a channel.
type Keys struct {
	// PublicKey is the "Alipay public key" that verifies notifications.
	PublicKey *rsa.PublicKey
}

// LoadKeys reads the Alipay public key file: PEM ("PUBLIC KEY" or "RSA PUBLIC KEY") or the bare
// base64 DER that the Alipay console shows. Errors never contain the key.
func LoadKeys(publicKeyFile string) (*Keys, error) {
	raw, err := os.ReadFile(publicKeyFile)
	if err != nil {
		return nil, fmt.Errorf("read Alipay public key file: %w", err)
	}
	pub, err := ParsePublicKey(raw)
	if err != nil {
		return nil, fmt.Errorf("alipay public key file %s: %w", publicKeyFile, err)
	}
	return &Keys{PublicKey: pub}, nil
}

// ParsePublicKey decodes a PEM or bare base64 RSA public key.
func ParsePublicKey(raw []byte) (*rsa.PublicKey, error) {
	var der []byte
	pkcs1 := false
	if block, _ := pem.Decode(raw); block != nil {
		der, pkcs1 = block.Bytes, block.Type == "RSA PUBLIC KEY"
	} else {
		decoded, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(string(raw)), ""))
		if err != nil {
			return nil, errors.New("neither PEM nor base64")
		}
		der = decoded
	}
	if pkcs1 {
		pub, err := x509.ParsePKCS1PublicKey(der)
		if err != nil {
			return nil, fmt.Errorf("parse PKCS#1 public key: %w", err)
		}
		return pub, nil
	}
	parsed, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("parse public key: %w", err)
	}
	pub, ok := parsed.(*rsa.PublicKey)
	if !ok {
		return nil, errors.New("public key is not RSA")
	}
	return pub, nil
}

// Config configures an Adapter.
type Config struct {
	// Channel is the channel name stamped on notifications and metrics.
	Channel string
	// AppID is the channel's app_id (ChannelSettings.Merchant.MerchantID).
	AppID string
	// SellerID, when set, must be the notification's seller_id.
	SellerID string
	// Keys hold the Alipay public key (re-read when its file changes).
	Keys *keys.Set[Keys]
	// Metrics counts verifications; nil records nothing.
	Metrics *telemetry.Metrics
}

// Adapter verifies and normalizes Alipay notifications. It is safe for concurrent use.
type Adapter struct {
	cfg Config
}

var _ notify.Adapter = (*Adapter)(nil)

// New validates cfg and returns the adapter.
func New(cfg Config) (*Adapter, error) {
	switch {
	case cfg.Channel == "":
		return nil, errors.New("alipay: new adapter: channel name is required")
	case cfg.AppID == "":
		return nil, errors.New("alipay: new adapter: merchant.merchantID (app_id) is required")
	case cfg.Keys == nil || cfg.Keys.Current() == nil || cfg.Keys.Current().PublicKey == nil:
		return nil, errors.New("alipay: new adapter: the Alipay public key is required")
	}
	return &Adapter{cfg: cfg}, nil
}

// Provider implements notify.Adapter.
func (a *Adapter) Provider() string { return ProviderName }

// Parse implements notify.Adapter. r's URL is never read.
func (a *Adapter) Parse(_ context.Context, _ *http.Request, body []byte) (notify.Notification, error) {
	raw, err := parseForm(body)
	if err != nil {
		return notify.Notification{}, err
	}
	if st := raw["sign_type"]; st != "" && st != "RSA2" {
		return notify.Notification{}, notify.Errorf(notify.ReasonUnsupported, "sign_type %q refused: only RSA2 is accepted", truncate(st))
	}
	sig, err := base64.StdEncoding.DecodeString(raw["sign"])
	if err != nil || len(sig) == 0 {
		return notify.Notification{}, notify.Errorf(notify.ReasonMalformed, "sign missing or not base64")
	}
	// Verify over the bytes as sent, in the declared charset.
	sum := sha256.Sum256([]byte(SignContent(raw)))
	if err := rsa.VerifyPKCS1v15(a.cfg.Keys.Current().PublicKey, crypto.SHA256, sum[:], sig); err != nil {
		a.cfg.Metrics.Verified(a.cfg.Channel, KeyID, false)
		return notify.Notification{}, notify.Errorf(notify.ReasonBadSignature, "sign does not verify with the Alipay public key")
	}
	a.cfg.Metrics.Verified(a.cfg.Channel, KeyID, true)

	f, err := decodeCharset(raw)
	if err != nil {
		return notify.Notification{}, err
	}
	if f["app_id"] != a.cfg.AppID {
		return notify.Notification{}, notify.Errorf(notify.ReasonMerchantMismatch, "notification is for another app_id")
	}
	if a.cfg.SellerID != "" && f["seller_id"] != a.cfg.SellerID {
		return notify.Notification{}, notify.Errorf(notify.ReasonMerchantMismatch, "notification is for another seller_id")
	}
	n := notify.Notification{
		Channel:       a.cfg.Channel,
		Provider:      ProviderName,
		MerchantID:    a.cfg.AppID,
		OutTradeNo:    f["out_trade_no"],
		ProviderTxnID: f["trade_no"],
		NotifyID:      f["notify_id"],
		Currency:      "CNY",
		BodyDigest:    notify.Digest(body),
	}
	if n.OutTradeNo == "" {
		return notify.Notification{}, notify.Errorf(notify.ReasonMalformed, "out_trade_no missing")
	}
	status := f["trade_status"]
	switch {
	case f["out_biz_no"] != "" && f["refund_fee"] != "":
		// A refund (partial refunds keep TRADE_SUCCESS, a full one closes the trade).
		n.Kind, n.Status, n.OutRefundNo = notify.KindRefund, notify.StatusSucceeded, f["out_biz_no"]
		if n.Amount, err = yuan(f, "refund_fee"); err != nil {
			return notify.Notification{}, err
		}
		n.OccurredAt = parseTime(f["gmt_refund"])
	case status == TradeSuccess || status == TradeFinished:
		// TRADE_FINISHED after TRADE_SUCCESS has the same key and deduplicates; alone (products
		// without refunds) it is the payment.
		n.Kind, n.Status = notify.KindPayment, notify.StatusSucceeded
		if n.Amount, err = yuan(f, "total_amount"); err != nil {
			return notify.Notification{}, err
		}
		n.OccurredAt = parseTime(f["gmt_payment"])
	case status == TradeClosed:
		n.Kind, n.Status = notify.KindClose, notify.StatusSucceeded
		n.OccurredAt = parseTime(f["gmt_close"])
	case status == TradeWaitBuyerPay:
		n.Kind, n.Status = notify.KindPayment, notify.StatusIgnored
	default:
		return notify.Notification{}, notify.Errorf(notify.ReasonUnsupported, "trade_status %q", truncate(status))
	}
	return n, nil
}

// parseForm URL-decodes the body's fields (bytes still in the declared charset). Duplicate keys
// are refused: a signed form never has them, and they invite confusion attacks.
func parseForm(body []byte) (map[string]string, error) {
	values, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, notify.Errorf(notify.ReasonMalformed, "body is not a form")
	}
	out := make(map[string]string, len(values))
	for k, v := range values {
		if len(v) != 1 {
			return nil, notify.Errorf(notify.ReasonMalformed, "field %q appears %d times", truncate(k), len(v))
		}
		out[k] = v[0]
	}
	return out, nil
}

// SignContent is the string Alipay signs: fields except sign and sign_type, without empty
// values, sorted by key in byte order, k=v joined with &.
func SignContent(fields map[string]string) string {
	keys := make([]string, 0, len(fields))
	for k, v := range fields {
		if k == "sign" || k == "sign_type" || v == "" {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(fields[k])
	}
	return b.String()
}

// decodeCharset transcodes verified values to UTF-8 according to the charset field.
func decodeCharset(raw map[string]string) (map[string]string, error) {
	switch strings.ToLower(raw["charset"]) {
	case "", "utf-8", "utf8":
		for k, v := range raw {
			if !utf8.ValidString(v) {
				return nil, notify.Errorf(notify.ReasonMalformed, "field %q is not valid utf-8", truncate(k))
			}
		}
		return raw, nil
	case "gbk", "gb2312", "gb18030":
		out := make(map[string]string, len(raw))
		dec := simplifiedchinese.GB18030.NewDecoder() // a superset of gbk and gb2312
		enc := simplifiedchinese.GB18030.NewEncoder()
		for k, v := range raw {
			s, err := dec.String(v)
			if err == nil {
				// The decoder never fails: it turns invalid bytes into U+FFFD. Valid input
				// encodes back to exactly the bytes received; anything else was not gbk.
				var back string
				if back, err = enc.String(s); err == nil && back != v {
					err = errors.New("invalid byte sequence")
				}
			}
			if err != nil {
				return nil, notify.Errorf(notify.ReasonMalformed, "field %q is not valid gbk", truncate(k))
			}
			out[k] = s
		}
		return out, nil
	default:
		return nil, notify.Errorf(notify.ReasonMalformed, "unsupported charset %q", truncate(raw["charset"]))
	}
}

// yuan converts a yuan amount field to fen, exactly.
func yuan(f map[string]string, field string) (int64, error) {
	v, err := money.ParseYuan(f[field])
	if err != nil {
		return 0, notify.Errorf(notify.ReasonMalformed, "%s is not a yuan amount", field)
	}
	return v, nil
}

// parseTime reads an Alipay time ("2006-01-02 15:04:05", optionally with milliseconds) in China
// time; an absent or odd one is zero (informational only).
func parseTime(s string) time.Time {
	for _, layout := range []string{time.DateTime, "2006-01-02 15:04:05.000"} {
		if t, err := time.ParseInLocation(layout, s, chinaTime); err == nil {
			return t
		}
	}
	return time.Time{}
}

// Respond implements notify.Adapter: exactly "success" (7 bytes, 200) when done; "fail" with 500
// (resend) or 400 (refused) otherwise. Alipay reads the body, not the status.
func (a *Adapter) Respond(w http.ResponseWriter, v notify.Verdict, _ string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	switch v {
	case notify.Success:
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(answerSuccess)
	case notify.Reject:
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write(answerFail)
	default:
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write(answerFail)
	}
}

// truncate keeps attacker-controlled values short in errors and logs.
func truncate(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
