package stripe_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	stripego "github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/keys"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/stripe"
	"github.com/seed-1cff2221/callback-platform/internal/paysim"
)

const testAccount = "acct_1Merchant"

func newSecret(t testing.TB) string {
	t.Helper()
	s, err := paysim.NewWebhookSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newAdapter(t testing.TB, now time.Time, generic *callbackdv1alpha1.GenericFields, account string, secrets ...string) *stripe.Adapter {
	t.Helper()
	s := &stripe.Secrets{}
	for i, k := range secrets {
		s.List = append(s.List, stripe.Secret{ID: fmt.Sprintf("secret-%d", i), Key: []byte(k)})
	}
	a, err := stripe.New(stripe.Config{Channel: "stripe-main", MerchantID: testAccount, Generic: generic, AccountPath: account,
		Secrets: keys.Static(s), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatalf("stripe.New: %v", err)
	}
	return a
}

func parse(a *stripe.Adapter, header string, body []byte) (notify.Notification, error) {
	r := httptest.NewRequest(http.MethodPost, "/notify/stripe-main", bytes.NewReader(body))
	if header != "" {
		r.Header.Set("Stripe-Signature", header)
	}
	return a.Parse(context.Background(), r, body)
}

// event is a Stripe event as stripe-go's API version expects it.
func event(id, typ, object string) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"object":"event","api_version":%q,"created":1767225600,"type":%q,"account":%q,"data":{"object":%s}}`,
		id, stripego.APIVersion, typ, testAccount, object))
}

const paymentIntent = `{"id":"pi_3Q","object":"payment_intent","amount":2599,"currency":"usd","status":"succeeded","metadata":{"order_no":"S-1001"}}`

// TestStripeGoSignedPayloadsAccepted: stripe-go's own test-signing routine produces headers our
// adapter accepts, with one secret or during a roll.
func TestStripeGoSignedPayloadsAccepted(t *testing.T) {
	secret, rolled := newSecret(t), newSecret(t)
	now := time.Now()
	body := event("evt_1", "payment_intent.succeeded", paymentIntent)
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: now})
	for _, tc := range []struct {
		name    string
		secrets []string
	}{
		{"one secret", []string{secret}},
		{"during a roll (new secret first)", []string{rolled, secret}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := parse(newAdapter(t, now, nil, "", tc.secrets...), signed.Header, body)
			if err != nil {
				t.Fatalf("expected stripe-go's signed payload to be accepted, got %v", err)
			}
			want := notify.Notification{Channel: "stripe-main", Provider: stripe.ProviderName, MerchantID: testAccount, OutTradeNo: "S-1001",
				Kind: notify.KindPayment, Status: notify.StatusSucceeded, Amount: 2599, Currency: "USD", ProviderTxnID: "pi_3Q",
				NotifyID: "evt_1", OccurredAt: time.Unix(now.Unix(), 0), BodyDigest: notify.Digest(body)}
			if n != want {
				t.Fatalf("expected %+v,\ngot      %+v", want, n)
			}
		})
	}
}

// TestPaysimSignaturesAcceptedByStripeGo: paysim's Stripe-Signature passes stripe-go's verifier,
// including a header carrying two v1 signatures during a roll.
func TestPaysimSignaturesAcceptedByStripeGo(t *testing.T) {
	secret, other := newSecret(t), newSecret(t)
	body := event("evt_2", "payment_intent.succeeded", paymentIntent)
	n := (&paysim.Stripe{Secrets: []string{other, secret}}).Event(body)
	ev, err := webhook.ConstructEvent(n.Body, n.Header.Get("Stripe-Signature"), secret)
	if err != nil {
		t.Fatalf("stripe-go refused a paysim signature: %v", err)
	}
	if ev.ID != "evt_2" || string(ev.Type) != "payment_intent.succeeded" {
		t.Fatalf("expected event evt_2 payment_intent.succeeded, got %s %s", ev.ID, ev.Type)
	}
}

func TestParse(t *testing.T) {
	secret := newSecret(t)
	now := time.Unix(1_800_000_000, 0)
	refunds := &callbackdv1alpha1.GenericFields{RefundEvents: []string{"refund.updated"}, RefundNo: "data.object.metadata.refund_no",
		TransactionID: "data.object.payment_intent"}
	tests := []struct {
		name    string
		generic *callbackdv1alpha1.GenericFields
		account string
		body    []byte
		want    notify.Notification
		reason  notify.Reason
	}{
		{name: "payment", body: event("evt_1", "payment_intent.succeeded", paymentIntent),
			want: notify.Notification{OutTradeNo: "S-1001", Kind: notify.KindPayment, Status: notify.StatusSucceeded, Amount: 2599, Currency: "USD", ProviderTxnID: "pi_3Q"}},
		{name: "canceled is a close", body: event("evt_1", "payment_intent.canceled", `{"id":"pi_3Q","amount":2599,"currency":"usd","metadata":{"order_no":"S-1001"}}`),
			want: notify.Notification{OutTradeNo: "S-1001", Kind: notify.KindClose, Status: notify.StatusSucceeded, Currency: "USD", ProviderTxnID: "pi_3Q"}},
		{name: "configured refund event", generic: refunds,
			body: event("evt_1", "refund.updated", `{"id":"re_1","amount":500,"currency":"eur","payment_intent":"pi_3Q","metadata":{"order_no":"S-1001","refund_no":"R-1"}}`),
			want: notify.Notification{OutTradeNo: "S-1001", Kind: notify.KindRefund, OutRefundNo: "R-1", Status: notify.StatusSucceeded, Amount: 500, Currency: "EUR", ProviderTxnID: "pi_3Q"}},
		{name: "other event types are acknowledged and ignored", body: event("evt_1", "customer.created", `{"id":"cus_1"}`),
			want: notify.Notification{Kind: notify.KindPayment, Status: notify.StatusIgnored}},
		{name: "connected account of this merchant", account: "account", body: event("evt_1", "payment_intent.succeeded", paymentIntent),
			want: notify.Notification{OutTradeNo: "S-1001", Kind: notify.KindPayment, Status: notify.StatusSucceeded, Amount: 2599, Currency: "USD", ProviderTxnID: "pi_3Q"}},
		{name: "connected account of another merchant", account: "account",
			body: bytes.Replace(event("evt_1", "payment_intent.succeeded", paymentIntent), []byte(testAccount), []byte("acct_other"), 1), reason: notify.ReasonMerchantMismatch},
		{name: "float amount", body: event("evt_1", "payment_intent.succeeded", `{"id":"pi","amount":25.99,"currency":"usd","metadata":{"order_no":"S"}}`), reason: notify.ReasonMalformed},
		{name: "string amount", body: event("evt_1", "payment_intent.succeeded", `{"id":"pi","amount":"2599","currency":"usd","metadata":{"order_no":"S"}}`), reason: notify.ReasonMalformed},
		{name: "no order number in metadata", body: event("evt_1", "payment_intent.succeeded", `{"id":"pi","amount":1,"currency":"usd","metadata":{}}`), reason: notify.ReasonMalformed},
		{name: "not JSON", body: []byte(`t=1`), reason: notify.ReasonMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newAdapter(t, now, tc.generic, tc.account, secret)
			n, err := parse(a, paysim.StripeSignature(now, tc.body, secret), tc.body)
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
			want.Channel, want.Provider, want.MerchantID, want.NotifyID = "stripe-main", stripe.ProviderName, testAccount, "evt_1"
			want.OccurredAt, want.BodyDigest = now, notify.Digest(tc.body)
			if n != want {
				t.Fatalf("expected %+v,\ngot      %+v", want, n)
			}
		})
	}
}

func TestParseRefusesForgeries(t *testing.T) {
	secret, stranger := newSecret(t), newSecret(t)
	now := time.Unix(1_800_000_000, 0)
	body := event("evt_1", "payment_intent.succeeded", paymentIntent)
	flipped := bytes.Replace(body, []byte("2599"), []byte("2598"), 1)
	sig := paysim.StripeSignature(now, body, secret)
	v1 := sig[strings.Index(sig, "v1="):]
	tests := []struct {
		name   string
		header string
		body   []byte
		reason notify.Reason
	}{
		{"flipped body byte", sig, flipped, notify.ReasonBadSignature},
		{"unknown secret", paysim.StripeSignature(now, body, stranger), body, notify.ReasonBadSignature},
		{"timestamp changed after signing", fmt.Sprintf("t=%d,%s", now.Unix()+1, v1), body, notify.ReasonBadSignature},
		{"expired timestamp (300 s)", paysim.StripeSignature(now.Add(-300*time.Second), body, secret), body, notify.ReasonStaleTimestamp},
		{"timestamp 300 s ahead", paysim.StripeSignature(now.Add(300*time.Second), body, secret), body, notify.ReasonStaleTimestamp},
		{"v0 only", fmt.Sprintf("t=%d,v0=%s", now.Unix(), strings.TrimPrefix(v1, "v1=")), body, notify.ReasonBadSignature},
		{"two timestamps", fmt.Sprintf("t=%d,t=%d,%s", now.Unix(), now.Unix(), v1), body, notify.ReasonMalformed},
		{"no timestamp", v1, body, notify.ReasonMalformed},
		{"garbage header", "garbage", body, notify.ReasonMalformed},
		{"missing header", "", body, notify.ReasonMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := parse(newAdapter(t, now, nil, "", secret), tc.header, tc.body)
			if err == nil || notify.ReasonOf(err) != tc.reason {
				t.Fatalf("expected refusal %s, got %v (notification %+v)", tc.reason, err, n)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatal("the error message contains the secret")
			}
		})
	}
}

// FuzzParse sends arbitrary signature headers and bodies: never a panic, always a
// *notify.Error on refusal, and an accepted payment always has an order number.
func FuzzParse(f *testing.F) {
	secret := "whsec_fuzzsecretfuzzsecretfuzzsecret"
	now := time.Unix(1_800_000_000, 0)
	for _, body := range [][]byte{
		event("evt_1", "payment_intent.succeeded", paymentIntent),
		event("evt_2", "payment_intent.canceled", `{"id":"pi","metadata":{"order_no":"S"}}`),
		event("evt_3", "customer.created", `{}`),
		[]byte(`{"type":"payment_intent.succeeded","data":{"object":{"amount":1e400}}}`),
	} {
		f.Add(paysim.StripeSignature(now, body, secret), body)
	}
	f.Add("t=,v1=,v1=zz", []byte(`{`))
	a := newAdapter(f, now, nil, "", secret)
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/notify/stripe-main", bytes.NewReader(body))
		r.Header["Stripe-Signature"] = []string{header}
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
