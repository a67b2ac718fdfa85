package hostile

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/internal/paysim"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/keyset"
	"github.com/seed-1cff2221/callback-platform/internal/promtext"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// The channels and merchant identities of the deployment under attack.
const (
	wxChannel  = "wx"
	aliChannel = "ali"
	mchID      = "1900000109"
	appID      = "wx8888888888888888"
	aliApp     = "2021000000000001"
	seller     = "2088102146225135"
)

// The connection limits callbackd runs with here: short, so that the slowloris test measures
// them in seconds; everything else is callbackd's default.
const (
	readTimeout       = 3 * time.Second
	readHeaderTimeout = 2 * time.Second
	maxInFlight       = 32
)

// Time limits of the answers. A refusal does little work, but the machine is shared with other
// suites (make test-faults runs packages in parallel on 2 cores), so "quickly" has headroom; a
// genuine notification must be answered within the providers' 5 s answer deadline.
const (
	quickRefusal     = 3 * time.Second
	providerDeadline = 5 * time.Second
)

// env is the deployment under attack: PostgreSQL, Redis Sentinel, one callbackd process and the
// provider's signing keys (paysim).
type env struct {
	dir      string
	bin      string
	pg       *testenv.Postgres
	redis    *testenv.RedisGroup
	dsn      string
	db       *pgxpool.Pool
	apiToken string
	wxKeys   *keyset.Set
	aliKeys  *keyset.Set
	wx       *paysim.WeChatPay
	ali      *paysim.Alipay
	aliGBK   *paysim.Alipay
	cfg      config.File

	addr    string // 127.0.0.1:port of callbackd
	base    string // http://addr
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	client  *http.Client
}

// newEnv starts the servers, migrates a database with `callbackd migrate`, and starts
// `callbackd serve`. On error the returned env (possibly nil) holds what must be closed.
func newEnv(dir, bin string) (*env, error) {
	e := &env{dir: dir, bin: bin, client: newClient()}
	var err error
	if e.pg, err = testenv.NewPostgres(
		testenv.WithSetting("max_connections", "200"),
	); err != nil {
		return nil, fmt.Errorf("start PostgreSQL: %w", err)
	}
	if e.redis, err = testenv.NewRedis(testenv.RedisOptions{Replicas: 1, Sentinels: 3}); err != nil {
		return e, fmt.Errorf("start Redis Sentinel: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if e.dsn, err = e.pg.CreateDatabase(ctx, "hostile"); err != nil {
		return e, fmt.Errorf("create database: %w", err)
	}
	if e.db, err = pgxpool.New(ctx, e.dsn); err != nil {
		return e, fmt.Errorf("open the test's own pool: %w", err)
	}
	if e.wxKeys, err = keyset.Generate(filepath.Join(dir, "keys-wx"), keyset.Spec{Channel: wxChannel,
		Provider: callbackdv1alpha1.ProviderWeChatPay,
		Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: mchID, AppID: appID}}); err != nil {
		return e, err
	}
	if e.aliKeys, err = keyset.Generate(filepath.Join(dir, "keys-ali"), keyset.Spec{Channel: aliChannel,
		Provider: callbackdv1alpha1.ProviderAlipay,
		Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: aliApp, SellerID: seller}}); err != nil {
		return e, err
	}
	e.wx = &paysim.WeChatPay{APIv3Key: e.wxKeys.APIv3Key, Serial: e.wxKeys.Manifest.WeChatSerial, Key: e.wxKeys.PlatformKey}
	e.ali = &paysim.Alipay{AppID: aliApp, Key: e.aliKeys.AlipayKey}
	e.aliGBK = &paysim.Alipay{AppID: aliApp, Key: e.aliKeys.AlipayKey, Charset: "gbk"}

	e.apiToken = "mapi_" + randomHex(16)
	tokens := filepath.Join(dir, "api-tokens")
	if err := os.WriteFile(tokens, []byte(e.apiToken+"\n"), 0o600); err != nil {
		return e, err
	}
	port, err := freePort()
	if err != nil {
		return e, err
	}
	e.addr = fmt.Sprintf("127.0.0.1:%d", port)
	e.base = "http://" + e.addr
	settings := callbackdv1alpha1.ChannelSettings{
		TTLs: callbackdv1alpha1.TTLs{
			Lock:          metav1.Duration{Duration: 10 * time.Second},
			SuccessMark:   metav1.Duration{Duration: 48 * time.Hour},
			GatewayWindow: metav1.Duration{Duration: time.Minute},
		},
		// The reconciler must not query anyone during the tests: nothing is pending for an
		// hour, and the query API is a closed loopback port.
		Reconciliation: callbackdv1alpha1.Reconciliation{
			QueryBaseURL: "http://127.0.0.1:9",
			PendingAfter: metav1.Duration{Duration: time.Hour},
		},
	}
	e.cfg = config.File{
		Listen:        e.addr,
		Database:      config.Database{DSN: e.dsn, MaxConns: 16},
		Redis:         &config.Redis{SentinelAddrs: e.redis.SentinelAddrs(), MasterName: e.redis.MasterName},
		APITokensFile: tokens,
		Server: config.Server{
			ReadTimeout:       metav1.Duration{Duration: readTimeout},
			ReadHeaderTimeout: metav1.Duration{Duration: readHeaderTimeout},
			MaxInFlight:       maxInFlight,
		},
		Channels: []config.Channel{e.wxKeys.Channel(settings), e.aliKeys.Channel(settings)},
	}
	cfgPath := filepath.Join(dir, "callbackd.json")
	raw, err := json.MarshalIndent(e.cfg, "", "  ")
	if err != nil {
		return e, err
	}
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		return e, err
	}
	if out, err := exec.CommandContext(ctx, bin, "migrate", "--config", cfgPath).CombinedOutput(); err != nil {
		return e, fmt.Errorf("callbackd migrate: %w\n%s", err, out)
	}
	// The effective configuration, as callbackd sees it (defaults applied), for the evidence.
	e.cfg.SetDefaults()
	return e, e.startServe(cfgPath)
}

