package faults

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// The channel and merchant of every fault-suite deployment.
const (
	Channel    = "sw"
	MerchantID = "acct_faults"
	Currency   = "CNY"
	// SinkEndpoint is the name of the merchant sink's delivery endpoint.
	SinkEndpoint = "sink"
)

// EnvOptions shape one deployment.
type EnvOptions struct {
	// Postgres is a server to create the test's database on; nil starts a server for this test
	// alone (needed when the test stops or crashes it) with PGOptions.
	Postgres  *testenv.Postgres
	PGOptions []testenv.PGOption
	// Redis starts a Redis group (master, Replicas replicas, 3 Sentinels). Without it callbackd
	// runs on the database gates alone.
	Redis    bool
	Replicas int // default 1
	// InfraProxies puts a proxy between the Sentinels/replicas and every data node, so that a
	// node can be partitioned from the Sentinels (split brain). Sentinel then names the nodes by
	// their infra proxies' addresses.
	InfraProxies bool
	// LockTTL is the channel's Redis lock TTL (default 10s; callbackd requires more than 4s).
	LockTTL time.Duration
}

// Env is one deployment of the platform for a fault scenario: PostgreSQL, optionally Redis with
// Sentinel, the merchant's sink, the channel's secrets, and the history of every request. Start
// callbackd processes with StartCallbackd; each reaches the stores through its own proxies.
type Env struct {
	T       testing.TB
	PG      *testenv.Postgres
	Redis   *testenv.RedisGroup
	DSN     string        // the test database, direct (not through a proxy)
	DB      *pgxpool.Pool // the test's own pool, direct
	Sink    *Sink
	History *History
	// Infra are the infra proxies by data node index (nil without InfraProxies).
	Infra []*Proxy

	opts     EnvOptions
	dir      string
	secret   string // inbound webhook secret, whsec_…
	apiToken string

	mu        sync.Mutex
	instances []*Callbackd
}

// NewEnv starts the stores and the sink and migrates a fresh database. Everything stops when t ends.
func NewEnv(t testing.TB, opts EnvOptions) *Env {
	t.Helper()
	if CallbackdBin == "" {
		t.Fatal("faults: CallbackdBin is empty: the package's TestMain must call faults.Main(m)")
	}
	if opts.Replicas <= 0 {
		opts.Replicas = 1
	}
	if opts.LockTTL <= 0 {
		opts.LockTTL = 10 * time.Second
	}
	e := &Env{T: t, opts: opts, dir: t.TempDir(), History: &History{}}
	e.PG = opts.Postgres
	if e.PG == nil {
		e.PG = testenv.StartPostgres(t, append([]testenv.PGOption{testenv.WithSetting("max_connections", "200")}, opts.PGOptions...)...)
	}
	e.DSN = e.PG.NewDatabase(t, "")
	if opts.Redis {
		e.Redis = testenv.StartRedis(t, testenv.RedisOptions{Replicas: opts.Replicas, Sentinels: 3})
		if opts.InfraProxies {
			e.setUpInfraProxies(t)
		}
	}
	e.secret = newSecret(t)
	e.apiToken = "mapi_" + randomHex(t, 16)
	writeFile(t, filepath.Join(e.dir, "webhook-secret"), e.secret+"\n")
	writeFile(t, filepath.Join(e.dir, "api-tokens"), e.apiToken+"\n")
	if err := os.Mkdir(filepath.Join(e.dir, "delivery"), 0o700); err != nil {
		t.Fatalf("create delivery secret folder: %v", err)
	}
	writeFile(t, filepath.Join(e.dir, "delivery", SinkEndpoint), newSecret(t)+"\n")
	e.Sink = NewSink(t)
	e.migrate(t)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := pgxpool.New(ctx, e.DSN)
	if err != nil {
		t.Fatalf("open the test's own database pool: %v", err)
	}
	t.Cleanup(db.Close)
	e.DB = db
	t.Cleanup(func() {
		if t.Failed() {
			e.writeHistory()
		}
	})
	return e
}

