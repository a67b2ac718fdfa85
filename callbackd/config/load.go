package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
)

// The environment variables that override connection settings. They exist so that one rendered
// configuration file serves every environment, and so that a DSN can come from a Secret-backed
// variable instead of a file.
const (
	EnvDatabaseDSN    = "CALLBACKD_DATABASE_DSN"
	EnvRedisAddr      = "CALLBACKD_REDIS_ADDR"
	EnvRedisSentinels = "CALLBACKD_REDIS_SENTINELS"
	EnvRedisMaster    = "CALLBACKD_REDIS_MASTER"
	EnvListen         = "CALLBACKD_LISTEN"
)

// Defaults applied by SetDefaults. The TTL defaults are those of the PaymentChannel CRD, so a
// channel means the same thing whether the operator or a person wrote the file.
const (
	DefaultListen            = ":8080"
	DefaultMaxBodyBytes      = 64 << 10
	DefaultMaxInFlight       = 256
	DefaultReadTimeout       = 10 * time.Second
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultWriteTimeout      = 15 * time.Second
	DefaultIdleTimeout       = 90 * time.Second
	DefaultRequestTimeout    = 4 * time.Second
	DefaultShutdownTimeout   = 20 * time.Second
	DefaultWindowMaxEntries  = 100_000
	DefaultMaxConns          = 20
	DefaultLockTimeout       = 2 * time.Second
	DefaultStatementTimeout  = 3 * time.Second
	DefaultIdleInTxTimeout   = 5 * time.Second
	DefaultRedisTimeout      = 50 * time.Millisecond

	DefaultLockTTL            = 10 * time.Second
	DefaultSuccessMarkTTL     = 48 * time.Hour
	DefaultGatewayWindow      = 60 * time.Second
	DefaultReceiptRetention   = 720 * time.Hour
	DefaultTimestampTolerance = 5 * time.Minute
)

// Limits enforced by Validate.
const (
	// MaxBodyBytesLimit is the largest maxBodyBytes accepted: provider callbacks are a few KiB.
	MaxBodyBytesLimit = 16 << 20
	// ProviderAnswerDeadline is the time providers wait for an answer (WeChat Pay documents 5 s).
	ProviderAnswerDeadline = 5 * time.Second
	maxChannelName         = 63
)

// WeChatPayRetrySchedule is WeChat Pay's documented resend schedule (24 h 4 min in all), the
// default of a wechatpay channel that does not configure its own.
func WeChatPayRetrySchedule() []metav1.Duration {
	return durations(15*time.Second, 15*time.Second, 30*time.Second, 3*time.Minute, 10*time.Minute,
		20*time.Minute, 30*time.Minute, 30*time.Minute, 30*time.Minute, 60*time.Minute,
		3*time.Hour, 3*time.Hour, 3*time.Hour, 6*time.Hour, 6*time.Hour)
}

// AlipayRetrySchedule is Alipay's published resend schedule (4m, 10m, 10m, 1h, 2h, 6h, 15h), the
// default of an alipay channel that does not configure its own. Alipay's documents disagree on
// the first interval, which is why the schedule is configuration.
func AlipayRetrySchedule() []metav1.Duration {
	return durations(4*time.Minute, 10*time.Minute, 10*time.Minute, time.Hour, 2*time.Hour,
		6*time.Hour, 15*time.Hour)
}

func durations(ds ...time.Duration) []metav1.Duration {
	out := make([]metav1.Duration, len(ds))
	for i, d := range ds {
		out[i] = metav1.Duration{Duration: d}
	}
	return out
}

// Load reads the configuration file at path (YAML or JSON), applies the environment overrides
// and the defaults, and validates the result. Unknown fields are an error, so that a typo never
// silently falls back to a default.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: load: %w", err)
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config: load %s: %w", path, err)
	}
	f.ApplyEnv(os.LookupEnv)
	f.SetDefaults()
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("config: load %s: %w", path, err)
	}
	return f, nil
}

// Parse decodes a configuration document strictly: unknown or duplicate fields are errors. It
// applies neither the environment nor the defaults.
func Parse(data []byte) (*File, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("config: parse: the document is empty")
	}
	var f File
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("config: parse: %w", err)
	}
	return &f, nil
}

