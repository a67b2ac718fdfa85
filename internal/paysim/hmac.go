package paysim

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// StripeSignature returns a Stripe-Signature header value "t=<unix>,v1=<hex>" for body, with one
// v1 per secret (several during a rotation). Stripe uses the endpoint secret string itself
// ("whsec_..." included) as the HMAC key.
func StripeSignature(t time.Time, body []byte, secrets ...string) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	parts := []string{"t=" + ts}
	for _, s := range secrets {
		mac := hmac.New(sha256.New, []byte(s))
		mac.Write([]byte(ts))
		mac.Write([]byte{'.'})
		mac.Write(body)
		parts = append(parts, "v1="+hex.EncodeToString(mac.Sum(nil)))
	}
	return strings.Join(parts, ",")
}

// Stripe builds Stripe-style webhook requests.
type Stripe struct {
	// Secrets sign each request (one v1 each).
	Secrets []string
	// Now is the clock of t=; time.Now when nil.
	Now func() time.Time
}

// Event builds a request carrying body (a JSON event).
func (s *Stripe) Event(body []byte) Notification {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Stripe-Signature", StripeSignature(now(), body, s.Secrets...))
	return Notification{Header: h, Body: body}
}

// StandardWebhooks builds Standard Webhooks requests.
type StandardWebhooks struct {
	// Secrets are "whsec_<base64>" secrets; each adds one v1 signature.
	Secrets []string
	// Now is the clock of webhook-timestamp; time.Now when nil.
	Now func() time.Time
}

// Event builds a request carrying body with message id id.
func (s *StandardWebhooks) Event(id string, body []byte) (Notification, error) {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	ts := now()
	var sigs []string
	for _, secret := range s.Secrets {
		sig, err := StandardWebhooksSignature(secret, id, ts, body)
		if err != nil {
			return Notification{}, err
		}
		sigs = append(sigs, sig)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	h.Set("webhook-signature", strings.Join(sigs, " "))
	return Notification{Header: h, Body: body}, nil
}

// StandardWebhooksSignature returns "v1,<base64 HMAC-SHA256(id.timestamp.body)>" with the key
// decoded from a "whsec_<base64>" secret.
func StandardWebhooksSignature(secret, id string, ts time.Time, body []byte) (string, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || len(key) == 0 {
		return "", errors.New("paysim: standard webhooks: secret is not whsec_<base64>")
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.", id, ts.Unix())
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}
