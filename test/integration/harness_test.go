package integration_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/merchantapi"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// The channel every test deployment serves.
const (
	channelName = "sw"
	merchantID  = "acct_integration"
	currency    = "CNY"
)

// stackOptions shape one deployment.
type stackOptions struct {
	// redis is the Sentinel group the instances use; nil runs them without Redis.
	redis *testenv.RedisGroup
	// maxBodyBytes overrides callbackd's callback body limit when non-zero.
	maxBodyBytes int64
}

// stack is one deployment of the platform: a fresh database on a shared PostgreSQL server, an
// optional Redis Sentinel group, the channel's webhook secret and a merchant API token. Any
// number of callbackd instances can be started on it; they share the database and Redis.
type stack struct {
	pg       *testenv.Postgres
	dsn      string
	opts     stackOptions
	signer   *webhookSigner
	apiToken string
	dir      string
	db       *pgxpool.Pool // the test's own connection, for independent counts
	client   *http.Client
}

// newStack creates a database named name on pg, migrates it with `callbackd migrate` and writes
// the secret files. Instances are started with start.
func newStack(t testing.TB, pg *testenv.Postgres, name string, opts stackOptions) *stack {
	t.Helper()
	s := &stack{
		pg:       pg,
		dsn:      pg.NewDatabase(t, name),
		opts:     opts,
		signer:   newWebhookSigner(t),
		apiToken: "mapi_" + randomHex(t, 16),
		dir:      t.TempDir(),
		client:   newHTTPClient(),
	}
	writeFile(t, filepath.Join(s.dir, "webhook-secret"), s.signer.secret+"\n")
	writeFile(t, filepath.Join(s.dir, "api-tokens"), s.apiToken+"\n")
	s.runMigrate(t)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := pgxpool.New(ctx, s.dsn)
	if err != nil {
		t.Fatalf("open the test's own database pool: %v", err)
	}
	t.Cleanup(db.Close)
	s.db = db
	return s
}

func newHTTPClient() *http.Client {
	return &http.Client{
		Timeout: 15 * time.Second,
		Transport: &http.Transport{
			Proxy:               nil, // loopback only, never through a proxy from the environment
			MaxIdleConns:        256,
			MaxIdleConnsPerHost: 128,
			IdleConnTimeout:     30 * time.Second,
		},
	}
}

// configFile renders callbackd's configuration for an instance listening on listen.
func (s *stack) configFile(listen string) config.File {
	f := config.File{
		Listen:        listen,
		Database:      config.Database{DSN: s.dsn, MaxConns: 16},
		APITokensFile: filepath.Join(s.dir, "api-tokens"),
		Server:        config.Server{MaxBodyBytes: s.opts.maxBodyBytes},
		Channels: []config.Channel{{
			Name: channelName,
			ChannelSettings: callbackdv1alpha1.ChannelSettings{
				Provider: callbackdv1alpha1.ProviderStandardWebhooks,
				Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: merchantID},
				TTLs: callbackdv1alpha1.TTLs{
					Lock:          metav1.Duration{Duration: 10 * time.Second},
					SuccessMark:   metav1.Duration{Duration: 48 * time.Hour},
					GatewayWindow: metav1.Duration{Duration: 60 * time.Second},
				},
			},
			Keys: config.KeyFiles{WebhookSecretFiles: []string{filepath.Join(s.dir, "webhook-secret")}},
		}},
	}
	if s.opts.redis != nil {
		f.Redis = &config.Redis{
			SentinelAddrs: s.opts.redis.SentinelAddrs(),
			MasterName:    s.opts.redis.MasterName,
		}
	}
	return f
}

// writeConfig writes the configuration as JSON (callbackd reads YAML or JSON) and returns its path.
func (s *stack) writeConfig(t testing.TB, name, listen string) string {
	t.Helper()
	b, err := json.MarshalIndent(s.configFile(listen), "", "  ")
	if err != nil {
		t.Fatalf("render callbackd config: %v", err)
	}
	p := filepath.Join(s.dir, name+".json")
	writeFile(t, p, string(b))
	return p
}

