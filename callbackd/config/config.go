// Package config is callbackd's configuration file: the channel settings the operator renders
// from PaymentChannel.spec (the same v1alpha1 types, one schema), plus where this process finds
// its stores and its key files. Secrets are never inline: the file names mounted files.
//
// Load reads a file strictly (unknown fields are errors), applies the environment overrides and
// the defaults, and validates it; every problem is reported at once with the field it concerns.
// example.yaml in this folder is an annotated, valid example.
package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
)

// File is the whole configuration file (YAML or JSON).
type File struct {
	// Listen is the provider- and merchant-facing HTTP address, e.g. ":8080".
	Listen string `json:"listen"`
	// MetricsListen serves /metrics, /healthz and /readyz when set apart from Listen.
	MetricsListen string `json:"metricsListen,omitempty"`
	// Database is the PostgreSQL connection.
	Database Database `json:"database"`
	// Redis is the Redis (Sentinel) connection. Optional: without it the database gates alone
	// keep exactly-once.
	Redis *Redis `json:"redis,omitempty"`
	// Server holds the HTTP and overload limits.
	Server Server `json:"server,omitempty"`
	// APITokensFile holds the merchant API bearer tokens, one per line.
	APITokensFile string `json:"apiTokensFile,omitempty"`
	// Channels are the payment channels this process serves, by name.
	Channels []Channel `json:"channels"`
}

// Database is the PostgreSQL connection. DSNFile wins over DSN; the environment variable
// CALLBACKD_DATABASE_DSN wins over both.
type Database struct {
	DSN     string `json:"dsn,omitempty"`
	DSNFile string `json:"dsnFile,omitempty"`
	// MaxConns of the pool.
	MaxConns int32 `json:"maxConns,omitempty"`
	// LockTimeout, StatementTimeout and IdleInTransactionTimeout are the session timeouts of
	// every pooled connection. Each must stay below the shortest channel lock TTL, so that a
	// stuck transaction ends (and rolls back) before another replica may claim the same key.
	LockTimeout              metav1.Duration `json:"lockTimeout,omitempty"`
	StatementTimeout         metav1.Duration `json:"statementTimeout,omitempty"`
	IdleInTransactionTimeout metav1.Duration `json:"idleInTransactionTimeout,omitempty"`
}

// Redis is a Sentinel group (SentinelAddrs + MasterName) or a single address (Addr).
// CALLBACKD_REDIS_ADDR, CALLBACKD_REDIS_SENTINELS and CALLBACKD_REDIS_MASTER override it.
type Redis struct {
	Addr          string   `json:"addr,omitempty"`
	SentinelAddrs []string `json:"sentinelAddrs,omitempty"`
	MasterName    string   `json:"masterName,omitempty"`
	PasswordFile  string   `json:"passwordFile,omitempty"`
	// Timeout of one Redis operation; past it the Redis gate is skipped for that request.
	Timeout metav1.Duration `json:"timeout,omitempty"`
}

// Server holds HTTP and overload limits.
type Server struct {
	// MaxBodyBytes is the largest accepted callback body.
	MaxBodyBytes int64 `json:"maxBodyBytes,omitempty"`
	// MaxInFlight bounds concurrently processed callbacks; beyond it callbacks get a fast
	// retryable failure instead of queueing.
	MaxInFlight int `json:"maxInFlight,omitempty"`
	// ReadTimeout bounds reading one request (slowloris protection).
	ReadTimeout metav1.Duration `json:"readTimeout,omitempty"`
	// ShutdownTimeout bounds draining in-flight requests on SIGTERM.
	ShutdownTimeout metav1.Duration `json:"shutdownTimeout,omitempty"`
	// ShutdownDelay keeps serving, while /readyz already answers 503, for this long after
	// SIGTERM before the listener closes, so that load balancers stop sending first (default 0:
	// rely on a preStop hook instead).
	ShutdownDelay metav1.Duration `json:"shutdownDelay,omitempty"`
	// ReadHeaderTimeout bounds reading the request headers.
	ReadHeaderTimeout metav1.Duration `json:"readHeaderTimeout,omitempty"`
	// WriteTimeout bounds a whole request, from the end of its headers to the end of the answer.
	WriteTimeout metav1.Duration `json:"writeTimeout,omitempty"`
	// IdleTimeout closes keep-alive connections that stay idle this long.
	IdleTimeout metav1.Duration `json:"idleTimeout,omitempty"`
	// RequestTimeout bounds processing one callback. It stays below the providers' 5 s answer
	// deadline, so that a slow database yields a retryable failure rather than a provider
	// timeout.
	RequestTimeout metav1.Duration `json:"requestTimeout,omitempty"`
	// WindowMaxEntries bounds the in-process gateway window (keys this replica finished).
	WindowMaxEntries int `json:"windowMaxEntries,omitempty"`
}

// Channel is one payment channel: the shared settings plus the files holding its keys.
type Channel struct {
	// Name is the {channel} element of /notify/{channel}.
	Name                              string `json:"name"`
	callbackdv1alpha1.ChannelSettings `json:",inline"`
	// Keys names the files holding key material (as a mounted Secret provides them).
	Keys KeyFiles `json:"keys"`
}

// KeyFiles names the mounted files holding a channel's key material. Files are re-read when they
// change, so a rotated Secret takes effect without a restart.
type KeyFiles struct {
	// WeChatAPIv3KeyFile holds the 32-byte APIv3 key.
	WeChatAPIv3KeyFile string `json:"wechatAPIv3KeyFile,omitempty"`
	// WeChatPublicKeyDir holds the WeChat Pay platform certificates and public keys, one PEM file
	// per key, named by its serial or PUB_KEY_ID_... id (e.g. "PUB_KEY_ID_0112.pem").
	WeChatPublicKeyDir string `json:"wechatPublicKeyDir,omitempty"`
	// WeChatMerchantKeyFile and WeChatMerchantSerial sign active-query requests.
	WeChatMerchantKeyFile string `json:"wechatMerchantKeyFile,omitempty"`
	WeChatMerchantSerial  string `json:"wechatMerchantSerial,omitempty"`
	// AlipayPublicKeyFile holds the Alipay public key (PEM or bare base64).
	AlipayPublicKeyFile string `json:"alipayPublicKeyFile,omitempty"`
	// AlipayAppPrivateKeyFile signs alipay.trade.query requests.
	AlipayAppPrivateKeyFile string `json:"alipayAppPrivateKeyFile,omitempty"`
	// WebhookSecretFiles hold the HMAC secrets of the generic adapters ("whsec_..." for Standard
	// Webhooks, "whsec_..." or raw for Stripe); several during a rotation.
	WebhookSecretFiles []string `json:"webhookSecretFiles,omitempty"`
	// DeliverySecretDir holds one signing secret per delivery endpoint, named by endpoint name.
	DeliverySecretDir string `json:"deliverySecretDir,omitempty"`
}
