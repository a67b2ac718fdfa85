package hostile

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/internal/paysim"
)

// Hand-made provider requests: bodies that paysim would never produce (duplicate keys, deep
// nesting, broken encodings), signed with the provider's real test keys exactly as the provider
// signs, so that the signature is valid and only the content is hostile.

// wxSigned signs body as WeChat Pay does, with a fresh timestamp and nonce.
func (e *env) wxSigned(t testing.TB, body []byte) paysim.Notification {
	t.Helper()
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	nonce := randomHex(16)
	sig, err := paysim.SignWeChat(e.wxKeys.PlatformKey, ts, nonce, body)
	if err != nil {
		t.Fatalf("sign WeChat Pay body: %v", err)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Wechatpay-Serial", e.wx.Serial)
	h.Set("Wechatpay-Signature", sig)
	h.Set("Wechatpay-Timestamp", ts)
	h.Set("Wechatpay-Nonce", nonce)
	return paysim.Notification{Header: h, Body: body}
}

// wxResource encrypts plain under the APIv3 key and renders the resource object.
func (e *env) wxResource(t testing.TB, plain []byte) string {
	t.Helper()
	nonce := randomHex(6) // 12 characters, the GCM nonce
	ct, err := paysim.SealWeChatResource(e.wxKeys.APIv3Key, nonce, "transaction", plain)
	if err != nil {
		t.Fatalf("seal WeChat Pay resource: %v", err)
	}
	return fmt.Sprintf(`{"algorithm":"AEAD_AES_256_GCM","ciphertext":%q,"nonce":%q,"associated_data":"transaction","original_type":"transaction"}`, ct, nonce)
}

// wxEnvelope renders a TRANSACTION.SUCCESS envelope around the raw members given (the resource
// member(s), and anything else).
func wxEnvelope(summary, members string) []byte {
	id, _ := paysim.RandomUUID()
	return []byte(`{"id":"` + id + `","create_time":"` + paysim.WeChatTime(time.Now()) +
		`","resource_type":"encrypt-resource","event_type":"TRANSACTION.SUCCESS","summary":"` + summary + `",` + members + `}`)
}

// wxPlain is the JSON plaintext of o's payment.
func wxPlain(t testing.TB, o order) string {
	t.Helper()
	b, err := json.Marshal(wxPayment(o))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// aliFields are the wire fields of o's TRADE_SUCCESS notification, before signing (UTF-8).
func aliFields(o order) map[string]string {
	f := map[string]string{}
	for k, v := range aliTrade(o).Fields() {
		if v != "" {
			f[k] = v
		}
	}
	f["notify_id"] = randomHex(17)
	f["notify_time"] = paysim.AlipayTime(time.Now())
	f["notify_type"] = "trade_status_sync"
	f["app_id"] = aliApp
	f["charset"] = "utf-8"
	f["version"] = "1.0"
	return f
}

// aliSigned signs fields whose values are already the wire bytes (in the declared charset) as
// Alipay does, and form-encodes them; extra is appended to the body as is (after signing).
func (e *env) aliSigned(t testing.TB, fields map[string]string, extra string) paysim.Notification {
	t.Helper()
	sum := sha256.Sum256([]byte(paysim.AlipaySignContent(fields)))
	sig, err := rsa.SignPKCS1v15(rand.Reader, e.aliKeys.AlipayKey, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatalf("sign Alipay fields: %v", err)
	}
	all := map[string]string{"sign": base64.StdEncoding.EncodeToString(sig), "sign_type": "RSA2"}
	for k, v := range fields {
		all[k] = v
	}
	keys := make([]string, 0, len(all))
	for k := range all {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, url.QueryEscape(k)+"="+url.QueryEscape(all[k]))
	}
	h := http.Header{}
	h.Set("Content-Type", "application/x-www-form-urlencoded; charset="+fields["charset"])
	return paysim.Notification{Header: h, Body: []byte(strings.Join(parts, "&") + extra)}
}