// setUpInfraProxies re-points replication and the Sentinels at one proxy per data node: the
// replicas announce their proxy port, replicate from the master's proxy, and the Sentinels
// monitor the master through its proxy, so that they learn every node under its proxy address.
func (e *Env) setUpInfraProxies(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nodes := e.Redis.Nodes()
	for i, n := range nodes {
		p, err := NewProxy(fmt.Sprintf("infra→redis-%d", i), n.Addr)
		if err != nil {
			t.Fatalf("%v", err)
		}
		t.Cleanup(func() { _ = p.Close() })
		e.Infra = append(e.Infra, p)
	}
	masterProxy := e.Infra[0]
	host, port := splitHostPort(t, masterProxy.Addr())
	for i, n := range nodes[1:] {
		c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		_, ap := splitHostPort(t, e.Infra[i+1].Addr())
		for _, cmd := range [][]any{
			{"CONFIG", "SET", "replica-announce-ip", "127.0.0.1"},
			{"CONFIG", "SET", "replica-announce-port", ap},
			{"REPLICAOF", host, port},
		} {
			if err := c.Do(ctx, cmd...).Err(); err != nil {
				t.Fatalf("%s: %v: %v", n, cmd, err)
			}
		}
		c.Close()
	}
	for _, n := range nodes[1:] {
		waitFor(t, 30*time.Second, n.String()+" linked to the master through its proxy", func() bool {
			c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
			defer c.Close()
			info, err := c.Info(ctx, "replication").Result()
			return err == nil && strings.Contains(info, "master_link_status:up") && strings.Contains(info, "master_port:"+port)
		})
	}
	name := e.Redis.MasterName
	quorum := "2"
	for _, s := range e.Redis.Sentinels() {
		c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		for _, cmd := range [][]any{
			{"SENTINEL", "REMOVE", name},
			{"SENTINEL", "MONITOR", name, host, port, quorum},
			{"SENTINEL", "SET", name, "down-after-milliseconds", "1000", "failover-timeout", "3000", "parallel-syncs", "1"},
		} {
			if err := c.Do(ctx, cmd...).Err(); err != nil {
				t.Fatalf("%s: %v: %v", s, cmd, err)
			}
		}
		c.Close()
	}
	want := len(nodes) - 1
	for _, s := range e.Redis.Sentinels() {
		waitFor(t, 30*time.Second, s.String()+" aware of every replica (by proxy address) and every other Sentinel", func() bool {
			c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
			defer c.Close()
			reps, err := c.Replicas(ctx, name).Result()
			if err != nil || len(reps) != want {
				return false
			}
			for _, r := range reps {
				if !strings.Contains(r["flags"], "slave") || strings.Contains(r["flags"], "down") || !e.isInfraAddr(r["ip"]+":"+r["port"]) {
					return false
				}
			}
			m, err := c.Master(ctx, name).Result()
			return err == nil && m["num-other-sentinels"] == strconv.Itoa(len(e.Redis.Sentinels())-1) && !strings.Contains(m["flags"], "down")
		})
	}
	if got := e.Redis.MasterAddr(); got != masterProxy.Addr() {
		t.Fatalf("Sentinel names the master %s, expected its infra proxy %s", got, masterProxy.Addr())
	}
}

func (e *Env) isInfraAddr(addr string) bool {
	for _, p := range e.Infra {
		if p.Addr() == addr {
			return true
		}
	}
	return false
}

// NodeIndexOf returns the data node index behind addr (a node's own address or its infra proxy's
// address, as Sentinel names it), or -1.
func (e *Env) NodeIndexOf(addr string) int {
	for i, n := range e.Redis.Nodes() {
		if n.Addr == addr || (i < len(e.Infra) && e.Infra[i].Addr() == addr) {
			return i
		}
	}
	return -1
}

// announced is the address Sentinel names data node i by.
func (e *Env) announced(i int) string {
	if i < len(e.Infra) {
		return e.Infra[i].Addr()
	}
	return e.Redis.Nodes()[i].Addr
}

// migrate runs `callbackd migrate` once, as the operator's migration Job does.
func (e *Env) migrate(t testing.TB) {
	t.Helper()
	cfg := e.writeConfig(t, "migrate", "127.0.0.1:0", e.DSN, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, CallbackdBin, "migrate", "--config", cfg)
	cmd.Env = callbackdEnv(nil)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("callbackd migrate: %v\n%s", err, e.Redact(string(out)))
	}
}

