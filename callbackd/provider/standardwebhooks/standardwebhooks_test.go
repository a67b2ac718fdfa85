package standardwebhooks

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	reference "github.com/standard-webhooks/standard-webhooks/libraries/go"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/keys"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
)

// Published test vectors of the Standard Webhooks reference library, copied as data from
// github.com/standard-webhooks/standard-webhooks/libraries@v0.0.1, go/webhook_test.go
// (TestWebhookSign and the fixtures of TestWebhook).
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorMsgID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = int64(1614265330)
	vectorPayload   = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	// vectorWrongSignature is the reference's "invalid signature" fixture.
	vectorWrongSignature = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
)

const testMerchant = "acct_1"

func newSecret(t testing.TB) (string, []byte) {
	t.Helper()
	key := make([]byte, 24)
	if _, err := rand.Read(key); err != nil {
		t.Fatalf("generate secret: %v", err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(key), key
}

func newAdapter(t testing.TB, now time.Time, generic *callbackdv1alpha1.GenericFields, account string, secrets ...[]byte) *Adapter {
	t.Helper()
	s := &Secrets{}
	for i, k := range secrets {
		s.List = append(s.List, Secret{ID: fmt.Sprintf("secret-%d", i), Key: k})
	}
	a, err := New(Config{
		Channel:     "generic-main",
		MerchantID:  testMerchant,
		Generic:     generic,
		AccountPath: account,
		Secrets:     keys.Static(s),
		Now:         func() time.Time { return now },
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return a
}

func request(h Headers, body []byte, prefix string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/notify/generic-main", bytes.NewReader(body))
	if prefix == "" {
		prefix = "webhook-"
	}
	if h.ID != "" {
		r.Header.Set(prefix+"id", h.ID)
	}
	if h.Timestamp != "" {
		r.Header.Set(prefix+"timestamp", h.Timestamp)
	}
	if h.Signature != "" {
		r.Header.Set(prefix+"signature", h.Signature)
	}
	return r
}

func TestReferenceVectors(t *testing.T) {
	key, err := ParseSecret(vectorSecret)
	if err != nil {
		t.Fatalf("ParseSecret(vector secret): %v", err)
	}
	ts := time.Unix(vectorTimestamp, 0)
	if got := Sign(key, vectorMsgID, ts, []byte(vectorPayload)); got != vectorSignature {
		t.Fatalf("Sign(vector): expected %s, got %s", vectorSignature, got)
	}
	tolerance := DefaultTolerance
	tests := []struct {
		name   string
		header Headers
		now    time.Time
		want   notify.Reason // "" means accepted
	}{
		{"valid signature is valid", Headers{vectorMsgID, fmt.Sprint(vectorTimestamp), vectorSignature}, ts, ""},
		{"missing id returns error", Headers{"", fmt.Sprint(vectorTimestamp), vectorSignature}, ts, notify.ReasonMalformed},
		{"missing timestamp returns error", Headers{vectorMsgID, "", vectorSignature}, ts, notify.ReasonMalformed},
		{"missing signature returns error", Headers{vectorMsgID, fmt.Sprint(vectorTimestamp), ""}, ts, notify.ReasonMalformed},
		{"invalid signature is invalid", Headers{vectorMsgID, fmt.Sprint(vectorTimestamp), vectorWrongSignature}, ts, notify.ReasonBadSignature},
		{"partial signature is invalid", Headers{vectorMsgID, fmt.Sprint(vectorTimestamp), "v1,"}, ts, notify.ReasonBadSignature},
		{"old timestamp fails", Headers{vectorMsgID, fmt.Sprint(vectorTimestamp), vectorSignature}, ts.Add(tolerance), notify.ReasonStaleTimestamp},
		{"new timestamp fails", Headers{vectorMsgID, fmt.Sprint(vectorTimestamp), vectorSignature}, ts.Add(-tolerance - time.Second), notify.ReasonStaleTimestamp},
		{"just inside the window (old)", Headers{vectorMsgID, fmt.Sprint(vectorTimestamp), vectorSignature}, ts.Add(tolerance - time.Second), ""},
		{"just inside the window (new)", Headers{vectorMsgID, fmt.Sprint(vectorTimestamp), vectorSignature}, ts.Add(-tolerance + time.Second), ""},
		{"valid multi sig is valid", Headers{vectorMsgID, fmt.Sprint(vectorTimestamp), strings.Join([]string{
			vectorWrongSignature, "v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=", vectorSignature, vectorWrongSignature}, " ")}, ts, ""},
		{"invalid timestamp", Headers{vectorMsgID, fmt.Sprint(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).Unix()), vectorSignature}, ts, notify.ReasonStaleTimestamp},
		{"non-numeric timestamp", Headers{vectorMsgID, "1614265330.0", vectorSignature}, ts, notify.ReasonMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newAdapter(t, tc.now, nil, "", key)
			_, err := a.Verify(tc.header, []byte(vectorPayload))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("expected the vector to verify, got %v", err)
				}
				return
			}
			if got := notify.ReasonOf(err); err == nil || got != tc.want {
				t.Fatalf("expected refusal %s, got %v", tc.want, err)
			}
		})
	}
}

