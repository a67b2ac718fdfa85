// Package stripe is the adapter of Stripe-style webhooks: a Stripe-Signature header
// "t=<unix>,v1=<hex>[,v1=<hex>...]" whose v1 values are HMAC-SHA256 over "t.body" with the
// endpoint secret (several during a secret roll), a 300 s timestamp tolerance, and business
// fields read from the JSON event at the paths the channel configures (Stripe's shapes by
// default: data.object.metadata.order_no, data.object.amount, data.object.currency).
package stripe

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/keys"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/internal/jsonfields"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/internal/reply"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/internal/telemetry"
)

// ProviderName is the adapter's name in metrics and logs.
const ProviderName = string(callbackdv1alpha1.ProviderStripe)

// DefaultTolerance is the accepted distance between t= and now, both ways.
const DefaultTolerance = 300 * time.Second

// DefaultFields are Stripe's event shapes. Refund events are not defaulted: a Stripe refund's
// success is a status inside refund.* events, so a channel that wants refunds names its event
// types and refund number path.
var DefaultFields = callbackdv1alpha1.GenericFields{
	OrderNo:       "data.object.metadata.order_no",
	Amount:        "data.object.amount",
	Currency:      "data.object.currency",
	EventType:     "type",
	TransactionID: "data.object.id",
	RefundNo:      "data.object.metadata.refund_no",
	PaidEvents:    []string{"payment_intent.succeeded"},
	ClosedEvents:  []string{"payment_intent.canceled"},
}

// Secret is one endpoint signing secret. ID names it in metrics (the file name), never the key.
type Secret struct {
	ID  string
	Key []byte
}

// Secrets are the secrets accepted at once; more than one while a secret is rolled.
type Secrets struct {
	List []Secret
}

// LoadSecretFiles reads one secret per file (surrounding white space trimmed; the string,
// "whsec_" included, is the HMAC key as Stripe uses it). Missing files are skipped so that a
// "previous" file can exist only during a roll; at least one secret must be found.
func LoadSecretFiles(paths []string) (*Secrets, error) {
	out := &Secrets{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read webhook secret file %s: %w", p, err)
		}
		key := strings.TrimSpace(string(b))
		if key == "" {
			return nil, fmt.Errorf("webhook secret file %s is empty", p)
		}
		out.List = append(out.List, Secret{ID: filepath.Base(p), Key: []byte(key)})
	}
	if len(out.List) == 0 {
		return nil, fmt.Errorf("none of the %d webhook secret files exists", len(paths))
	}
	return out, nil
}

