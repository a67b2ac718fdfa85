// Package provider builds the adapter of a configured channel: it picks the provider's adapter,
// loads the channel's key files (and keeps them current as they change), and wires the shared
// metrics. The adapters themselves live in the subpackages wechatpay, alipay, stripe and
// standardwebhooks.
//
// Key files per provider (config.KeyFiles), as a mounted Secret provides them:
//
//	wechatpay         wechatAPIv3KeyFile  the 32-byte APIv3 key
//	                  wechatPublicKeyDir  <SERIAL>.pem platform certificates and
//	                                      PUB_KEY_ID_<id>.pem public keys, all accepted at once
//	alipay            alipayPublicKeyFile the Alipay public key, PEM or bare base64
//	stripe            webhookSecretFiles  endpoint secrets, one per file ("whsec_..." as issued)
//	standardwebhooks  webhookSecretFiles  "whsec_<base64>" secrets or "whpk_<base64>" ed25519 keys
//
// A webhook secret file that does not exist is skipped (name a "previous" file that is present
// only during a rotation), but at least one must exist. Every file is re-read when its directory
// changes and every ReloadInterval; a failed re-read keeps the keys in use.
//
// Metrics (shared by all channels of a process):
//
//	callbackd_key_verifications_total{channel,key_id,result}  per configured key; attacker-chosen
//	                                                          serials are never labels
//	callbackd_signature_probes_total{channel}                 WeChat Pay SIGNTEST probes
//	callbackd_key_reloads_total{channel,result}               key re-reads that changed or failed
package provider

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/keys"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/alipay"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/internal/telemetry"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/standardwebhooks"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/stripe"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/wechatpay"
)

// Options tune New beyond the channel's configuration. The zero value is production behaviour.
type Options struct {
	// Now is the clock of signed-timestamp checks; time.Now when nil.
	Now func() time.Time
	// ReloadInterval is the periodic key re-read; keys.DefaultInterval when zero.
	ReloadInterval time.Duration
}

// New builds the adapter of channel ch. Key files are read now (a channel whose keys cannot be
// read does not start) and re-read when they change until ctx is done. Metrics are registered
// with reg (nil: not registered); several channels share the same collectors.
func New(ctx context.Context, ch config.Channel, logger *slog.Logger, reg prometheus.Registerer) (notify.Adapter, error) {
	return NewWithOptions(ctx, ch, logger, reg, Options{})
}

// NewWithOptions is New with a clock and reload timing, for tests and tools.
func NewWithOptions(ctx context.Context, ch config.Channel, logger *slog.Logger, reg prometheus.Registerer, opts Options) (notify.Adapter, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("channel", ch.Name, "provider", string(ch.Provider))
	if ch.Name == "" {
		return nil, errors.New("provider: new adapter: channel name is required")
	}
	metrics, err := telemetry.New(reg)
	if err != nil {
		return nil, fmt.Errorf("provider: new adapter for channel %s: %w", ch.Name, err)
	}
	b := builder{ctx: ctx, ch: ch, logger: logger, metrics: metrics, opts: opts}
	var a notify.Adapter
	switch ch.Provider {
	case callbackdv1alpha1.ProviderStandardWebhooks:
		a, err = b.standardWebhooks()
	case callbackdv1alpha1.ProviderWeChatPay:
		a, err = b.wechatPay()
	case callbackdv1alpha1.ProviderAlipay:
		a, err = b.alipay()
	case callbackdv1alpha1.ProviderStripe:
		a, err = b.stripe()
	default:
		err = fmt.Errorf("unsupported provider %q", ch.Provider)
	}
	if err != nil {
		return nil, fmt.Errorf("provider: new adapter for channel %s: %w", ch.Name, err)
	}
	return a, nil
}

// builder carries what every adapter constructor needs.
type builder struct {
	ctx     context.Context
	ch      config.Channel
	logger  *slog.Logger
	metrics *telemetry.Metrics
	opts    Options
}