// startServe runs `callbackd serve` in its own process group (killed by the kernel if the test
// binary dies) and waits for /readyz.
func (e *env) startServe(cfgPath string) error {
	e.logPath = filepath.Join(e.dir, "callbackd.log")
	logFile, err := os.Create(e.logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(e.bin, "serve", "--config", cfgPath)
	cmd.Env = callbackdEnv()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start callbackd serve: %w", err)
	}
	e.cmd, e.exited = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(e.exited)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-e.exited:
			return fmt.Errorf("callbackd serve exited before ready; log:\n%s", e.logTail(20))
		default:
		}
		if code, _, err := e.get("/readyz"); err == nil && code == http.StatusOK {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("callbackd serve not ready within 60s; log:\n%s", e.logTail(20))
}

// close stops callbackd (SIGTERM, then SIGKILL of its process group) and the servers.
func (e *env) close() error {
	var errs []error
	if e.cmd != nil {
		_ = e.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-e.exited:
		case <-time.After(20 * time.Second):
			errs = append(errs, errors.New("callbackd did not stop within 20s of SIGTERM; killed"))
			_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
			<-e.exited
		}
	}
	if e.db != nil {
		e.db.Close()
	}
	if e.redis != nil {
		if err := e.redis.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if e.pg != nil {
		if err := e.pg.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// alive fails the test if callbackd is gone (a crash on hostile input is the worst outcome).
func (e *env) alive(t testing.TB) {
	t.Helper()
	select {
	case <-e.exited:
		t.Fatalf("callbackd exited during the test; log:\n%s", e.logTail(30))
	default:
	}
	if code, _, err := e.get("/healthz"); err != nil || code != http.StatusOK {
		t.Fatalf("callbackd /healthz: expected 200, got %d (%v)", code, err)
	}
}

// pid is callbackd's process id.
func (e *env) pid() int { return e.cmd.Process.Pid }

func (e *env) logTail(n int) string {
	b, _ := os.ReadFile(e.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return e.redact(strings.Join(lines, "\n"))
}

// redact removes the merchant API token and the APIv3 key from text meant for the test output.
func (e *env) redact(s string) string {
	for _, secret := range []string{e.apiToken, e.wxKeys.APIv3Key} {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "[REDACTED]")
		}
	}
	return s
}

func callbackdEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CALLBACKD_") {
			out = append(out, kv)
		}
	}
	return out
}