// runMigrate runs `callbackd migrate --config` once, as the operator's migration Job does.
func (s *stack) runMigrate(t testing.TB) {
	t.Helper()
	cfg := s.writeConfig(t, "migrate", "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, callbackdBin, "migrate", "--config", cfg)
	cmd.Env = callbackdEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("callbackd migrate: %v\n%s", err, s.redact(string(out)))
	}
}

// callbackdEnv is the environment of callbackd processes: the test's own, without the
// CALLBACKD_ overrides a developer may have exported, so the config file decides.
func callbackdEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CALLBACKD_") {
			env = append(env, kv)
		}
	}
	return env
}

// instance is one running callbackd process.
type instance struct {
	name    string
	base    string // http://127.0.0.1:port
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	waitErr error
}

// start runs `callbackd serve --config` and waits until /readyz answers 200. The process is
// stopped (SIGTERM, then SIGKILL) when the test ends; on failure the tail of its log is printed,
// with the webhook secret redacted.
func (s *stack) start(t testing.TB, name string) *instance {
	t.Helper()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // a free port can be taken by someone else before we bind it
		inst, err := s.tryStart(t, name, attempt)
		if err == nil {
			return inst
		}
		lastErr = err
	}
	t.Fatalf("start callbackd %s: %v", name, lastErr)
	return nil
}

func (s *stack) tryStart(t testing.TB, name string, attempt int) (*instance, error) {
	port := freePort(t)
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	cfg := s.writeConfig(t, fmt.Sprintf("%s-%d", name, attempt), listen)
	logPath := filepath.Join(s.dir, fmt.Sprintf("%s-%d.log", name, attempt))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create log file: %w", err)
	}
	cmd := exec.Command(callbackdBin, "serve", "--config", cfg)
	cmd.Env = callbackdEnv()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("exec: %w", err)
	}
	inst := &instance{name: name, base: "http://" + listen, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		inst.waitErr = cmd.Wait()
		logFile.Close()
		close(inst.exited)
	}()
	t.Cleanup(func() {
		inst.stop(t)
		if t.Failed() {
			t.Logf("callbackd %s log (tail):\n%s", name, s.redact(tail(inst.log(t), 40)))
		}
	})

	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-inst.exited:
			return nil, fmt.Errorf("callbackd exited before ready (%w); log:\n%s", inst.waitErr, s.redact(tail(inst.log(t), 20)))
		default:
		}
		if code, err := s.get(inst, "/readyz"); err == nil && code == http.StatusOK {
			return inst, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("callbackd not ready within 30s; log:\n%s", s.redact(tail(inst.log(t), 20)))
}

// stop sends SIGTERM and waits for the graceful drain, then kills.
func (inst *instance) stop(t testing.TB) {
	select {
	case <-inst.exited:
		return
	default:
	}
	_ = inst.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-inst.exited:
	case <-time.After(15 * time.Second):
		t.Errorf("callbackd %s did not stop within 15s of SIGTERM; killing it", inst.name)
		_ = inst.cmd.Process.Kill()
		<-inst.exited
	}
}

// log returns everything the instance wrote so far.
func (inst *instance) log(t testing.TB) string {
	b, err := os.ReadFile(inst.logPath)
	if err != nil {
		t.Errorf("read callbackd log: %v", err)
	}
	return string(b)
}

