package config

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"time"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
)

// FieldError is one invalid setting, named by its path in the file (e.g. "channels[1].ttls.lock").
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// channelNamePattern keeps channel names usable as a URL path element, a metric label and a
// Kubernetes object name.
var channelNamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

type validator struct{ errs []error }

func (v *validator) add(field, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

func (v *validator) positive(field string, d time.Duration) bool {
	if d <= 0 {
		v.add(field, "must be positive, got %s", d)
		return false
	}
	return true
}

// Validate checks the whole file (after SetDefaults) and returns every problem at once, each a
// *FieldError naming its field, joined with errors.Join. It reads no files and never quotes a
// secret.
func (f *File) Validate() error {
	v := &validator{}
	f.validateServer(v)
	f.validateStores(v)
	minLock := f.validateChannels(v)
	if minLock > 0 {
		db := f.Database
		for _, t := range []struct {
			field string
			d     time.Duration
		}{
			{"database.lockTimeout", db.LockTimeout.Duration},
			{"database.statementTimeout", db.StatementTimeout.Duration},
			{"server.requestTimeout", f.Server.RequestTimeout.Duration},
		} {
			if t.d >= minLock {
				v.add(t.field, "must be shorter than the shortest channel lock TTL (%s), got %s", minLock, t.d)
			}
		}
	}
	return errors.Join(v.errs...)
}

func (f *File) validateServer(v *validator) {
	if err := validateAddr(f.Listen); err != nil {
		v.add("listen", "%v", err)
	}
	if f.MetricsListen != "" {
		if err := validateAddr(f.MetricsListen); err != nil {
			v.add("metricsListen", "%v", err)
		} else if f.MetricsListen == f.Listen {
			v.add("metricsListen", "must differ from listen (%s); leave it empty to serve both on one address", f.Listen)
		}
	}
	s := f.Server
	if s.MaxBodyBytes <= 0 || s.MaxBodyBytes > MaxBodyBytesLimit {
		v.add("server.maxBodyBytes", "must be between 1 and %d, got %d", MaxBodyBytesLimit, s.MaxBodyBytes)
	}
	if s.MaxInFlight <= 0 {
		v.add("server.maxInFlight", "must be positive, got %d", s.MaxInFlight)
	}
	if s.WindowMaxEntries <= 0 {
		v.add("server.windowMaxEntries", "must be positive, got %d", s.WindowMaxEntries)
	}
	v.positive("server.readTimeout", s.ReadTimeout.Duration)
	v.positive("server.readHeaderTimeout", s.ReadHeaderTimeout.Duration)
	v.positive("server.idleTimeout", s.IdleTimeout.Duration)
	v.positive("server.shutdownTimeout", s.ShutdownTimeout.Duration)
	if s.ShutdownDelay.Duration < 0 {
		v.add("server.shutdownDelay", "must not be negative, got %s", s.ShutdownDelay.Duration)
	}
	if v.positive("server.requestTimeout", s.RequestTimeout.Duration) && s.RequestTimeout.Duration >= ProviderAnswerDeadline {
		v.add("server.requestTimeout", "must stay below the providers' answer deadline (%s), got %s", ProviderAnswerDeadline, s.RequestTimeout.Duration)
	}
	if v.positive("server.writeTimeout", s.WriteTimeout.Duration) && s.WriteTimeout.Duration <= s.RequestTimeout.Duration {
		v.add("server.writeTimeout", "must exceed server.requestTimeout (%s), got %s", s.RequestTimeout.Duration, s.WriteTimeout.Duration)
	}
}

func validateAddr(addr string) error {
	if addr == "" {
		return errors.New("is required (host:port, e.g. \":8080\")")
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("must be host:port, got %q", addr)
	}
	return nil
}

func (f *File) validateStores(v *validator) {
	db := f.Database
	if db.DSN == "" && db.DSNFile == "" {
		v.add("database", "one of dsn, dsnFile or the %s environment variable is required", EnvDatabaseDSN)
	}
	if db.MaxConns <= 0 {
		v.add("database.maxConns", "must be positive, got %d", db.MaxConns)
	}
	v.positive("database.lockTimeout", db.LockTimeout.Duration)
	v.positive("database.statementTimeout", db.StatementTimeout.Duration)
	v.positive("database.idleInTransactionTimeout", db.IdleInTransactionTimeout.Duration)

	r := f.Redis
	if r == nil {
		return
	}
	switch {
	case r.Addr != "" && len(r.SentinelAddrs) > 0:
		v.add("redis", "set either addr (one Redis) or sentinelAddrs with masterName (a Sentinel group), not both")
	case r.Addr != "":
		if err := validateAddr(r.Addr); err != nil {
			v.add("redis.addr", "%v", err)
		}
	case len(r.SentinelAddrs) > 0:
		for i, a := range r.SentinelAddrs {
			if err := validateAddr(a); err != nil {
				v.add(fmt.Sprintf("redis.sentinelAddrs[%d]", i), "%v", err)
			}
		}
		if r.MasterName == "" {
			v.add("redis.masterName", "is required with sentinelAddrs")
		}
	default:
		v.add("redis", "set addr or sentinelAddrs (or remove the redis section to run on the database gates alone)")
	}
	if v.positive("redis.timeout", r.Timeout.Duration) && r.Timeout.Duration >= time.Second {
		v.add("redis.timeout", "must stay well below a second (the gate is skipped past it), got %s", r.Timeout.Duration)
	}
}

// validateChannels checks every channel and returns the shortest lock TTL among them.
func (f *File) validateChannels(v *validator) time.Duration {
	if len(f.Channels) == 0 {
		v.add("channels", "at least one channel is required")
		return 0
	}
	var minLock time.Duration
	seen := make(map[string]int, len(f.Channels))
	for i, ch := range f.Channels {
		p := fmt.Sprintf("channels[%d]", i)
		switch {
		case ch.Name == "":
			v.add(p+".name", "is required")
		case len(ch.Name) > maxChannelName || !channelNamePattern.MatchString(ch.Name):
			v.add(p+".name", "must be lower-case letters, digits and '-' (at most %d, starting and ending alphanumeric), got %q", maxChannelName, ch.Name)
		default:
			if j, dup := seen[ch.Name]; dup {
				v.add(p+".name", "duplicates channels[%d].name %q", j, ch.Name)
			}
			seen[ch.Name] = i
		}
		if ch.Merchant.MerchantID == "" {
			v.add(p+".merchant.merchantID", "is required")
		}
		validateKeys(v, p, ch)

		t := ch.TTLs
		lockOK := v.positive(p+".ttls.lock", t.Lock.Duration)
		markOK := v.positive(p+".ttls.successMark", t.SuccessMark.Duration)
		windowOK := v.positive(p+".ttls.gatewayWindow", t.GatewayWindow.Duration)
		v.positive(p+".ttls.receiptRetention", t.ReceiptRetention.Duration)
		v.positive(p+".timestampTolerance", ch.TimestampTolerance.Duration)
		if lockOK && (minLock == 0 || t.Lock.Duration < minLock) {
			minLock = t.Lock.Duration
		}
		var span time.Duration
		for j, d := range ch.ProviderRetrySchedule {
			if d.Duration <= 0 {
				v.add(fmt.Sprintf("%s.providerRetrySchedule[%d]", p, j), "must be positive, got %s", d.Duration)
			}
			span += d.Duration
		}
		if markOK && t.SuccessMark.Duration < span {
			v.add(p+".ttls.successMark", "must cover the provider retry schedule (%s), got %s", span, t.SuccessMark.Duration)
		}
		if markOK && windowOK && t.GatewayWindow.Duration > t.SuccessMark.Duration {
			v.add(p+".ttls.gatewayWindow", "must not exceed ttls.successMark (%s), got %s", t.SuccessMark.Duration, t.GatewayWindow.Duration)
		}
		if markOK && t.ReceiptRetention.Duration > 0 && t.ReceiptRetention.Duration < t.SuccessMark.Duration {
			v.add(p+".ttls.receiptRetention", "must not be shorter than ttls.successMark (%s), got %s", t.SuccessMark.Duration, t.ReceiptRetention.Duration)
		}
	}
	return minLock
}

// validateKeys checks that the key files the channel's provider needs are named (not that they
// exist: the adapter reads them and says which one is wrong).
func validateKeys(v *validator, p string, ch Channel) {
	k := ch.Keys
	switch ch.Provider {
	case callbackdv1alpha1.ProviderWeChatPay:
		if k.WeChatAPIv3KeyFile == "" {
			v.add(p+".keys.wechatAPIv3KeyFile", "is required for provider wechatpay")
		}
		if k.WeChatPublicKeyDir == "" {
			v.add(p+".keys.wechatPublicKeyDir", "is required for provider wechatpay")
		}
	case callbackdv1alpha1.ProviderAlipay:
		if k.AlipayPublicKeyFile == "" {
			v.add(p+".keys.alipayPublicKeyFile", "is required for provider alipay")
		}
	case callbackdv1alpha1.ProviderStripe, callbackdv1alpha1.ProviderStandardWebhooks:
		if len(k.WebhookSecretFiles) == 0 {
			v.add(p+".keys.webhookSecretFiles", "at least one secret file is required for provider %s", ch.Provider)
		}
		for j, name := range k.WebhookSecretFiles {
			if strings.TrimSpace(name) == "" {
				v.add(fmt.Sprintf("%s.keys.webhookSecretFiles[%d]", p, j), "must not be empty")
			}
		}
	case "":
		v.add(p+".provider", "is required (one of wechatpay, alipay, stripe, standardwebhooks)")
	default:
		v.add(p+".provider", "must be one of wechatpay, alipay, stripe, standardwebhooks, got %q", ch.Provider)
	}
}