func newClient() *http.Client {
	return &http.Client{
		Timeout: 20 * time.Second,
		Transport: &http.Transport{
			Proxy:               nil, // loopback only, never through a proxy from the environment
			MaxIdleConns:        512,
			MaxIdleConnsPerHost: 512,
			IdleConnTimeout:     30 * time.Second,
		},
	}
}

func (e *env) get(path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(b), nil
}

// --- sending -------------------------------------------------------------------------------

// answer is callbackd's reply to one request.
type answer struct {
	code    int
	body    string
	elapsed time.Duration
	err     error
}

func (a answer) String() string {
	if a.err != nil {
		return fmt.Sprintf("transport error after %v: %v", a.elapsed.Round(time.Millisecond), a.err)
	}
	return fmt.Sprintf("%d %q in %v", a.code, truncate(a.body, 80), a.elapsed.Round(time.Millisecond))
}

// post sends body with the given headers to /notify/{channel}.
func (e *env) post(channel string, h http.Header, body io.Reader) answer {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.base+"/notify/"+channel, body)
	if err != nil {
		return answer{err: err}
	}
	for k, v := range h {
		req.Header[k] = append([]string(nil), v...)
	}
	start := time.Now()
	resp, err := e.client.Do(req)
	if err != nil {
		return answer{err: err, elapsed: time.Since(start)}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return answer{code: resp.StatusCode, body: string(b), elapsed: time.Since(start)}
}

// send posts a signed notification as the provider does.
func (e *env) send(channel string, n paysim.Notification) answer {
	return e.post(channel, n.Header, bytes.NewReader(n.Body))
}

// --- orders and notifications ----------------------------------------------------------------

// order is one order registered through the merchant API.
type order struct {
	channel string
	no      string
	amount  int64 // fen
	txn     string
}