// get issues an unauthenticated GET and returns the status code.
func (s *stack) get(inst *instance, path string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, inst.base+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// redact removes every fragment of the webhook secret and the API token from text meant for the
// test output. Tests that check callbackd never logs a secret scan the raw log instead.
func (s *stack) redact(text string) string {
	for _, f := range append(s.signer.secretFragments(), s.apiToken) {
		text = strings.ReplaceAll(text, f, "[REDACTED]")
	}
	return text
}

// --- callbacks ---------------------------------------------------------------------------------

// verdict is how the sender reads callbackd's answer, by Standard Webhooks status code: any 2xx
// means delivered; the adapter answers 5xx (and 429) for "try again" and 4xx for a refusal.
type verdict int

const (
	success verdict = iota
	retryable
	rejected
	transportError
)

func (v verdict) String() string {
	return [...]string{"success", "retryable", "rejected", "transport-error"}[v]
}

func classify(code int) verdict {
	switch {
	case code >= 200 && code < 300:
		return success
	case code == http.StatusTooManyRequests || code >= 500:
		return retryable
	default:
		return rejected
	}
}

// answer is callbackd's reply to one delivery attempt.
type answer struct {
	verdict verdict
	code    int
	body    string
	err     error
}

// notifyRaw posts body to the channel's notify endpoint with the given headers.
func (s *stack) notifyRaw(ctx context.Context, inst *instance, body []byte, h http.Header) answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, inst.base+"/notify/"+channelName, bytes.NewReader(body))
	if err != nil {
		return answer{verdict: transportError, err: err}
	}
	req.Header = h
	resp, err := s.client.Do(req)
	if err != nil {
		return answer{verdict: transportError, err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return answer{verdict: classify(resp.StatusCode), code: resp.StatusCode, body: string(b)}
}

// notify sends one signed delivery attempt of p, the way a provider does: the message id is the
// same for every attempt of one notification, the timestamp and signature are fresh.
func (s *stack) notify(ctx context.Context, inst *instance, p payment, msgID string) answer {
	body := p.body()
	return s.notifyRaw(ctx, inst, body, s.signer.headers(msgID, time.Now(), body))
}

// delivery is the outcome of a provider-style delivery: attempts until a success answer.
type delivery struct {
	attempts  int
	retries   int // retryable answers (and transport errors) before the success
	rejects   int
	succeeded bool
}

// deliver resends p until callbackd answers success, a refusal, or maxAttempts are used, with a
// short back-off between attempts (a provider's retry schedule, compressed).
func (s *stack) deliver(ctx context.Context, inst *instance, p payment, msgID string, maxAttempts int) delivery {
	var d delivery
	for d.attempts < maxAttempts && ctx.Err() == nil {
		d.attempts++
		a := s.notify(ctx, inst, p, msgID)
		switch a.verdict {
		case success:
			d.succeeded = true
			return d
		case rejected:
			d.rejects++
			return d
		default:
			d.retries++
			time.Sleep(time.Duration(10+5*min(d.attempts, 20)) * time.Millisecond)
		}
	}
	return d
}

// --- merchant API ------------------------------------------------------------------------------

// registerOrder registers p through the merchant API as merchant mid and fails the test unless
// the order is created.
func (s *stack) registerOrder(t testing.TB, inst *instance, p payment, mid string) {
	t.Helper()
	code, body, err := s.createOrder(context.Background(), inst, p, mid)
	if err != nil {
		t.Fatalf("register order %s: %v", p.OrderNo, err)
	}
	if code != http.StatusCreated {
		t.Fatalf("register order %s: expected 201 Created, got %d %s", p.OrderNo, code, body)
	}
}

func (s *stack) createOrder(ctx context.Context, inst *instance, p payment, mid string) (int, string, error) {
	b, err := json.Marshal(map[string]any{
		"order_no":    p.OrderNo,
		"channel":     channelName,
		"merchant_id": mid,
		"amount":      p.Amount,
		"currency":    p.Currency,
	})
	if err != nil {
		return 0, "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, inst.base+"/v1/orders", bytes.NewReader(b))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+s.apiToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(rb), nil
}

// getOrder reads an order through the merchant API.
func (s *stack) getOrder(t testing.TB, inst *instance, orderNo string) merchantapi.OrderView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, inst.base+"/v1/orders/"+orderNo, nil)
	if err != nil {
		t.Fatalf("GET order: %v", err)
	}
	req.Header.Set("Authorization", "Bearer "+s.apiToken)
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatalf("GET /v1/orders/%s: %v", orderNo, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/orders/%s: expected 200, got %d %s", orderNo, resp.StatusCode, body)
	}
	var v merchantapi.OrderView
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("GET /v1/orders/%s: decode %s: %v", orderNo, body, err)
	}
	return v
}

