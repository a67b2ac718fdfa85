// Package standardwebhooks is the adapter of generic providers that sign their webhooks the
// Standard Webhooks way (https://www.standardwebhooks.com): headers webhook-id, webhook-timestamp
// and webhook-signature (or their svix- prefixed forms), an HMAC-SHA256 over
// "id.timestamp.body" sent as "v1,<base64>", several space-separated signatures during a secret
// rotation, and a timestamp tolerance both ways. The business fields come from the JSON paths the
// channel configures.
package standardwebhooks

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
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
const ProviderName = string(callbackdv1alpha1.ProviderStandardWebhooks)

// SecretPrefix starts every Standard Webhooks secret; the rest is the base64 key.
const SecretPrefix = "whsec_"

// DefaultTolerance is the accepted distance between the signed timestamp and now, both ways.
const DefaultTolerance = 5 * time.Minute

// DefaultFields are the JSON paths used when the channel configures none.
var DefaultFields = callbackdv1alpha1.GenericFields{
	OrderNo:       "data.order_no",
	Amount:        "data.amount",
	Currency:      "data.currency",
	EventType:     "type",
	TransactionID: "data.id",
	RefundNo:      "data.refund_no",
	PaidEvents:    []string{"payment.succeeded"},
	RefundEvents:  []string{"refund.succeeded"},
}

// PublicKeyPrefix starts a Standard Webhooks ed25519 public key ("whpk_<base64>"), which
// verifies the asymmetric "v1a" signatures.
const PublicKeyPrefix = "whpk_"

// Secret is one verification key: an HMAC secret (Key, for "v1" signatures) or an ed25519 public
// key (PublicKey, for "v1a" signatures). ID names it in metrics (the file name), never the key.
type Secret struct {
	ID        string
	Key       []byte
	PublicKey ed25519.PublicKey
}

// Secrets are the secrets accepted at once; more than one during a rotation.
type Secrets struct {
	List []Secret
}

// ParseSecret decodes a "whsec_<base64>" secret (the prefix is optional, as in the reference
// libraries). Errors never echo the secret.
func ParseSecret(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(strings.TrimSpace(s), SecretPrefix))
	if err != nil {
		return nil, errors.New("secret is not whsec_ followed by standard base64")
	}
	if len(key) == 0 {
		return nil, errors.New("secret is empty")
	}
	return key, nil
}

// LoadSecretFiles reads one key per file ("whsec_" HMAC secret or "whpk_" ed25519 public key);
// the file's base name is the key's ID. A file that
// does not exist is skipped, so a channel can name a "previous" secret file that is present only
// during a rotation; at least one secret must be found.
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
		if text := strings.TrimSpace(string(b)); strings.HasPrefix(text, PublicKeyPrefix) {
			pub, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(text, PublicKeyPrefix))
			if err != nil || len(pub) != ed25519.PublicKeySize {
				return nil, fmt.Errorf("webhook secret file %s: not whpk_ followed by a base64 ed25519 public key", p)
			}
			out.List = append(out.List, Secret{ID: filepath.Base(p), PublicKey: ed25519.PublicKey(pub)})
			continue
		}
		key, err := ParseSecret(string(b))
		if err != nil {
			return nil, fmt.Errorf("webhook secret file %s: %w", p, err)
		}
		out.List = append(out.List, Secret{ID: filepath.Base(p), Key: key})
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
	// AccountPath is the path of an account field in the body; when set it must equal MerchantID.
	AccountPath string
	// Tolerance of the signed timestamp, both ways; DefaultTolerance when zero.
	Tolerance time.Duration
	// Secrets are the accepted signing secrets (re-read when their files change).
	Secrets *keys.Set[Secrets]
	// Metrics counts verifications per secret; nil records nothing.
	Metrics *telemetry.Metrics
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Adapter verifies and normalizes Standard Webhooks notifications. It is safe for concurrent use.
type Adapter struct {
	cfg    Config
	fields jsonfields.Fields
}

var _ notify.Adapter = (*Adapter)(nil)

