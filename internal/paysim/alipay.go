package paysim

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"golang.org/x/text/encoding/simplifiedchinese"
)

// Alipay trade statuses.
const (
	AlipayWaitBuyerPay  = "WAIT_BUYER_PAY"
	AlipayTradeSuccess  = "TRADE_SUCCESS"
	AlipayTradeFinished = "TRADE_FINISHED"
	AlipayTradeClosed   = "TRADE_CLOSED"
)

// Alipay signs asynchronous notifications the way Alipay does: form fields (without sign,
// sign_type and empty values) sorted by key, joined as k=v with &, in the declared charset's
// bytes, signed SHA256withRSA (RSA2) with Alipay's private key, and sent form-encoded in that
// charset.
type Alipay struct {
	// AppID is the merchant application the notifications are for (app_id).
	AppID string
	// Key is Alipay's private key (the merchant verifies with the matching "Alipay public key").
	Key *rsa.PrivateKey
	// Charset is "utf-8" (default) or "gbk".
	Charset string
	// Now is the clock of notify_time; time.Now when nil.
	Now func() time.Time
}

// AlipayOptions alter one notification, for negative tests. The zero value is a faithful one.
type AlipayOptions struct {
	// SignType "RSA" signs with SHA1withRSA and says so: the downgrade the receiver must refuse.
	SignType string
	// OmitSignType leaves sign_type out of the form.
	OmitSignType bool
}

// AlipayTrade holds the usual fields of a trade notification; empty fields are not sent.
type AlipayTrade struct {
	OutTradeNo    string
	TradeNo       string
	TradeStatus   string
	TotalAmount   string // yuan, e.g. "99.00"
	ReceiptAmount string
	SellerID      string
	BuyerID       string
	Subject       string
	GmtPayment    time.Time
	// Refund fields: a refund notification carries out_biz_no and refund_fee.
	OutBizNo  string
	RefundFee string
	GmtRefund time.Time
	// NotifyID is kept the same across resends of one notification; random when empty.
	NotifyID string
}

// Fields renders the trade as notification fields (UTF-8).
func (t AlipayTrade) Fields() map[string]string {
	m := map[string]string{
		"out_trade_no":   t.OutTradeNo,
		"trade_no":       t.TradeNo,
		"trade_status":   t.TradeStatus,
		"total_amount":   t.TotalAmount,
		"receipt_amount": t.ReceiptAmount,
		"seller_id":      t.SellerID,
		"buyer_id":       t.BuyerID,
		"subject":        t.Subject,
		"out_biz_no":     t.OutBizNo,
		"refund_fee":     t.RefundFee,
		"notify_id":      t.NotifyID,
	}
	if !t.GmtPayment.IsZero() {
		m["gmt_payment"] = AlipayTime(t.GmtPayment)
	}
	if !t.GmtRefund.IsZero() {
		m["gmt_refund"] = AlipayTime(t.GmtRefund) + ".000"
	}
	return m
}

// AlipayTime formats t as Alipay does ("2006-01-02 15:04:05", China time).
func AlipayTime(t time.Time) string { return t.In(chinaTime).Format(time.DateTime) }

// Trade builds the notification of a trade.
func (a *Alipay) Trade(t AlipayTrade, opts AlipayOptions) (Notification, error) {
	return a.Notify(t.Fields(), opts)
}

// Notify builds a notification from UTF-8 fields. notify_id, notify_time, notify_type, app_id,
// charset, version and sign_type are filled in when absent; empty fields are dropped.
func (a *Alipay) Notify(fields map[string]string, opts AlipayOptions) (Notification, error) {
	if a.Key == nil {
		return Notification{}, errors.New("paysim: alipay: signing key is required")
	}
	charset := strings.ToLower(a.Charset)
	if charset == "" {
		charset = "utf-8"
	}
	if charset != "utf-8" && charset != "gbk" {
		return Notification{}, fmt.Errorf("paysim: alipay: unsupported charset %q", a.Charset)
	}
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	signType := opts.SignType
	if signType == "" {
		signType = "RSA2"
	}
	f := make(map[string]string, len(fields)+8)
	for k, v := range fields {
		if v != "" {
			f[k] = v
		}
	}
	defaults := map[string]string{
		"notify_time": AlipayTime(now()),
		"notify_type": "trade_status_sync",
		"app_id":      a.AppID,
		"charset":     charset,
		"version":     "1.0",
	}
	if !opts.OmitSignType {
		defaults["sign_type"] = signType
	}
	if f["notify_id"] == "" {
		id, err := RandomString(34)
		if err != nil {
			return Notification{}, err
		}
		defaults["notify_id"] = id
	}
	for k, v := range defaults {
		if _, ok := f[k]; !ok && v != "" {
			f[k] = v
		}
	}
	// Everything on the wire is in the declared charset.
	enc := make(map[string]string, len(f))
	for k, v := range f {
		if charset == "gbk" {
			b, err := simplifiedchinese.GBK.NewEncoder().String(v)
			if err != nil {
				return Notification{}, fmt.Errorf("paysim: alipay: field %s is not representable in gbk: %w", k, err)
			}
			v = b
		}
		enc[k] = v
	}
	content := AlipaySignContent(enc)
	var sig []byte
	var err error
	switch signType {
	case "RSA2":
		sum := sha256.Sum256([]byte(content))
		sig, err = rsa.SignPKCS1v15(rand.Reader, a.Key, crypto.SHA256, sum[:])
	case "RSA":
		sum := sha1.Sum([]byte(content))
		sig, err = rsa.SignPKCS1v15(rand.Reader, a.Key, crypto.SHA1, sum[:])
	default:
		return Notification{}, fmt.Errorf("paysim: alipay: unsupported sign_type %q", signType)
	}
	if err != nil {
		return Notification{}, fmt.Errorf("paysim: alipay: sign: %w", err)
	}
	enc["sign"] = base64.StdEncoding.EncodeToString(sig)
	h := http.Header{}
	h.Set("Content-Type", "application/x-www-form-urlencoded; charset="+charset)
	return Notification{Header: h, Body: []byte(encodeForm(enc))}, nil
}

// AlipaySignContent is the string Alipay signs: every field except sign and sign_type, without
// empty values, sorted by key in byte order, as k=v joined with &, values not URL-encoded.
func AlipaySignContent(fields map[string]string) string {
	keys := make([]string, 0, len(fields))
	for k, v := range fields {
		if k == "sign" || k == "sign_type" || v == "" {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
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

// encodeForm form-encodes the (charset-encoded) fields in key order.
func encodeForm(fields map[string]string) string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(url.QueryEscape(k))
		b.WriteByte('=')
		b.WriteString(url.QueryEscape(fields[k]))
	}
	return b.String()
}
