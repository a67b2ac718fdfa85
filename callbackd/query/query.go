// Package query is callbackd's active query path: it asks a payment provider what became of an
// order (WeChat Pay's APIv3 order query by out_trade_no, Alipay's alipay.trade.query) and applies
// the answer through the same exactly-once pipeline as a callback.
//
// A provider answer is believed only after its signature verified with the channel's provider
// keys (the ones that verify callbacks), and it is turned into the notification a callback of
// the same state would have produced, by the channel's own adapter: the same idempotency key, so
// a query and a callback for one payment commit it once, whichever comes first.
//
// Requests are signed with the merchant's own keys (WeChat Pay: the merchant API key and its
// serial; Alipay: the application private key), read from the channel's key files and re-read
// when they change. Failures are classified: ErrTransient (network, timeouts, 5xx, throttling:
// ask again later) or ErrPermanent (refused request, bad signature, malformed answer: retrying
// alone will not help, a person should look).
package query

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/keys"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/alipay"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/wechatpay"
	"github.com/seed-1cff2221/callback-platform/callbackd/store"
)

// Classified failures; test with errors.Is.
var (
	// ErrTransient: the provider could not answer now (network error, timeout, 5xx, throttled,
	// or the pipeline asked to retry). Asking again later may succeed.
	ErrTransient = errors.New("transient failure")
	// ErrPermanent: the provider refused the request or answered something that cannot be
	// believed or understood (bad signature, malformed answer, another merchant's trade).
	ErrPermanent = errors.New("permanent failure")
)

// State is what the provider says about an order. It is a closed set, usable as a metric label.
type State string

// The states of an answer.
const (
	// StatePaid: the order was paid; Answer.Notification is the payment.
	StatePaid State = "paid"
	// StateClosed: the provider closed the order unpaid; Answer.Notification is the close.
	StateClosed State = "closed"
	// StateNotPaid: the provider knows the order, which is not paid (yet).
	StateNotPaid State = "not_paid"
	// StateNotFound: the provider has no trade for the order: the user never started paying.
	StateNotFound State = "not_found"
)

// Answer is the provider's verified answer about one order.
type Answer struct {
	State State
	// Notification is the normalized event to apply for StatePaid and StateClosed; for the other
	// states it is zero, or an ignored notification carrying the order's identity.
	Notification notify.Notification
	// ProviderState is the provider's own word (trade_state, trade_status, an error code), for
	// logs and operators.
	ProviderState string
}

// Client queries one channel's provider. Implementations are safe for concurrent use.
type Client interface {
	// Query asks the provider about the order. Errors wrap ErrTransient or ErrPermanent and never
	// contain key material.
	Query(ctx context.Context, order store.Order) (Answer, error)
}

// Defaults of ClientOptions.
const (
	DefaultTimeout        = 10 * time.Second
	DefaultWeChatPayURL   = "https://api.mch.weixin.qq.com"
	DefaultAlipayURL      = "https://openapi.alipay.com"
	maxAnswerBytes        = 1 << 20
	alipayGatewayPath     = "/gateway.do"
	wechatQueryPathPrefix = "/v3/pay/transactions/out-trade-no/"
)

// ClientOptions tune the clients built by NewClients.
type ClientOptions struct {
	// HTTPClient sends the queries; one with Timeout and no proxy when nil.
	HTTPClient *http.Client
	// Timeout bounds one query (request and answer); DefaultTimeout when zero.
	Timeout time.Duration
	// Now is the clock of request timestamps; time.Now when nil.
	Now func() time.Time
	// Logger receives the key reload messages; discarded when nil.
	Logger *slog.Logger
	// ReloadInterval is the periodic re-read of the merchant key files; keys.DefaultInterval
	// when zero.
	ReloadInterval time.Duration
}

func (o ClientOptions) withDefaults() ClientOptions {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: o.Timeout, Transport: &http.Transport{
			Proxy:                 nil,
			MaxIdleConnsPerHost:   8,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   o.Timeout,
			ResponseHeaderTimeout: o.Timeout,
		}}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// NewClients builds the query clients of the channels that can be queried: WeChat Pay and Alipay
