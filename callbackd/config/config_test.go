package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// minimalYAML is the smallest valid file: one Standard Webhooks channel and a database.
const minimalYAML = `
database:
  dsn: postgres://callbackd@127.0.0.1:5432/callbackd
channels:
  - name: webhooks
    provider: standardwebhooks
    merchant:
      merchantID: acct_1
    keys:
      webhookSecretFiles: [/etc/callbackd/keys/whsec]
`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func noEnv(string) (string, bool) { return "", false }

func TestLoadAppliesDefaults(t *testing.T) {
	t.Setenv(EnvDatabaseDSN, "")
	t.Setenv(EnvListen, "")
	t.Setenv(EnvRedisAddr, "")
	t.Setenv(EnvRedisSentinels, "")
	t.Setenv(EnvRedisMaster, "")
	f, err := Load(writeFile(t, "callbackd.yaml", minimalYAML))
	if err != nil {
		t.Fatalf("Load of a minimal valid file: expected no error, got %v", err)
	}
	ch := f.Channels[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"listen", f.Listen, ":8080"},
		{"server.maxBodyBytes", f.Server.MaxBodyBytes, int64(64 << 10)},
		{"server.maxInFlight", f.Server.MaxInFlight, 256},
		{"server.readTimeout", f.Server.ReadTimeout.Duration, 10 * time.Second},
		{"server.requestTimeout", f.Server.RequestTimeout.Duration, 4 * time.Second},
		{"redis", f.Redis == nil, true},
		{"ttls.lock", ch.TTLs.Lock.Duration, 10 * time.Second},
		{"ttls.successMark", ch.TTLs.SuccessMark.Duration, 48 * time.Hour},
		{"ttls.gatewayWindow", ch.TTLs.GatewayWindow.Duration, 60 * time.Second},
		{"ttls.receiptRetention", ch.TTLs.ReceiptRetention.Duration, 720 * time.Hour},
		{"timestampTolerance", ch.TimestampTolerance.Duration, 5 * time.Minute},
		// Generic field paths are provider-specific: the adapter fills them, not the loader.
		{"generic left to the adapter", ch.Generic == nil, true},
		{"reconciliation.enabled", *ch.Reconciliation.Enabled, true},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: expected %v, got %v", c.name, c.want, c.got)
		}
	}
}

func TestLoadAcceptsJSON(t *testing.T) {
	const doc = `{"database":{"dsnFile":"/run/secrets/dsn"},"redis":{"sentinelAddrs":["127.0.0.1:26379"],"masterName":"mymaster"},
"channels":[{"name":"wx","provider":"wechatpay","merchant":{"merchantID":"1900000001"},
"keys":{"wechatAPIv3KeyFile":"/k/apiv3","wechatPublicKeyDir":"/k/pub"}}]}`
	f, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse of JSON: expected no error, got %v", err)
	}
	f.ApplyEnv(noEnv)
	f.SetDefaults()
	if err := f.Validate(); err != nil {
		t.Fatalf("Validate: expected no error, got %v", err)
	}
	if got := f.Redis.Timeout.Duration; got != 50*time.Millisecond {
		t.Errorf("redis.timeout default: expected 50ms, got %s", got)
	}
	if got := len(f.Channels[0].ProviderRetrySchedule); got != 15 {
		t.Errorf("wechatpay default retry schedule: expected 15 steps, got %d", got)
	}
}

func TestParseIsStrict(t *testing.T) {
	cases := map[string]string{
		"unknown top-level field": minimalYAML + "listn: \":9090\"\n",
		"unknown channel field":   strings.Replace(minimalYAML, "provider:", "providr: x\n    provider:", 1),
		"empty document":          "  \n",
		"wrong type":              "server:\n  maxInFlight: many\n",
	}
	for name, doc := range cases {
		t.Run(name, func(t *testing.T) {
			if f, err := Parse([]byte(doc)); err == nil {
				t.Fatalf("expected a parse error, got none (file %+v)", f)
			}
		})
	}
}

