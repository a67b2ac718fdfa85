package alipay_test

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"testing"

	"golang.org/x/text/encoding/simplifiedchinese"

	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/internal/paysim"
)

// Regression (issue 9, hostile input suite): a gbk notification carrying bytes that are not gbk
// was accepted, because the decoder silently turns invalid sequences into U+FFFD instead of
// failing; validly signed, it paid an order end to end against a real callbackd. Invalid gbk
// must be refused as malformed, like invalid utf-8 is; valid gbk (including U+FFFD itself,
// properly encoded) still parses.
func TestParseRefusesInvalidGBK(t *testing.T) {
	f := keyMaterial(t)
	gbk := func(s string) string {
		b, err := simplifiedchinese.GBK.NewEncoder().String(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// signed builds a gbk notification whose subject is given as wire bytes.
	signed := func(subject string) paysim.Notification {
		fields := map[string]string{"app_id": testAppID, "seller_id": testSellerID, "out_trade_no": "A1",
			"trade_no": "2026010122001400000000000001", "trade_status": "TRADE_SUCCESS", "total_amount": "1.00",
			"notify_id": "ac05099524730693a8b330c5ecf72da9786", "notify_time": "2026-01-01 10:00:00",
			"notify_type": "trade_status_sync", "charset": "gbk", "version": "1.0", "subject": subject}
		sum := sha256.Sum256([]byte(paysim.AlipaySignContent(fields)))
		sig, err := rsa.SignPKCS1v15(rand.Reader, f.alipayKey, crypto.SHA256, sum[:])
		if err != nil {
			t.Fatal(err)
		}
		form := url.Values{"sign": {base64.StdEncoding.EncodeToString(sig)}, "sign_type": {"RSA2"}}
		for k, v := range fields {
			form.Set(k, v)
		}
		h := http.Header{}
		h.Set("Content-Type", "application/x-www-form-urlencoded; charset=gbk")
		return paysim.Notification{Header: h, Body: []byte(form.Encode())}
	}
	tests := []struct {
		name    string
		subject string
		ok      bool
	}{
		{"valid gbk", gbk("测试订单"), true},
		{"U+FFFD encoded in gb18030", gbk("测试") + "\x84\x31\xa4\x37", true},
		{"lead byte with an invalid trail byte", gbk("测试") + "\x81\x7f", false},
		{"lone lead byte at the end", gbk("测试") + "\x81", false},
		{"0xFF", "\xff" + gbk("订单"), false},
		{"lone 0x80", "\x80", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := post(newAdapter(t, f, testSellerID), "/notify/ali-main", signed(tc.subject))
			switch {
			case tc.ok && err != nil:
				t.Fatalf("expected accepted, got %v", err)
			case !tc.ok && (err == nil || notify.ReasonOf(err) != notify.ReasonMalformed):
				t.Fatalf("expected refusal %s, got %v (notification %+v)", notify.ReasonMalformed, err, got)
			}
		})
	}
}