// Config configures an Adapter.
type Config struct {
	// Channel is the channel name stamped on notifications and metrics.
	Channel string
	// MerchantID is the account the channel receives for (ChannelSettings.Merchant.MerchantID).
	MerchantID string
	// Generic are the configured field paths; nil or empty fields take DefaultFields.
	Generic *callbackdv1alpha1.GenericFields
	// AccountPath is the path of an account field (Stripe Connect: "account"); when set it must
	// equal MerchantID.
	AccountPath string
	// Tolerance of t=, both ways; DefaultTolerance when zero.
	Tolerance time.Duration
	// Secrets are the accepted endpoint secrets (re-read when their files change).
	Secrets *keys.Set[Secrets]
	// Metrics counts verifications per secret; nil records nothing.
	Metrics *telemetry.Metrics
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Adapter verifies and normalizes Stripe-style events. It is safe for concurrent use.
type Adapter struct {
	cfg    Config
	fields jsonfields.Fields
}

var _ notify.Adapter = (*Adapter)(nil)

// New validates cfg and returns the adapter.
func New(cfg Config) (*Adapter, error) {
	if cfg.Channel == "" {
		return nil, errors.New("stripe: new adapter: channel name is required")
	}
	if cfg.MerchantID == "" {
		return nil, errors.New("stripe: new adapter: merchant.merchantID is required")
	}
	if cfg.Secrets == nil || cfg.Secrets.Current() == nil || len(cfg.Secrets.Current().List) == 0 {
		return nil, errors.New("stripe: new adapter: at least one webhook secret is required")
	}
	if cfg.Tolerance <= 0 {
		cfg.Tolerance = DefaultTolerance
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	fields, err := jsonfields.Resolve(cfg.Generic, DefaultFields, cfg.AccountPath)
	if err != nil {
		return nil, fmt.Errorf("stripe: new adapter: %w", err)
	}
	return &Adapter{cfg: cfg, fields: fields}, nil
}

// Provider implements notify.Adapter.
func (a *Adapter) Provider() string { return ProviderName }

// Verify checks a Stripe-Signature header against body and returns the signed time.
func (a *Adapter) Verify(header string, body []byte) (time.Time, error) {
	if header == "" {
		return time.Time{}, notify.Errorf(notify.ReasonMalformed, "missing Stripe-Signature header")
	}
	var tsText string
	var sigs [][]byte
	for _, item := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return time.Time{}, notify.Errorf(notify.ReasonMalformed, "Stripe-Signature is not a list of k=v")
		}
		switch k {
		case "t":
			if tsText != "" {
				return time.Time{}, notify.Errorf(notify.ReasonMalformed, "Stripe-Signature has several t=")
			}
			tsText = v
		case "v1":
			if sig, err := hex.DecodeString(v); err == nil && len(sig) == sha256.Size {
				sigs = append(sigs, sig)
			}
		}
	}
	ts, err := parseUnix(tsText)
	if err != nil {
		return time.Time{}, notify.Errorf(notify.ReasonMalformed, "Stripe-Signature t= is not a unix time in seconds")
	}
	if d := time.Duration(a.cfg.Now().Unix()-ts.Unix()) * time.Second; d >= a.cfg.Tolerance || -d >= a.cfg.Tolerance {
		return time.Time{}, notify.Errorf(notify.ReasonStaleTimestamp, "Stripe-Signature t= is %s away from now (tolerance %s)", d, a.cfg.Tolerance)
	}
	if len(sigs) == 0 {
		return time.Time{}, notify.Errorf(notify.ReasonBadSignature, "no v1 signature in Stripe-Signature")
	}
	for _, s := range a.cfg.Secrets.Current().List {
		mac := hmac.New(sha256.New, s.Key)
		mac.Write([]byte(tsText))
		mac.Write([]byte{'.'})
		mac.Write(body)
		want := mac.Sum(nil)
		for _, got := range sigs {
			if hmac.Equal(want, got) {
				a.cfg.Metrics.Verified(a.cfg.Channel, s.ID, true)
				return ts, nil
			}
		}
	}
	a.cfg.Metrics.Verified(a.cfg.Channel, "unmatched", false)
	return time.Time{}, notify.Errorf(notify.ReasonBadSignature, "no v1 signature matches a configured secret")
}

// Parse implements notify.Adapter: verify, then read the business fields.
func (a *Adapter) Parse(_ context.Context, r *http.Request, body []byte) (notify.Notification, error) {
	ts, err := a.Verify(r.Header.Get("Stripe-Signature"), body)
	if err != nil {
		return notify.Notification{}, err
	}
	var envelope struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &envelope); err != nil {
		return notify.Notification{}, notify.Errorf(notify.ReasonMalformed, "body is not a JSON event")
	}
	n := notify.Notification{
		Channel:    a.cfg.Channel,
		Provider:   ProviderName,
		MerchantID: a.cfg.MerchantID,
		NotifyID:   envelope.ID,
		OccurredAt: ts,
		BodyDigest: notify.Digest(body),
	}
	if err := a.fields.Extract(body, &n); err != nil {
		return notify.Notification{}, err
	}
	return n, nil
}

// Respond implements notify.Adapter: 204 on success, 500 (resend) or 400 (rejected) with a small
// JSON body otherwise.
func (a *Adapter) Respond(w http.ResponseWriter, v notify.Verdict, message string) {
	reply.Generic(w, v, message)
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

// String names the secret without its key, so that an accidental %v never leaks it.
func (s Secret) String() string { return "secret " + s.ID + " [redacted]" }

// GoString is String, for %#v.
func (s Secret) GoString() string { return s.String() }