// keyOptions are the reload options of one key set of the channel.
func (b builder) keyOptions(what string, paths []string) keys.Options {
	return keys.Options{
		Name:     fmt.Sprintf("channel %s: %s", b.ch.Name, what),
		Paths:    paths,
		Interval: b.opts.ReloadInterval,
		Logger:   b.logger,
		OnReload: func(err error) { b.metrics.Reloaded(b.ch.Name, err) },
	}
}

func (b builder) accountPath() string {
	if b.ch.Generic == nil {
		return ""
	}
	return b.ch.Generic.Account
}

func (b builder) standardWebhooks() (notify.Adapter, error) {
	files := b.ch.Keys.WebhookSecretFiles
	secrets, err := keys.Load(b.ctx, func() (*standardwebhooks.Secrets, error) {
		return standardwebhooks.LoadSecretFiles(files)
	}, b.keyOptions("webhook secrets", files))
	if err != nil {
		return nil, err
	}
	return standardwebhooks.New(standardwebhooks.Config{
		Channel:     b.ch.Name,
		MerchantID:  b.ch.Merchant.MerchantID,
		Generic:     b.ch.Generic,
		AccountPath: b.accountPath(),
		Tolerance:   b.ch.TimestampTolerance.Duration,
		Secrets:     secrets,
		Metrics:     b.metrics,
		Now:         b.opts.Now,
	})
}

func (b builder) wechatPay() (notify.Adapter, error) {
	k := b.ch.Keys
	if k.WeChatAPIv3KeyFile == "" || k.WeChatPublicKeyDir == "" {
		return nil, errors.New("keys.wechatAPIv3KeyFile and keys.wechatPublicKeyDir are required")
	}
	set, err := keys.Load(b.ctx, func() (*wechatpay.Keys, error) {
		return wechatpay.LoadKeys(k.WeChatAPIv3KeyFile, k.WeChatPublicKeyDir)
	}, b.keyOptions("WeChat Pay keys", []string{k.WeChatAPIv3KeyFile, k.WeChatPublicKeyDir}))
	if err != nil {
		return nil, err
	}
	return wechatpay.New(wechatpay.Config{
		Channel:   b.ch.Name,
		MchID:     b.ch.Merchant.MerchantID,
		SubMchID:  b.ch.Merchant.SubMerchantID,
		AppID:     b.ch.Merchant.AppID,
		Tolerance: b.ch.TimestampTolerance.Duration,
		Keys:      set,
		Metrics:   b.metrics,
		Now:       b.opts.Now,
	})
}

func (b builder) alipay() (notify.Adapter, error) {
	file := b.ch.Keys.AlipayPublicKeyFile
	if file == "" {
		return nil, errors.New("keys.alipayPublicKeyFile is required")
	}
	set, err := keys.Load(b.ctx, func() (*alipay.Keys, error) {
		return alipay.LoadKeys(file)
	}, b.keyOptions("Alipay public key", []string{file}))
	if err != nil {
		return nil, err
	}
	return alipay.New(alipay.Config{
		Channel:  b.ch.Name,
		AppID:    b.ch.Merchant.MerchantID,
		SellerID: b.ch.Merchant.SellerID,
		Keys:     set,
		Metrics:  b.metrics,
	})
}

func (b builder) stripe() (notify.Adapter, error) {
	files := b.ch.Keys.WebhookSecretFiles
	secrets, err := keys.Load(b.ctx, func() (*stripe.Secrets, error) {
		return stripe.LoadSecretFiles(files)
	}, b.keyOptions("webhook secrets", files))
	if err != nil {
		return nil, err
	}
	return stripe.New(stripe.Config{
		Channel:     b.ch.Name,
		MerchantID:  b.ch.Merchant.MerchantID,
		Generic:     b.ch.Generic,
		AccountPath: b.accountPath(),
		Tolerance:   b.ch.TimestampTolerance.Duration,
		Secrets:     secrets,
		Metrics:     b.metrics,
		Now:         b.opts.Now,
	})
}