// TestReferenceLibrarySignsWeVerify: messages signed by the reference library are accepted, and
// our signatures are accepted by the reference library.
func TestReferenceLibraryInterop(t *testing.T) {
	secret, key := newSecret(t)
	wh, err := reference.NewWebhook(secret)
	if err != nil {
		t.Fatalf("reference NewWebhook: %v", err)
	}
	now := time.Now()
	body := []byte(`{"type":"payment.succeeded","data":{"order_no":"A1001","amount":9900,"currency":"cny","id":"txn_1"}}`)
	sig, err := wh.Sign("msg_1", now, body)
	if err != nil {
		t.Fatalf("reference Sign: %v", err)
	}
	a := newAdapter(t, now, nil, "", key)
	n, err := a.Parse(context.Background(), request(Headers{"msg_1", fmt.Sprint(now.Unix()), sig}, body, ""), body)
	if err != nil {
		t.Fatalf("our adapter refused a reference-signed message: %v", err)
	}
	if n.OutTradeNo != "A1001" || n.Amount != 9900 || n.Currency != "CNY" || n.Kind != notify.KindPayment {
		t.Fatalf("expected payment A1001 of 9900 CNY, got %+v", n)
	}

	h := http.Header{}
	h.Set(reference.HeaderWebhookID, "msg_2")
	h.Set(reference.HeaderWebhookTimestamp, fmt.Sprint(now.Unix()))
	h.Set(reference.HeaderWebhookSignature, Sign(key, "msg_2", now, body))
	if err := wh.Verify(body, h); err != nil {
		t.Fatalf("reference library refused our signature: %v", err)
	}
}