// register creates an order through the merchant API, as the merchant does before the user pays.
func (e *env) register(t testing.TB, channel, prefix string, amount int64) order {
	t.Helper()
	o := order{channel: channel, no: prefix + "-" + randomHex(6), amount: amount}
	o.txn = "42000" + randomDigits(23)
	merchant := map[string]string{wxChannel: mchID, aliChannel: aliApp}[channel]
	b, _ := json.Marshal(map[string]any{"order_no": o.no, "channel": channel, "merchant_id": merchant,
		"amount": amount, "currency": "CNY"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.base+"/v1/orders", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.apiToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("register order %s: %v", o.no, err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("register order %s: expected 201, got %d %s", o.no, resp.StatusCode, rb)
	}
	return o
}

// wxPayment is the WeChat Pay TRANSACTION.SUCCESS plaintext of o, paid by o.txn.
func wxPayment(o order) paysim.WeChatTransaction {
	return paysim.WeChatTransaction{MchID: mchID, AppID: appID, OutTradeNo: o.no, TransactionID: o.txn,
		TradeType: "JSAPI", TradeState: "SUCCESS", TradeStateDesc: "支付成功", BankType: "OTHERS",
		SuccessTime: paysim.WeChatTime(time.Now()), Payer: paysim.WeChatPayer{OpenID: "oUpF8uMuAJO_M2pxb1Q9zNjWeS6o"},
		Amount: paysim.WeChatAmount{Total: o.amount, PayerTotal: o.amount, Currency: "CNY", PayerCurrency: "CNY"}}
}

// aliTrade is the Alipay TRADE_SUCCESS notification of o, paid by o.txn.
func aliTrade(o order) paysim.AlipayTrade {
	return paysim.AlipayTrade{OutTradeNo: o.no, TradeNo: o.txn, TradeStatus: paysim.AlipayTradeSuccess,
		TotalAmount: yuan(o.amount), ReceiptAmount: yuan(o.amount), SellerID: seller, BuyerID: "2088101117955611",
		Subject: "测试订单", GmtPayment: time.Now()}
}

func (e *env) mustWx(t testing.TB, tx paysim.WeChatTransaction, opts paysim.WeChatOptions) paysim.Notification {
	t.Helper()
	n, err := e.wx.Payment(tx, opts)
	if err != nil {
		t.Fatalf("sign WeChat Pay notification: %v", err)
	}
	return n
}

func (e *env) mustAli(t testing.TB, a *paysim.Alipay, tr paysim.AlipayTrade) paysim.Notification {
	t.Helper()
	n, err := a.Trade(tr, paysim.AlipayOptions{})
	if err != nil {
		t.Fatalf("sign Alipay notification: %v", err)
	}
	return n
}

// pay delivers o's genuine payment notification and fails unless it is applied.
func (e *env) pay(t testing.TB, o order) paysim.Notification {
	t.Helper()
	var n paysim.Notification
	if o.channel == wxChannel {
		n = e.mustWx(t, wxPayment(o), paysim.WeChatOptions{})
	} else {
		n = e.mustAli(t, e.ali, aliTrade(o))
	}
	if a := e.send(o.channel, n); !isSuccess(o.channel, a) {
		t.Fatalf("genuine payment of %s: expected success, got %s", o.no, a)
	}
	return n
}

// isSuccess reads an answer as the provider does: WeChat Pay by the status code (200/204),
// Alipay by the body (exactly "success").
func isSuccess(channel string, a answer) bool {
	if a.err != nil {
		return false
	}
	if channel == aliChannel {
		return a.code == http.StatusOK && a.body == "success"
	}
	return a.code == http.StatusOK || a.code == http.StatusNoContent
}

// --- database evidence -----------------------------------------------------------------------

// dbState is what the database holds: row counts and a fingerprint of every table the pipeline
// writes, so that "nothing changed" also catches an update that keeps the counts. The outbox
// dispatcher keeps updating the delivery state of outbox events in the background, so only
// their content is fingerprinted.
type dbState struct {
	Orders, Pending, Paid, Closed, Receipts, Ledger, Outbox, Exceptions int64
	Fingerprint                                                         string
}

func (s dbState) String() string {
	return fmt.Sprintf("orders=%d (pending=%d paid=%d closed=%d) receipts=%d ledger=%d outbox=%d exceptions=%d",
		s.Orders, s.Pending, s.Paid, s.Closed, s.Receipts, s.Ledger, s.Outbox, s.Exceptions)
}

func (e *env) state(t testing.TB) dbState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var s dbState
	err := e.db.QueryRow(ctx, `
		SELECT
			(SELECT count(*) FROM payment_orders),
			(SELECT count(*) FROM payment_orders WHERE status = 'PENDING'),
			(SELECT count(*) FROM payment_orders WHERE status = 'PAID'),
			(SELECT count(*) FROM payment_orders WHERE status = 'CLOSED'),
			(SELECT count(*) FROM callback_receipts),
			(SELECT count(*) FROM ledger_entries),
			(SELECT count(*) FROM outbox_events),
			(SELECT count(*) FROM payment_exceptions),
			md5(
				coalesce((SELECT string_agg(t::text, '|' ORDER BY t::text) FROM payment_orders t), '') ||
				coalesce((SELECT string_agg(t::text, '|' ORDER BY t::text) FROM callback_receipts t), '') ||
				coalesce((SELECT string_agg(t::text, '|' ORDER BY t::text) FROM ledger_entries t), '') ||
				coalesce((SELECT string_agg(x, '|' ORDER BY x) FROM (SELECT (t.id, t.event_id, t.channel, t.order_no,
					t.event_type, t.payload, t.created_at)::text AS x FROM outbox_events t) o), '') ||
				coalesce((SELECT string_agg(t::text, '|' ORDER BY t::text) FROM payment_exceptions t), ''))`).
		Scan(&s.Orders, &s.Pending, &s.Paid, &s.Closed, &s.Receipts, &s.Ledger, &s.Outbox, &s.Exceptions, &s.Fingerprint)
	if err != nil {
		t.Fatalf("read the database state: %v", err)
	}
	return s
}

// unchanged fails the test when the database differs from before.
func (e *env) unchanged(t testing.TB, before dbState, what string) {
	t.Helper()
	after := e.state(t)
	if after != before {
		t.Errorf("%s: expected the database unchanged\n  before %s (%s)\n  after  %s (%s)",
			what, before, before.Fingerprint[:8], after, after.Fingerprint[:8])
	}
}

// orderRow is one order's row and its effects.
type orderRow struct {
	Status                          string
	Receipts, Ledger, Outbox, Excps int64
}

func (e *env) order(t testing.TB, no string) orderRow {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var r orderRow
	err := e.db.QueryRow(ctx, `
		SELECT
			coalesce((SELECT status FROM payment_orders WHERE order_no = $1), ''),
			(SELECT count(*) FROM callback_receipts WHERE order_no = $1),
			(SELECT count(*) FROM ledger_entries WHERE order_no = $1),
			(SELECT count(*) FROM outbox_events WHERE order_no = $1),
			(SELECT count(*) FROM payment_exceptions WHERE order_no = $1)`, no).
		Scan(&r.Status, &r.Receipts, &r.Ledger, &r.Outbox, &r.Excps)
	if err != nil {
		t.Fatalf("read order %s: %v", no, err)
	}
	return r
}

// --- process evidence ------------------------------------------------------------------------

// memory reads callbackd's resident set now (VmRSS) and its peak so far (VmHWM), in KiB.
func (e *env) memory(t testing.TB) (rss, peak int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", e.pid()))
	if err != nil {
		t.Fatalf("read callbackd's /proc status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = v
		case "VmHWM:":
			peak = v
		}
	}
	if rss == 0 || peak == 0 {
		t.Fatalf("callbackd's /proc status has no VmRSS/VmHWM")
	}
	return rss, peak
}

// --- small helpers ---------------------------------------------------------------------------

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b)
}