func TestApplyEnvOverridesConnections(t *testing.T) {
	env := map[string]string{
		EnvDatabaseDSN:    "postgres://from-env/db",
		EnvListen:         "127.0.0.1:9999",
		EnvRedisSentinels: "127.0.0.1:26379, 127.0.0.1:26380,",
		EnvRedisMaster:    "cbmaster",
	}
	f, err := Parse([]byte(minimalYAML + "redis:\n  addr: 127.0.0.1:6379\n"))
	if err != nil {
		t.Fatal(err)
	}
	f.Database.DSNFile = "/would/lose"
	f.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if f.Database.DSN != env[EnvDatabaseDSN] || f.Database.DSNFile != "" {
		t.Errorf("database: expected the env DSN to win over dsnFile, got dsn set=%t dsnFile=%q", f.Database.DSN == env[EnvDatabaseDSN], f.Database.DSNFile)
	}
	if f.Listen != "127.0.0.1:9999" {
		t.Errorf("listen: expected 127.0.0.1:9999, got %q", f.Listen)
	}
	if want := []string{"127.0.0.1:26379", "127.0.0.1:26380"}; !slices.Equal(f.Redis.SentinelAddrs, want) {
		t.Errorf("redis.sentinelAddrs: expected %v, got %v", want, f.Redis.SentinelAddrs)
	}
	if f.Redis.Addr != "" || f.Redis.MasterName != "cbmaster" {
		t.Errorf("redis: expected sentinel mode with master cbmaster, got addr=%q master=%q", f.Redis.Addr, f.Redis.MasterName)
	}

	g, _ := Parse([]byte(minimalYAML))
	g.ApplyEnv(func(k string) (string, bool) {
		if k == EnvRedisAddr {
			return "127.0.0.1:6380", true
		}
		return "", false
	})
	if g.Redis == nil || g.Redis.Addr != "127.0.0.1:6380" {
		t.Errorf("CALLBACKD_REDIS_ADDR without a redis section: expected redis.addr 127.0.0.1:6380, got %+v", g.Redis)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(f *File)
		field  string
		detail string
	}{
		{"no database", func(f *File) { f.Database.DSN = "" }, "database", "CALLBACKD_DATABASE_DSN"},
		{"bad listen", func(f *File) { f.Listen = "8080" }, "listen", "host:port"},
		{"metrics on same address", func(f *File) { f.MetricsListen = f.Listen }, "metricsListen", "must differ"},
		{"body limit too large", func(f *File) { f.Server.MaxBodyBytes = 1 << 30 }, "server.maxBodyBytes", "between 1 and"},
		{"negative in-flight", func(f *File) { f.Server.MaxInFlight = -1 }, "server.maxInFlight", "positive"},
		{"request timeout past provider deadline", func(f *File) {
			f.Server.RequestTimeout.Duration = 6 * time.Second
			f.Server.WriteTimeout.Duration = time.Minute
		}, "server.requestTimeout", "answer deadline"},
		{"write timeout below request timeout", func(f *File) { f.Server.WriteTimeout.Duration = time.Second }, "server.writeTimeout", "must exceed"},
		{"redis addr and sentinels", func(f *File) { f.Redis = &Redis{Addr: "a:1", SentinelAddrs: []string{"b:2"}, MasterName: "m"} }, "redis", "not both"},
		{"sentinels without master", func(f *File) { f.Redis = &Redis{SentinelAddrs: []string{"b:2"}} }, "redis.masterName", "required"},
		{"bad sentinel address", func(f *File) { f.Redis = &Redis{SentinelAddrs: []string{"b:2", "nohost"}, MasterName: "m"} }, "redis.sentinelAddrs[1]", "host:port"},
		{"slow redis timeout", func(f *File) { f.Redis = &Redis{Addr: "a:1"}; f.Redis.Timeout.Duration = 2 * time.Second }, "redis.timeout", "below a second"},
		{"no channels", func(f *File) { f.Channels = nil }, "channels", "at least one"},
		{"bad channel name", func(f *File) { f.Channels[1].Name = "Bad_Name" }, "channels[1].name", "lower-case"},
		{"duplicate channel name", func(f *File) { f.Channels[1].Name = f.Channels[0].Name }, "channels[1].name", "duplicates channels[0]"},
		{"unknown provider", func(f *File) { f.Channels[1].Provider = "paypal" }, "channels[1].provider", "must be one of"},
		{"no merchant", func(f *File) { f.Channels[0].Merchant.MerchantID = "" }, "channels[0].merchant.merchantID", "required"},
		{"wechat without key", func(f *File) { f.Channels[1].Keys.WeChatAPIv3KeyFile = "" }, "channels[1].keys.wechatAPIv3KeyFile", "required"},
		{"webhooks without secret", func(f *File) { f.Channels[0].Keys.WebhookSecretFiles = nil }, "channels[0].keys.webhookSecretFiles", "at least one"},
		{"success mark shorter than retries", func(f *File) { f.Channels[1].TTLs.SuccessMark.Duration = 24 * time.Hour }, "channels[1].ttls.successMark", "must cover the provider retry schedule (24h4m0s)"},
		{"window longer than mark", func(f *File) { f.Channels[0].TTLs.GatewayWindow.Duration = 72 * time.Hour }, "channels[0].ttls.gatewayWindow", "must not exceed"},
		{"negative lock", func(f *File) { f.Channels[0].TTLs.Lock.Duration = -time.Second }, "channels[0].ttls.lock", "positive"},
		{"lock shorter than request", func(f *File) { f.Channels[0].TTLs.Lock.Duration = 3 * time.Second }, "server.requestTimeout", "shortest channel lock TTL (3s)"},
		{"statement timeout past lock", func(f *File) { f.Database.StatementTimeout.Duration = 11 * time.Second }, "database.statementTimeout", "lock TTL (10s)"},
		{"negative retry step", func(f *File) { f.Channels[0].ProviderRetrySchedule = durations(time.Minute, -time.Second) }, "channels[0].providerRetrySchedule[1]", "positive"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := validFile(t)
			c.mutate(f)
			f.SetDefaults()
			err := f.Validate()
			if err == nil {
				t.Fatalf("expected an error naming %s, got none", c.field)
			}
			var found bool
			for _, fe := range fieldErrors(err) {
				if fe.Field == c.field && strings.Contains(fe.Message, c.detail) {
					found = true
				}
			}
			if !found {
				t.Fatalf("expected an error on %s containing %q, got %v", c.field, c.detail, err)
			}
		})
	}
}

