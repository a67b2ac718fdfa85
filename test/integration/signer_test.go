package integration_test

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// webhookSigner signs Standard Webhooks requests the way a generic provider does: the signed
// content is id + "." + timestamp + "." + body, the signature "v1," + base64(HMAC-SHA256) with the
// key that follows "whsec_" in the secret, base64-decoded. It is written here from the
// specification on purpose, independently of the adapter under test.
type webhookSigner struct {
	secret string // "whsec_<base64>": never logged, scanned for in callbackd's log
	key    []byte
}

// newWebhookSigner generates a fresh random secret at test time.
func newWebhookSigner(t testing.TB) *webhookSigner {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatalf("generate webhook secret: %v", err)
	}
	return &webhookSigner{secret: "whsec_" + base64.StdEncoding.EncodeToString(key), key: key}
}

// sign returns the v1 signature of the message.
func (s *webhookSigner) sign(id string, ts time.Time, body []byte) string {
	mac := hmac.New(sha256.New, s.key)
	mac.Write([]byte(id + "." + strconv.FormatInt(ts.Unix(), 10) + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// headers returns the three Standard Webhooks headers for one delivery attempt.
func (s *webhookSigner) headers(id string, ts time.Time, body []byte) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	h.Set("webhook-signature", s.sign(id, ts, body))
	return h
}

// secretFragments are the strings that must never appear in callbackd's output: the whole secret,
// its base64 key, and the key in hex.
func (s *webhookSigner) secretFragments() []string {
	b64 := strings.TrimPrefix(s.secret, "whsec_")
	return []string{s.secret, b64, fmt.Sprintf("%x", s.key)}
}

// payment is the business content of one Standard Webhooks payment notification, in the field
// layout of the v1alpha1 GenericFields defaults (type, data.id, data.order_no, data.amount,
// data.currency).
type payment struct {
	OrderNo  string
	Amount   int64
	Currency string
	TxnID    string
}

// body renders the notification body.
func (p payment) body() []byte {
	b, err := json.Marshal(map[string]any{
		"type": "payment.succeeded",
		"data": map[string]any{
			"id":       p.TxnID,
			"order_no": p.OrderNo,
			"amount":   p.Amount,
			"currency": p.Currency,
		},
	})
	if err != nil {
		panic(err) // a map of strings and integers always marshals
	}
	return b
}

// TestSignerMatchesReferenceLibrary pins the test signer to the Standard Webhooks reference
// library, so an adapter that accepts our requests is checked against the specification and not
// just against us: the fixed vector is TestWebhookSign of
// github.com/standard-webhooks/standard-webhooks/libraries v0.0.1 (go/webhook_test.go), and a
// freshly signed random request must pass the library's own verifier.
func TestSignerMatchesReferenceLibrary(t *testing.T) {
	t.Run("published vector", func(t *testing.T) {
		const (
			secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
			id     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
			ts     = 1614265330
			body   = `{"test": 2432232314}`
			want   = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
		)
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		if err != nil {
			t.Fatalf("decode the published secret: %v", err)
		}
		s := &webhookSigner{secret: secret, key: key}
		if got := s.sign(id, time.Unix(ts, 0), []byte(body)); got != want {
			t.Fatalf("signature of the published vector: expected %s, got %s", want, got)
		}
	})
	t.Run("reference verifier accepts our signature", func(t *testing.T) {
		s := newWebhookSigner(t)
		wh, err := standardwebhooks.NewWebhook(s.secret)
		if err != nil {
			t.Fatalf("reference library refused the generated secret: %v", err)
		}
		body := payment{OrderNo: "ord_sig", Amount: 1999, Currency: "CNY", TxnID: "txn_sig"}.body()
		if err := wh.Verify(body, s.headers("msg_sig", time.Now(), body)); err != nil {
			t.Fatalf("reference verifier: expected our signature to verify, got %v", err)
		}
		tampered := append([]byte(nil), body...)
		tampered[len(tampered)-2] ^= 1
		if err := wh.Verify(tampered, s.headers("msg_sig", time.Now(), body)); err == nil {
			t.Fatal("reference verifier: expected a tampered body to fail, it verified")
		}
	})
}