func randomDigits(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	for i := range b {
		b[i] = '0' + b[i]%10
	}
	return string(b)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func yuan(fen int64) string { return fmt.Sprintf("%d.%02d", fen/100, fen%100) }

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// --- the common assertion of a refused request -----------------------------------------------

// refusal is one hostile request and what must come of it.
type refusal struct {
	channel string
	what    string // what was sent, for the evidence line
	send    func() answer
	// reason is the callbackd_anomalies_total reason that must grow by exactly one; empty when
	// the HTTP server itself refuses the request before callbackd's handler sees it.
	reason string
	// anyReason accepts at most one anomaly of any reason (the request is ambiguous on the wire:
	// the HTTP server or the adapter may be the one to refuse it).
	anyReason bool
}

// expectRefused sends the request and asserts a refusal in the provider's failure form (a 4xx:
// WeChat Pay {"code":"FAIL"}, Alipay "fail"), nothing changed in the database, the anomaly
// counted, and callbackd still alive; it prints the evidence.
func (e *env) expectRefused(t *testing.T, r refusal) answer {
	t.Helper()
	before, mBefore := e.state(t), e.scrape(t)
	a := r.send()
	if a.err != nil || a.code < 400 || a.code >= 500 {
		t.Errorf("%s: expected a refusal (4xx), got %s", r.what, a)
	}
	if isSuccess(r.channel, a) {
		t.Errorf("%s: answered success", r.what)
	}
	e.unchanged(t, before, r.what)
	got := promtext.Delta(anomalies(mBefore, r.channel), anomalies(e.scrape(t), r.channel))
	if r.anyReason {
		if total(got) > 1 {
			t.Errorf("%s: expected at most one anomaly counted, got %s", r.what, promtext.Format(got))
		}
	} else if r.reason != "" {
		if len(got) != 1 || got[r.reason] != 1 {
			t.Errorf("%s: expected callbackd_anomalies_total{reason=%q} +1 and nothing else, got %s", r.what, r.reason, promtext.Format(got))
		}
	} else if len(got) != 0 {
		t.Errorf("%s: expected no anomaly counted (refused by the HTTP server), got %s", r.what, promtext.Format(got))
	}
	e.alive(t)
	t.Logf("sent %s → %s; anomalies %s; database unchanged: %s", r.what, a, promtext.Format(got), before)
	if os.Getenv("HOSTILE_DEBUG") != "" {
		t.Logf("log: %s", e.logTail(2))
	}
	return a
}

// exceptionKinds lists the payment exceptions recorded for an order, oldest first.
func (e *env) exceptionKinds(t testing.TB, no string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := e.db.Query(ctx, `SELECT kind FROM payment_exceptions WHERE order_no = $1 ORDER BY id`, no)
	if err != nil {
		t.Fatalf("read exceptions of %s: %v", no, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