// channels with their merchant signing keys configured. adapter returns the channel's callback
// adapter (pipeline.Pipeline.Adapter), whose keys verify the answers and whose mapping builds
// the notifications. Other channels are left out, with a warning when a queryable provider lacks
// its signing key; key files are re-read until ctx is done.
func NewClients(ctx context.Context, channels []config.Channel, adapter func(channel string) (notify.Adapter, bool), opts ClientOptions) (map[string]Client, error) {
	opts = opts.withDefaults()
	clients := make(map[string]Client, len(channels))
	for _, ch := range channels {
		a, ok := adapter(ch.Name)
		if !ok {
			return nil, fmt.Errorf("query: new clients: channel %s has no adapter", ch.Name)
		}
		var (
			c   Client
			err error
		)
		switch ch.Provider {
		case callbackdv1alpha1.ProviderWeChatPay:
			wa, ok := a.(*wechatpay.Adapter)
			if !ok {
				return nil, fmt.Errorf("query: new clients: channel %s: adapter is not WeChat Pay's", ch.Name)
			}
			if ch.Keys.WeChatMerchantKeyFile == "" || ch.Keys.WeChatMerchantSerial == "" {
				opts.Logger.Warn("active query disabled for the channel: keys.wechatMerchantKeyFile and keys.wechatMerchantSerial are not both set",
					"channel", ch.Name)
				continue
			}
			if ch.Merchant.SubMerchantID != "" {
				opts.Logger.Warn("active query disabled for the channel: service-provider (sub-merchant) queries are not supported yet",
					"channel", ch.Name)
				continue
			}
			c, err = newWeChatPay(ctx, ch, wa, opts)
		case callbackdv1alpha1.ProviderAlipay:
			aa, ok := a.(*alipay.Adapter)
			if !ok {
				return nil, fmt.Errorf("query: new clients: channel %s: adapter is not Alipay's", ch.Name)
			}
			if ch.Keys.AlipayAppPrivateKeyFile == "" {
				opts.Logger.Warn("active query disabled for the channel: keys.alipayAppPrivateKeyFile is not set", "channel", ch.Name)
				continue
			}
			c, err = newAlipay(ctx, ch, aa, opts)
		default:
			continue // Stripe-style and Standard Webhooks providers have no query API here.
		}
		if err != nil {
			return nil, fmt.Errorf("query: new clients: channel %s: %w", ch.Name, err)
		}
		clients[ch.Name] = c
	}
	return clients, nil
}

// signingKey is a merchant's RSA private key, re-read when its file changes.
type signingKey struct {
	key *rsa.PrivateKey
}

// loadSigningKey loads and watches a PEM private key file (PKCS#8 "PRIVATE KEY" or PKCS#1
// "RSA PRIVATE KEY"). Errors name the file, never its content.
func loadSigningKey(ctx context.Context, name, path string, opts ClientOptions) (*keys.Set[signingKey], error) {
	return keys.Load(ctx, func() (*signingKey, error) {
		k, err := readPrivateKey(path)
		if err != nil {
			return nil, err
		}
		return &signingKey{key: k}, nil
	}, keys.Options{Name: name, Paths: []string{path}, Interval: opts.ReloadInterval, Logger: opts.Logger})
}

func readPrivateKey(path string) (*rsa.PrivateKey, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read private key file: %w", err)
	}
	block, _ := pem.Decode(raw)
	if block == nil {
		return nil, fmt.Errorf("private key file %s: no PEM block", path)
	}
	switch block.Type {
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("private key file %s: parse PKCS#8 key: %w", path, err)
		}
		rk, ok := k.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("private key file %s: not an RSA key", path)
		}
		return rk, nil
	case "RSA PRIVATE KEY":
		k, err := x509.ParsePKCS1PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("private key file %s: parse PKCS#1 key: %w", path, err)
		}
		return k, nil
	default:
		return nil, fmt.Errorf("private key file %s: unexpected PEM block %q", path, block.Type)
	}
}

// transient and permanent build classified errors.
func transient(op, format string, args ...any) error {
	return fmt.Errorf("%s: %w: %s", op, ErrTransient, fmt.Sprintf(format, args...))
}

func permanent(op, format string, args ...any) error {
	return fmt.Errorf("%s: %w: %s", op, ErrPermanent, fmt.Sprintf(format, args...))
}

// classifyStatus turns an HTTP status that is not a usable answer into a classified error:
// 5xx and 429 are the provider's trouble (ask again later), other statuses are refusals.
func classifyStatus(op string, status int, detail string) error {
	if status >= 500 || status == http.StatusTooManyRequests || status == http.StatusRequestTimeout {
		return transient(op, "HTTP %d %s", status, detail)
	}
	return permanent(op, "HTTP %d %s", status, detail)
}

// truncate keeps provider-supplied text short in errors and logs.
func truncate(s string) string {
	const max = 120
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

// exchange sends a signed query and reads the answer, at most maxAnswerBytes, returning its status,
// headers and body. A transport or read failure is transient (the provider may answer next
// time); an oversized answer is permanent.
func exchange(op string, client *http.Client, req *http.Request) (int, http.Header, []byte, error) {
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "callbackd")
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, transient(op, "request failed: %v", redactURL(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return 0, nil, nil, transient(op, "read answer: %v", err)
	}
	if len(body) > maxAnswerBytes {
		return 0, nil, nil, permanent(op, "answer larger than %d bytes", maxAnswerBytes)
	}
	return resp.StatusCode, resp.Header, body, nil
}