// config renders callbackd's configuration.
func (e *Env) config(listen, dsn string, r *config.Redis) config.File {
	f := config.File{
		Listen:        listen,
		Database:      config.Database{DSN: dsn, MaxConns: 16},
		APITokensFile: filepath.Join(e.dir, "api-tokens"),
		Redis:         r,
		Channels: []config.Channel{{
			Name: Channel,
			ChannelSettings: callbackdv1alpha1.ChannelSettings{
				Provider: callbackdv1alpha1.ProviderStandardWebhooks,
				Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: MerchantID},
				TTLs: callbackdv1alpha1.TTLs{
					Lock:          metav1.Duration{Duration: e.opts.LockTTL},
					SuccessMark:   metav1.Duration{Duration: 48 * time.Hour},
					GatewayWindow: metav1.Duration{Duration: 60 * time.Second},
				},
				Generic: &callbackdv1alpha1.GenericFields{ClosedEvents: []string{"order.closed"}},
				Delivery: callbackdv1alpha1.Delivery{
					RetrySchedule: []metav1.Duration{{Duration: 200 * time.Millisecond}, {Duration: 500 * time.Millisecond},
						{Duration: time.Second}, {Duration: 2 * time.Second}, {Duration: 2 * time.Second}, {Duration: 2 * time.Second}},
					Endpoints: []callbackdv1alpha1.DeliveryEndpoint{{Name: SinkEndpoint, URL: e.Sink.URL, MaxConcurrency: 8}},
					Timeout:   metav1.Duration{Duration: 2 * time.Second},
				},
				Reconciliation: callbackdv1alpha1.Reconciliation{Enabled: boolPtr(false)},
			},
			Keys: config.KeyFiles{
				WebhookSecretFiles: []string{filepath.Join(e.dir, "webhook-secret")},
				DeliverySecretDir:  filepath.Join(e.dir, "delivery"),
			},
		}},
	}
	return f
}

func (e *Env) writeConfig(t testing.TB, name, listen, dsn string, r *config.Redis) string {
	t.Helper()
	b, err := json.MarshalIndent(e.config(listen, dsn, r), "", "  ")
	if err != nil {
		t.Fatalf("render callbackd config: %v", err)
	}
	p := filepath.Join(e.dir, name+".json")
	writeFile(t, p, string(b))
	return p
}

// Redact removes the channel's secrets from text meant for the test output.
func (e *Env) Redact(text string) string {
	for _, s := range []string{e.secret, strings.TrimPrefix(e.secret, "whsec_"), e.apiToken} {
		if s != "" {
			text = strings.ReplaceAll(text, s, "[REDACTED]")
		}
	}
	return text
}

// Instances returns every callbackd started in this Env.
func (e *Env) Instances() []*Callbackd {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*Callbackd(nil), e.instances...)
}

// proxiedDSN points dsn at addr.
func proxiedDSN(t testing.TB, dsn, addr string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("parse the test database DSN: %v", err)
	}
	u.Host = addr
	return u.String()
}

// --- small helpers -------------------------------------------------------------------------

func newSecret(t testing.TB) string {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatalf("generate a webhook secret: %v", err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("random: %v", err)
	}
	return hex.EncodeToString(b)
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatalf("write %s: %v", filepath.Base(path), err)
	}
}

func splitHostPort(t testing.TB, addr string) (string, string) {
	t.Helper()
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		t.Fatalf("address %q has no port", addr)
	}
	return addr[:i], addr[i+1:]
}

// waitFor polls cond every 50 ms until it holds, failing t after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not within %s", what, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitFor polls cond every 50 ms until it holds, failing t after timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	waitFor(t, timeout, what, cond)
}

// callbackdEnv is the environment of callbackd processes: the test's own without any
// CALLBACKD_ variable a developer may have exported, plus extra.
func callbackdEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CALLBACKD_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

func boolPtr(b bool) *bool { return &b }

// HistoryDirEnv names the folder a failed test's history is written to (default
// $TMPDIR/callback-platform-faults): the test's own temporary folder is removed when it ends.
const HistoryDirEnv = "FAULTS_HISTORY_DIR"

// writeHistory writes the history as JSONL for a failed test and logs where.
func (e *Env) writeHistory() {
	t := e.T
	dir := os.Getenv(HistoryDirEnv)
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "callback-platform-faults")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("write history: %v", err)
		return
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	p := filepath.Join(dir, fmt.Sprintf("%s-%s.jsonl", name, time.Now().UTC().Format("20060102T150405")))
	if err := e.History.WriteJSONL(p); err != nil {
		t.Logf("write history: %v", err)
		return
	}
	t.Logf("history of %d requests written to %s", e.History.Len(), p)
}