// registerOrders registers every payment concurrently (8 at a time) through inst.
func (s *stack) registerOrders(t testing.TB, inst *instance, ps []payment) {
	t.Helper()
	var mu sync.Mutex
	var errs []string
	parallel(len(ps), 8, func(i int) {
		code, body, err := s.createOrder(context.Background(), inst, ps[i], merchantID)
		if err != nil || code != http.StatusCreated {
			mu.Lock()
			errs = append(errs, fmt.Sprintf("%s: %d %s %v", ps[i].OrderNo, code, body, err))
			mu.Unlock()
		}
	})
	if len(errs) > 0 {
		t.Fatalf("register %d orders: %d failed, first: %s", len(ps), len(errs), errs[0])
	}
}

// newPayments returns n payments with order numbers unique to this test run (Redis success
// marks outlive a test's database, so order numbers are never reused).
func newPayments(t testing.TB, prefix string, n int) []payment {
	run := randomHex(t, 4)
	ps := make([]payment, n)
	for i := range ps {
		no := fmt.Sprintf("%s-%s-%05d", prefix, run, i)
		ps[i] = payment{OrderNo: no, Amount: int64(100 + i), Currency: currency, TxnID: "txn_" + no}
	}
	return ps
}

// --- database counts (straight from PostgreSQL, not through callbackd) -------------------------

// dbCounts are the row counts the acceptance criteria are stated in.
type dbCounts struct {
	Orders, Pending, Paid, Receipts, Ledger, Outbox, Exceptions int64
}

func (c dbCounts) String() string {
	return fmt.Sprintf("orders=%d (pending=%d paid=%d) receipts=%d ledger=%d outbox=%d exceptions=%d",
		c.Orders, c.Pending, c.Paid, c.Receipts, c.Ledger, c.Outbox, c.Exceptions)
}

func (s *stack) counts(t testing.TB) dbCounts {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var c dbCounts
	err := s.db.QueryRow(ctx, `
		SELECT
			(SELECT count(*) FROM payment_orders),
			(SELECT count(*) FROM payment_orders WHERE status = 'PENDING'),
			(SELECT count(*) FROM payment_orders WHERE status = 'PAID'),
			(SELECT count(*) FROM callback_receipts),
			(SELECT count(*) FROM ledger_entries),
			(SELECT count(*) FROM outbox_events),
			(SELECT count(*) FROM payment_exceptions)`).
		Scan(&c.Orders, &c.Pending, &c.Paid, &c.Receipts, &c.Ledger, &c.Outbox, &c.Exceptions)
	if err != nil {
		t.Fatalf("count rows: %v", err)
	}
	return c
}

// expectExactlyOnce fails unless every one of the n registered orders is PAID with exactly one
// receipt, one ledger entry and one outbox event, and nothing else happened.
func (s *stack) expectExactlyOnce(t testing.TB, n int64) {
	t.Helper()
	got := s.counts(t)
	want := dbCounts{Orders: n, Paid: n, Receipts: n, Ledger: n, Outbox: n}
	if got != want {
		t.Errorf("database after the storm:\n  expected %s\n  got      %s", want, got)
	}
	var paidTwice int64
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM (SELECT order_no FROM ledger_entries GROUP BY order_no HAVING count(*) > 1) d`).Scan(&paidTwice); err != nil {
		t.Fatalf("count orders with several ledger entries: %v", err)
	}
	if paidTwice != 0 {
		t.Errorf("orders with more than one ledger entry: expected 0, got %d", paidTwice)
	}
}

// committedOrders returns the order numbers that have both a committed receipt and a ledger entry.
func (s *stack) committedOrders(t testing.TB) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := s.db.Query(ctx, `
		SELECT DISTINCT r.order_no FROM callback_receipts r
		JOIN ledger_entries l ON l.order_no = r.order_no`)
	if err != nil {
		t.Fatalf("list committed orders: %v", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var no string
		if err := rows.Scan(&no); err != nil {
			t.Fatalf("scan committed order: %v", err)
		}
		out[no] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("list committed orders: %v", err)
	}
	return out
}

// --- small helpers -----------------------------------------------------------------------------

// parallel runs fn(0..n-1) on at most workers goroutines and waits for all of them.
func parallel(n, workers int, fn func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free loopback port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
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

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