func TestValidateAcceptsValidFile(t *testing.T) {
	f := validFile(t)
	if err := f.Validate(); err != nil {
		t.Fatalf("expected the reference file to be valid, got %v", err)
	}
}

func TestResolveDSN(t *testing.T) {
	dsnFile := writeFile(t, "dsn", "postgres://secret@db/callbackd\n")
	cases := []struct {
		name    string
		db      Database
		want    string
		wantErr string
	}{
		{"dsn file wins", Database{DSN: "postgres://inline", DSNFile: dsnFile}, "postgres://secret@db/callbackd", ""},
		{"inline dsn", Database{DSN: "postgres://inline"}, "postgres://inline", ""},
		{"none", Database{}, "", "no database DSN"},
		{"missing file", Database{DSNFile: filepath.Join(t.TempDir(), "absent")}, "", "dsnFile"},
		{"empty file", Database{DSNFile: writeFile(t, "empty", "\n")}, "", "is empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.db.ResolveDSN()
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("expected an error containing %q, got %v", c.wantErr, err)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Fatalf("the error quotes the DSN: %v", err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("expected %q, got %q (err %v)", c.want, got, err)
			}
		})
	}
}

// validFile is a defaulted, valid file with a Standard Webhooks channel and a WeChat Pay channel.
func validFile(t *testing.T) *File {
	t.Helper()
	f, err := Parse([]byte(minimalYAML + `
  - name: wechat-main
    provider: wechatpay
    merchant:
      merchantID: "1900000001"
    keys:
      wechatAPIv3KeyFile: /k/apiv3
      wechatPublicKeyDir: /k/pub
`))
	if err != nil {
		t.Fatal(err)
	}
	f.SetDefaults()
	return f
}

func fieldErrors(err error) []*FieldError {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		var out []*FieldError
		for _, e := range joined.Unwrap() {
			out = append(out, fieldErrors(e)...)
		}
		return out
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return []*FieldError{fe}
	}
	return nil
}