func TestParse(t *testing.T) {
	_, key := newSecret(t)
	now := time.Unix(1_800_000_000, 0)
	custom := &callbackdv1alpha1.GenericFields{OrderNo: "order.no", Amount: "order.total", EventType: "event", ClosedEvents: []string{"order.closed"}}
	tests := []struct {
		name    string
		generic *callbackdv1alpha1.GenericFields
		account string
		body    string
		want    notify.Notification // compared on the business fields
		reason  notify.Reason
	}{
		{name: "payment", body: `{"type":"payment.succeeded","data":{"order_no":"A1","amount":100,"currency":"usd","id":"tx"}}`,
			want: notify.Notification{Kind: notify.KindPayment, Status: notify.StatusSucceeded, OutTradeNo: "A1", Amount: 100, Currency: "USD", ProviderTxnID: "tx"}},
		{name: "refund", body: `{"type":"refund.succeeded","data":{"order_no":"A1","refund_no":"R1","amount":40}}`,
			want: notify.Notification{Kind: notify.KindRefund, Status: notify.StatusSucceeded, OutTradeNo: "A1", OutRefundNo: "R1", Amount: 40}},
		{name: "other event types are acknowledged and ignored", body: `{"type":"customer.created","data":{}}`,
			want: notify.Notification{Kind: notify.KindPayment, Status: notify.StatusIgnored}},
		{name: "configured paths", generic: custom, body: `{"event":"payment.succeeded","order":{"no":"B2","total":7}}`,
			want: notify.Notification{Kind: notify.KindPayment, Status: notify.StatusSucceeded, OutTradeNo: "B2", Amount: 7}},
		{name: "configured close event", generic: custom, body: `{"event":"order.closed","order":{"no":"B2"}}`,
			want: notify.Notification{Kind: notify.KindClose, Status: notify.StatusSucceeded, OutTradeNo: "B2"}},
		{name: "account of this merchant", account: "account", body: `{"type":"payment.succeeded","account":"acct_1","data":{"order_no":"A1","amount":1}}`,
			want: notify.Notification{Kind: notify.KindPayment, Status: notify.StatusSucceeded, OutTradeNo: "A1", Amount: 1}},
		{name: "account of another merchant", account: "account", body: `{"type":"payment.succeeded","account":"acct_2","data":{"order_no":"A1","amount":1}}`, reason: notify.ReasonMerchantMismatch},
		{name: "account missing", account: "account", body: `{"type":"payment.succeeded","data":{"order_no":"A1","amount":1}}`, reason: notify.ReasonMalformed},
		{name: "float amount", body: `{"type":"payment.succeeded","data":{"order_no":"A1","amount":1.5}}`, reason: notify.ReasonMalformed},
		{name: "float amount with zero fraction", body: `{"type":"payment.succeeded","data":{"order_no":"A1","amount":100.0}}`, reason: notify.ReasonMalformed},
		{name: "exponent amount", body: `{"type":"payment.succeeded","data":{"order_no":"A1","amount":1e2}}`, reason: notify.ReasonMalformed},
		{name: "string amount", body: `{"type":"payment.succeeded","data":{"order_no":"A1","amount":"100"}}`, reason: notify.ReasonMalformed},
		{name: "negative amount", body: `{"type":"payment.succeeded","data":{"order_no":"A1","amount":-1}}`, reason: notify.ReasonMalformed},
		{name: "overflowing amount", body: `{"type":"payment.succeeded","data":{"order_no":"A1","amount":9223372036854775808}}`, reason: notify.ReasonMalformed},
		{name: "missing amount", body: `{"type":"payment.succeeded","data":{"order_no":"A1"}}`, reason: notify.ReasonMalformed},
		{name: "missing order number", body: `{"type":"payment.succeeded","data":{"amount":1}}`, reason: notify.ReasonMalformed},
		{name: "numeric order number", body: `{"type":"payment.succeeded","data":{"order_no":1,"amount":1}}`, reason: notify.ReasonMalformed},
		{name: "refund without refund number", body: `{"type":"refund.succeeded","data":{"order_no":"A1","amount":1}}`, reason: notify.ReasonMalformed},
		{name: "missing event type", body: `{"data":{"order_no":"A1","amount":1}}`, reason: notify.ReasonMalformed},
		{name: "bad currency", body: `{"type":"payment.succeeded","data":{"order_no":"A1","amount":1,"currency":"dollars"}}`, reason: notify.ReasonMalformed},
		{name: "not JSON", body: `type=payment.succeeded`, reason: notify.ReasonMalformed},
		{name: "trailing data", body: `{"type":"payment.succeeded","data":{"order_no":"A1","amount":1}} {}`, reason: notify.ReasonMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newAdapter(t, now, tc.generic, tc.account, key)
			body := []byte(tc.body)
			h := Headers{"msg_x", fmt.Sprint(now.Unix()), Sign(key, "msg_x", now, body)}
			n, err := a.Parse(context.Background(), request(h, body, ""), body)
			if tc.reason != "" {
				if err == nil || notify.ReasonOf(err) != tc.reason {
					t.Fatalf("expected refusal %s, got %v (notification %+v)", tc.reason, err, n)
				}
				return
			}
			if err != nil {
				t.Fatalf("expected a notification, got %v", err)
			}
			want := tc.want
			want.Channel, want.Provider, want.MerchantID, want.NotifyID = "generic-main", ProviderName, testMerchant, "msg_x"
			want.OccurredAt, want.BodyDigest = now, notify.Digest(body)
			if n != want {
				t.Fatalf("expected %+v, got %+v", want, n)
			}
		})
	}
}