// New validates cfg and returns the adapter.
func New(cfg Config) (*Adapter, error) {
	if cfg.Channel == "" {
		return nil, errors.New("standardwebhooks: new adapter: channel name is required")
	}
	if cfg.MerchantID == "" {
		return nil, errors.New("standardwebhooks: new adapter: merchant.merchantID is required")
	}
	if cfg.Secrets == nil || cfg.Secrets.Current() == nil || len(cfg.Secrets.Current().List) == 0 {
		return nil, errors.New("standardwebhooks: new adapter: at least one webhook secret is required")
	}
	if cfg.Tolerance <= 0 {
		cfg.Tolerance = DefaultTolerance
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	fields, err := jsonfields.Resolve(cfg.Generic, DefaultFields, cfg.AccountPath)
	if err != nil {
		return nil, fmt.Errorf("standardwebhooks: new adapter: %w", err)
	}
	return &Adapter{cfg: cfg, fields: fields}, nil
}

// Provider implements notify.Adapter.
func (a *Adapter) Provider() string { return ProviderName }

// Headers are the three signature headers of a message, from either header family.
type Headers struct {
	ID, Timestamp, Signature string
}

// ReadHeaders returns the webhook- headers, or the svix- ones when no webhook-id is present.
func ReadHeaders(h http.Header) Headers {
	if h.Get("webhook-id") != "" {
		return Headers{ID: h.Get("webhook-id"), Timestamp: h.Get("webhook-timestamp"), Signature: h.Get("webhook-signature")}
	}
	return Headers{ID: h.Get("svix-id"), Timestamp: h.Get("svix-timestamp"), Signature: h.Get("svix-signature")}
}

// Verify checks the signature headers of body: all three present, the timestamp within the
// tolerance of now, and one v1 signature matching one of the HMAC secrets or one v1a signature
// verifying with one of the ed25519 public keys. It returns the signed
// timestamp. Errors are *notify.Error values.
func (a *Adapter) Verify(h Headers, body []byte) (time.Time, error) {
	if h.ID == "" || h.Timestamp == "" || h.Signature == "" {
		return time.Time{}, notify.Errorf(notify.ReasonMalformed, "missing webhook-id, webhook-timestamp or webhook-signature header")
	}
	ts, err := parseUnix(h.Timestamp)
	if err != nil {
		return time.Time{}, notify.Errorf(notify.ReasonMalformed, "webhook-timestamp is not a unix time in seconds")
	}
	// Whole seconds, as the provider compares: |now - ts| >= tolerance is refused.
	if d := time.Duration(a.cfg.Now().Unix()-ts.Unix()) * time.Second; d >= a.cfg.Tolerance || -d >= a.cfg.Tolerance {
		return time.Time{}, notify.Errorf(notify.ReasonStaleTimestamp, "webhook-timestamp is %s away from now (tolerance %s)", d, a.cfg.Tolerance)
	}
	var macs, eds [][]byte
	for _, f := range strings.Fields(h.Signature) {
		version, sig, ok := strings.Cut(f, ",")
		if !ok {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(sig)
		if err != nil {
			continue
		}
		switch {
		case version == "v1" && len(raw) == sha256.Size:
			macs = append(macs, raw)
		case version == "v1a" && len(raw) == ed25519.SignatureSize:
			eds = append(eds, raw)
		}
	}
	if len(macs) == 0 && len(eds) == 0 {
		return time.Time{}, notify.Errorf(notify.ReasonBadSignature, "no v1 or v1a signature in webhook-signature")
	}
	var content []byte
	for _, s := range a.cfg.Secrets.Current().List {
		switch {
		case s.PublicKey != nil && len(eds) > 0:
			if content == nil {
				content = signedContent(h.ID, h.Timestamp, body)
			}
			for _, got := range eds {
				if ed25519.Verify(s.PublicKey, content, got) {
					a.cfg.Metrics.Verified(a.cfg.Channel, s.ID, true)
					return ts, nil
				}
			}
		case s.Key != nil && len(macs) > 0:
			mac := hmac.New(sha256.New, s.Key)
			mac.Write([]byte(h.ID))
			mac.Write([]byte{'.'})
			mac.Write([]byte(h.Timestamp))
			mac.Write([]byte{'.'})
			mac.Write(body)
			want := mac.Sum(nil)
			for _, got := range macs {
				if hmac.Equal(want, got) {
					a.cfg.Metrics.Verified(a.cfg.Channel, s.ID, true)
					return ts, nil
				}
			}
		}
	}
	a.cfg.Metrics.Verified(a.cfg.Channel, "unmatched", false)
	return time.Time{}, notify.Errorf(notify.ReasonBadSignature, "no signature matches a configured secret")
}

// Parse implements notify.Adapter: verify, then read the business fields.
func (a *Adapter) Parse(_ context.Context, r *http.Request, body []byte) (notify.Notification, error) {
	h := ReadHeaders(r.Header)
	ts, err := a.Verify(h, body)
	if err != nil {
		return notify.Notification{}, err
	}
	n := notify.Notification{
		Channel:    a.cfg.Channel,
		Provider:   ProviderName,
		MerchantID: a.cfg.MerchantID,
		NotifyID:   h.ID,
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

// signedContent is "id.timestamp.body", what both signature schemes sign.
func signedContent(id, timestamp string, body []byte) []byte {
	c := make([]byte, 0, len(id)+len(timestamp)+len(body)+2)
	c = append(c, id...)
	c = append(c, '.')
	c = append(c, timestamp...)
	c = append(c, '.')
	return append(c, body...)
}

// Sign returns the "v1,<base64>" signature of body for the given id and timestamp; senders
// (paysim, the platform's own event delivery) use it.
func Sign(key []byte, id string, ts time.Time, body []byte) string {
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.", id, ts.Unix())
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// parseUnix parses decimal seconds without a sign, as sent in the timestamp headers.
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