// ApplyEnv applies the connection overrides found by lookup (os.LookupEnv in production). An
// empty variable counts as unset. CALLBACKD_REDIS_ADDR selects a single Redis and
// CALLBACKD_REDIS_SENTINELS a Sentinel group; either replaces the file's Redis addresses.
func (f *File) ApplyEnv(lookup func(string) (string, bool)) {
	get := func(name string) (string, bool) {
		v, ok := lookup(name)
		v = strings.TrimSpace(v)
		return v, ok && v != ""
	}
	if v, ok := get(EnvListen); ok {
		f.Listen = v
	}
	if v, ok := get(EnvDatabaseDSN); ok {
		f.Database.DSN = v
		f.Database.DSNFile = ""
	}
	addr, hasAddr := get(EnvRedisAddr)
	sentinels, hasSentinels := get(EnvRedisSentinels)
	master, hasMaster := get(EnvRedisMaster)
	if (hasAddr || hasSentinels || hasMaster) && f.Redis == nil {
		f.Redis = &Redis{}
	}
	switch {
	case hasSentinels:
		f.Redis.Addr = ""
		f.Redis.SentinelAddrs = splitList(sentinels)
	case hasAddr:
		f.Redis.Addr = addr
		f.Redis.SentinelAddrs = nil
		f.Redis.MasterName = ""
	}
	if hasMaster && !hasAddr {
		f.Redis.MasterName = master
	}
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// SetDefaults fills every unset field with its default. It is idempotent.
func (f *File) SetDefaults() {
	if f.Listen == "" {
		f.Listen = DefaultListen
	}
	setInt32(&f.Database.MaxConns, DefaultMaxConns)
	setDuration(&f.Database.LockTimeout, DefaultLockTimeout)
	setDuration(&f.Database.StatementTimeout, DefaultStatementTimeout)
	setDuration(&f.Database.IdleInTransactionTimeout, DefaultIdleInTxTimeout)
	if f.Redis != nil {
		setDuration(&f.Redis.Timeout, DefaultRedisTimeout)
	}
	s := &f.Server
	if s.MaxBodyBytes == 0 {
		s.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if s.MaxInFlight == 0 {
		s.MaxInFlight = DefaultMaxInFlight
	}
	if s.WindowMaxEntries == 0 {
		s.WindowMaxEntries = DefaultWindowMaxEntries
	}
	setDuration(&s.ReadTimeout, DefaultReadTimeout)
	setDuration(&s.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	setDuration(&s.WriteTimeout, DefaultWriteTimeout)
	setDuration(&s.IdleTimeout, DefaultIdleTimeout)
	setDuration(&s.RequestTimeout, DefaultRequestTimeout)
	setDuration(&s.ShutdownTimeout, DefaultShutdownTimeout)
	for i := range f.Channels {
		setChannelDefaults(&f.Channels[i].ChannelSettings)
	}
}

// setChannelDefaults applies the PaymentChannel CRD defaults (the +kubebuilder:default markers),
// which the API server applies for the operator but nobody applies to a hand-written file.
func setChannelDefaults(cs *callbackdv1alpha1.ChannelSettings) {
	setDuration(&cs.TTLs.Lock, DefaultLockTTL)
	setDuration(&cs.TTLs.SuccessMark, DefaultSuccessMarkTTL)
	setDuration(&cs.TTLs.GatewayWindow, DefaultGatewayWindow)
	setDuration(&cs.TTLs.ReceiptRetention, DefaultReceiptRetention)
	setDuration(&cs.TimestampTolerance, DefaultTimestampTolerance)
	if len(cs.ProviderRetrySchedule) == 0 {
		switch cs.Provider {
		case callbackdv1alpha1.ProviderWeChatPay:
			cs.ProviderRetrySchedule = WeChatPayRetrySchedule()
		case callbackdv1alpha1.ProviderAlipay:
			cs.ProviderRetrySchedule = AlipayRetrySchedule()
		}
	}
	// Generic field paths are deliberately not defaulted here: their defaults depend on the
	// provider (Stripe's event shapes differ from Standard Webhooks'), and each adapter fills the
	// fields a channel leaves empty with its own DefaultFields.
	d := &cs.Delivery
	if len(d.RetrySchedule) == 0 {
		d.RetrySchedule = durations(time.Minute, 5*time.Minute, 30*time.Minute, 2*time.Hour, 6*time.Hour)
	}
	setDuration(&d.Timeout, 10*time.Second)
	for i := range d.Endpoints {
		setInt32(&d.Endpoints[i].MaxConcurrency, 8)
	}
	r := &cs.Reconciliation
	if r.Enabled == nil {
		enabled := true
		r.Enabled = &enabled
	}
	setDuration(&r.PendingAfter, 10*time.Minute)
	setDuration(&r.Interval, time.Minute)
	setInt32(&r.QueriesPerSecond, 5)
}

func setDuration(d *metav1.Duration, def time.Duration) {
	if d.Duration == 0 {
		d.Duration = def
	}
}

func setInt32(v *int32, def int32) {
	if *v == 0 {
		*v = def
	}
}

// ResolveDSN returns the PostgreSQL connection string: CALLBACKD_DATABASE_DSN (already applied by
// ApplyEnv), else the content of dsnFile, else dsn. Errors never quote the DSN.
func (d Database) ResolveDSN() (string, error) {
	if d.DSNFile != "" {
		data, err := os.ReadFile(d.DSNFile)
		if err != nil {
			return "", fmt.Errorf("config: read database.dsnFile: %w", err)
		}
		dsn := strings.TrimSpace(string(data))
		if dsn == "" {
			return "", fmt.Errorf("config: database.dsnFile %s is empty", d.DSNFile)
		}
		return dsn, nil
	}
	if d.DSN == "" {
		return "", fmt.Errorf("config: no database DSN: set database.dsn, database.dsnFile or %s", EnvDatabaseDSN)
	}
	return d.DSN, nil
}

// Password returns the Redis password from passwordFile, or "" when none is configured.
func (r Redis) Password() (string, error) {
	if r.PasswordFile == "" {
		return "", nil
	}
	data, err := os.ReadFile(r.PasswordFile)
	if err != nil {
		return "", fmt.Errorf("config: read redis.passwordFile: %w", err)
	}
	return strings.TrimRight(string(data), "\r\n"), nil
}

// Channel returns the channel named name.
func (f *File) Channel(name string) (Channel, bool) {
	for _, ch := range f.Channels {
		if ch.Name == name {
			return ch, true
		}
	}
	return Channel{}, false
}