func TestParseRefusesForgeries(t *testing.T) {
	_, key := newSecret(t)
	_, otherKey := newSecret(t)
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"type":"payment.succeeded","data":{"order_no":"A1","amount":100}}`)
	ts := fmt.Sprint(now.Unix())
	flipped := bytes.Clone(body)
	flipped[len(flipped)-3] ^= 0x01
	tests := []struct {
		name   string
		h      Headers
		prefix string
		body   []byte
		reason notify.Reason
	}{
		{"flipped body byte", Headers{"m", ts, Sign(key, "m", now, body)}, "", flipped, notify.ReasonBadSignature},
		{"signed with an unknown secret", Headers{"m", ts, Sign(otherKey, "m", now, body)}, "", body, notify.ReasonBadSignature},
		{"id changed after signing", Headers{"m2", ts, Sign(key, "m", now, body)}, "", body, notify.ReasonBadSignature},
		{"timestamp changed after signing", Headers{"m", fmt.Sprint(now.Unix() + 1), Sign(key, "m", now, body)}, "", body, notify.ReasonBadSignature},
		{"expired timestamp", Headers{"m", fmt.Sprint(now.Add(-DefaultTolerance).Unix()), Sign(key, "m", now.Add(-DefaultTolerance), body)}, "", body, notify.ReasonStaleTimestamp},
		{"future timestamp", Headers{"m", fmt.Sprint(now.Add(DefaultTolerance).Unix()), Sign(key, "m", now.Add(DefaultTolerance), body)}, "", body, notify.ReasonStaleTimestamp},
		{"negative timestamp", Headers{"m", "-1", Sign(key, "m", time.Unix(-1, 0), body)}, "", body, notify.ReasonMalformed},
		{"ed25519 scheme only", Headers{"m", ts, "v1a," + base64.StdEncoding.EncodeToString(make([]byte, 64))}, "", body, notify.ReasonBadSignature},
		{"signature without version", Headers{"m", ts, strings.TrimPrefix(Sign(key, "m", now, body), "v1,")}, "", body, notify.ReasonBadSignature},
		{"headers missing", Headers{}, "", body, notify.ReasonMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newAdapter(t, now, nil, "", key)
			n, err := a.Parse(context.Background(), request(tc.h, tc.body, tc.prefix), tc.body)
			if err == nil || notify.ReasonOf(err) != tc.reason {
				t.Fatalf("expected refusal %s, got %v (notification %+v)", tc.reason, err, n)
			}
			var nerr *notify.Error
			if !errors.As(err, &nerr) {
				t.Fatalf("expected a *notify.Error, got %T", err)
			}
		})
	}
}

func TestParseAcceptsSvixHeadersAndRotation(t *testing.T) {
	_, oldKey := newSecret(t)
	_, newKey := newSecret(t)
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"type":"payment.succeeded","data":{"order_no":"A1","amount":100}}`)
	ts := fmt.Sprint(now.Unix())
	a := newAdapter(t, now, nil, "", oldKey, newKey)
	for _, tc := range []struct {
		name   string
		prefix string
		sig    string
	}{
		{"svix headers", "svix-", Sign(oldKey, "m", now, body)},
		{"signed with the new secret", "webhook-", Sign(newKey, "m", now, body)},
		{"both signatures sent", "webhook-", Sign(oldKey, "m", now, body) + " " + Sign(newKey, "m", now, body)},
	} {
		if _, err := a.Parse(context.Background(), request(Headers{"m", ts, tc.sig}, body, tc.prefix), body); err != nil {
			t.Errorf("%s: expected acceptance, got %v", tc.name, err)
		}
	}
}

func TestRespond(t *testing.T) {
	a := newAdapter(t, time.Now(), nil, "", []byte("k"))
	for _, tc := range []struct {
		v        notify.Verdict
		status   int
		bodyPart string
	}{
		{notify.Success, http.StatusNoContent, ""},
		{notify.Retry, http.StatusInternalServerError, `"status":"retry"`},
		{notify.Reject, http.StatusBadRequest, `"status":"rejected"`},
	} {
		rec := httptest.NewRecorder()
		a.Respond(rec, tc.v, "why")
		if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.bodyPart) {
			t.Errorf("Respond(%s): expected %d with %q, got %d %q", tc.v, tc.status, tc.bodyPart, rec.Code, rec.Body.String())
		}
		if tc.v == notify.Success && rec.Body.Len() != 0 {
			t.Errorf("Respond(success): expected an empty body, got %q", rec.Body.String())
		}
	}
}

func TestParseSecretRefusesGarbageWithoutEchoingIt(t *testing.T) {
	for _, s := range []string{"whsec_not base64!!", "whsec_", ""} {
		_, err := ParseSecret(s)
		if err == nil {
			t.Errorf("ParseSecret(%q): expected an error", s)
			continue
		}
		if s != "" && strings.Contains(err.Error(), strings.TrimPrefix(s, SecretPrefix)) && strings.TrimPrefix(s, SecretPrefix) != "" {
			t.Errorf("ParseSecret error echoes the secret: %v", err)
		}
	}
}

// FuzzParse feeds arbitrary headers and bodies to the adapter: it must never panic, and whatever
// it accepts must carry a business key.
func FuzzParse(f *testing.F) {
	key := []byte("fuzz-secret-key-0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	for _, body := range []string{
		`{"type":"payment.succeeded","data":{"order_no":"A1","amount":100,"currency":"cny","id":"tx"}}`,
		`{"type":"refund.succeeded","data":{"order_no":"A1","refund_no":"R1","amount":40}}`,
		`{"type":"customer.created"}`,
		`{"type":"payment.succeeded","data":{"order_no":"A1","amount":1.5}}`,
		`[]`,
	} {
		f.Add("msg_1", fmt.Sprint(now.Unix()), Sign(key, "msg_1", now, []byte(body)), []byte(body))
	}
	f.Add("msg_1", "x", "v1,AAAA v1a,BBBB", []byte(`{`))
	a := newAdapter(f, now, nil, "", key)
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/notify/x", bytes.NewReader(body))
		r.Header["Webhook-Id"] = []string{id}
		r.Header["Webhook-Timestamp"] = []string{ts}
		r.Header["Webhook-Signature"] = []string{sig}
		n, err := a.Parse(context.Background(), r, body)
		if err != nil {
			var nerr *notify.Error
			if !errors.As(err, &nerr) {
				t.Fatalf("expected a *notify.Error, got %T: %v", err, err)
			}
			return
		}
		if n.Status != notify.StatusIgnored && n.OutTradeNo == "" {
			t.Fatalf("accepted a notification without an order number: %+v", n)
		}
	})
}

func TestSecretsNeverPrintTheirKeys(t *testing.T) {
	s := &Secrets{List: []Secret{{ID: "current", Key: []byte("super-secret-key-material")}}}
	for _, format := range []string{"%v", "%+v", "%#v"} {
		if got := fmt.Sprintf(format, s); strings.Contains(got, "super-secret") || !strings.Contains(got, "current") {
			t.Errorf("%s of the secrets: expected the id without the key, got %s", format, got)
		}
	}
}

// BenchmarkParse measures one HMAC verification and field extraction.
func BenchmarkParse(b *testing.B) {
	key := []byte("bench-secret-key-0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	a := newAdapter(b, now, nil, "", key)
	body := []byte(`{"type":"payment.succeeded","data":{"order_no":"A1","amount":100,"currency":"cny","id":"tx"}}`)
	r := request(Headers{"msg_1", fmt.Sprint(now.Unix()), Sign(key, "msg_1", now, body)}, body, "")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Parse(context.Background(), r, body); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAsymmetricV1aSignatures: a "whpk_" public key file verifies "v1a" ed25519 signatures of
// "id.timestamp.body"; a v1a signature by another key, or over another body, is refused.
func TestAsymmetricV1aSignatures(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, strangerKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	hmacSecret, _ := newSecret(t)
	dir := t.TempDir()
	files := map[string]string{"pk": PublicKeyPrefix + base64.StdEncoding.EncodeToString(pub) + "\n", "sym": hmacSecret}
	var paths []string
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	secrets, err := LoadSecretFiles(paths)
	if err != nil {
		t.Fatalf("LoadSecretFiles: %v", err)
	}
	now := time.Unix(1_800_000_000, 0)
	a, err := New(Config{Channel: "c", MerchantID: testMerchant, Secrets: keys.Static(secrets), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"type":"payment.succeeded","data":{"order_no":"A1","amount":100}}`)
	ts := fmt.Sprint(now.Unix())
	v1a := func(k ed25519.PrivateKey, b []byte) string {
		return "v1a," + base64.StdEncoding.EncodeToString(ed25519.Sign(k, []byte("m."+ts+"."+string(b))))
	}
	if _, err := a.Verify(Headers{"m", ts, v1a(priv, body)}, body); err != nil {
		t.Fatalf("expected a v1a signature by the configured key to verify, got %v", err)
	}
	for name, sig := range map[string]string{
		"another key":  v1a(strangerKey, body),
		"another body": v1a(priv, []byte(`{}`)),
	} {
		if _, err := a.Verify(Headers{"m", ts, sig}, body); notify.ReasonOf(err) != notify.ReasonBadSignature {
			t.Errorf("v1a by %s: expected bad_signature, got %v", name, err)
		}
	}
	if _, err := LoadSecretFiles([]string{writeFile(t, dir, "bad", "whpk_AAAA")}); err == nil || strings.Contains(err.Error(), "AAAA") {
		t.Errorf("expected a short whpk_ key to be refused without echoing it, got %v", err)
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
