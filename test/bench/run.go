package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/internal/paysim"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/keyset"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// Options configure a run.
type Options struct {
	// Quick runs every scenario briefly (about a minute in all) with 100,000 preloaded receipts
	// instead of 10 million: it proves the harness, not the numbers.
	Quick bool
	// OutDir receives benchmarks.md, benchmarks.json and benchmarks.png. A benchmarks.json already
	// there is the previous run that ratios are compared with.
	OutDir string
	// WorkDir holds keys, configurations, logs and profiles; a temporary folder, removed at the
	// end, when empty.
	WorkDir string
	// ScaleReceipts overrides the number of receipts preloaded for the scale scenarios.
	ScaleReceipts int64
	// Log receives progress lines; os.Stderr when nil.
	Log io.Writer
}

// Output file names inside OutDir.
const (
	ReportFile = "benchmarks.md"
	JSONFile   = "benchmarks.json"
	ChartFile  = "benchmarks.png"
)

// The benchmark's channel: a WeChat Pay direct merchant with made-up test identities.
const (
	channelName = "wechat"
	merchantID  = "1900000109"
	appID       = "wxd678efh567hg6787"
)

// Concurrencies. The database-bound figures run at the pool size callbackd uses (its default
// database.maxConns), so pgbench, callbackd and the load generator hold the same number of
// transactions in flight; the duplicate figures at the storm's 64.
const (
	dbConcurrency  = int(config.DefaultMaxConns)
	dupConcurrency = 64
	rssConnections = 1000
)

// sizes are a run's request counts and durations.
type sizes struct {
	pgbenchSecs   int
	pgbenchOrders int
	redisRequests int
	verifyReqs    int
	unique        int
	openSecs      float64
	stormKeys     int
	redisDown     int
	scaleUnique   int
	scaleReceipts int64
	rssPerConn    int
	profile       time.Duration
}

func sizesFor(quick bool) sizes {
	if quick {
		return sizes{pgbenchSecs: 3, pgbenchOrders: 40_000, redisRequests: 50_000, verifyReqs: 4_000, unique: 1_000,
			openSecs: 2, stormKeys: 200, redisDown: 500, scaleUnique: 500, scaleReceipts: 100_000, rssPerConn: 2, profile: time.Second}
	}
	return sizes{pgbenchSecs: 10, pgbenchOrders: 200_000, redisRequests: 300_000, verifyReqs: 30_000, unique: 10_000,
		openSecs: 8, stormKeys: 2_000, redisDown: 5_000, scaleUnique: 5_000, scaleReceipts: 10_000_000, rssPerConn: 3, profile: 4 * time.Second}
}

// runner holds what a run started, so that stop can end it whatever happened.
type runner struct {
	opts  Options
	sz    sizes
	log   io.Writer
	start time.Time

	dir        string
	removeDir  bool
	callbackd  string
	benchsrv   string
	pg         *testenv.Postgres
	redis      *testenv.RedisGroup
	dsn        string
	pool       *pgxpool.Pool
	rdb        *redis.Client
	set        *keyset.Set
	signer     *paysim.WeChatPay
	cfg        config.File
	procs      []*process
	profiles   map[string]string        // scenario id → saved CPU profile
	windows    map[string]time.Duration // scenario id → how long the load ran inside the profile
	rep        *Report
	orderCount int
}

func (r *runner) step(format string, args ...any) {
	fmt.Fprintf(r.log, "bench [%6.1fs] "+format+"\n", append([]any{time.Since(r.start).Seconds()}, args...)...)
}

// Run runs the whole benchmark and writes the report, the chart and the JSON into opts.OutDir.
// Everything it started is stopped before it returns.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if opts.Log == nil {
		opts.Log = os.Stderr
	}
	if opts.OutDir == "" {
		return nil, errors.New("bench: OutDir is required")
	}
	r := &runner{opts: opts, sz: sizesFor(opts.Quick), log: opts.Log, start: time.Now(), profiles: map[string]string{}, windows: map[string]time.Duration{}}
	if opts.ScaleReceipts > 0 {
		r.sz.scaleReceipts = opts.ScaleReceipts
	}
	rep, err := r.run(ctx)
	if stopErr := r.stop(); stopErr != nil {
		err = errors.Join(err, stopErr)
	}
	if err != nil {
		return rep, err
	}
	rep.DurationSeconds = time.Since(r.start).Seconds()
	if err := r.write(rep); err != nil {
		return rep, err
	}
	r.step("wrote %s, %s and %s in %s", ReportFile, JSONFile, ChartFile, opts.OutDir)
	return rep, nil
}

func (r *runner) run(ctx context.Context) (*Report, error) {
	rep := &Report{Date: time.Now().UTC().Format(time.RFC3339), Quick: r.opts.Quick, Machine: machine(),
		ConnectionsForRSS: rssConnections}
	r.rep = rep
	if err := r.prepare(ctx); err != nil {
		return nil, err
	}
	rep.Machine.PostgreSQL, rep.Machine.Redis = r.pg.Version(), r.redis.Version()

	if err := r.limits(ctx, rep); err != nil {
		return nil, err
	}
	if err := r.callbackdScenarios(ctx, rep); err != nil {
		return nil, err
	}
	rep.Notes = append(rep.Notes,
		"Notifications are real WeChat Pay v3 requests from paysim's signing library (RSA-2048 signature, AES-256-GCM resource), signed before each timed run so that signing is not measured. They carry a Wechatpay-Timestamp up to 4 minutes ahead (inside the 5-minute window callbackd enforces), so one signed set stays valid through the phases that reuse it; a set older than 4 minutes is signed again.",
		"The duplicates of one notification are the same signed bytes; callbackd keeps no nonce cache, so this costs it exactly what a provider's re-signed resend costs.",
		"Load generator: Go, in the runner's process, persistent keep-alive connections on loopback. Closed loop (fixed concurrency, next request on each answer) for maximum throughput; open loop (fixed rate) for the 50% and 80% runs, with latency measured from each request's scheduled send time, so a server that falls behind is charged for its queue (no coordinated omission). Percentiles are exact (every sample kept).",
		"callbackd runs with its default limits (database.maxConns 20, maxInFlight 256, 60 s gateway window), a Redis Sentinel group (1 master, 1 replica, 3 Sentinels), the outbox dispatcher and retention sweeper on, the reconciler off. It is built from test/bench/cmd/callbackd-pprof: cmd/callbackd plus a loopback pprof listener used for the profiles.",
		"Before the first measured run, a warm-up (5% of the unique count, at least 200 callbacks) goes to each replica unmeasured: callbackd's pools open connections and prepare statements on first use.",
		"The limit handler (d) and the designs from the field run as processes of their own (test/bench/cmd/benchserver), like callbackd, on callbackd's own WeChat Pay adapter.",
		"Redis down: the Redis master, replica and Sentinels are stopped; fresh unique callbacks go to one replica, then the same notifications once each to the other replica, whose window has never seen them, so each duplicate is stopped by the PostgreSQL receipt.",
		"Peak RSS: a fresh replica receives duplicates on 1,000 concurrent keep-alive connections; answers other than 204 there are callbackd's retryable failure when its in-flight limit (256) or its Redis and PostgreSQL pools are exhausted, as designed under overload. VmHWM is read from /proc after the run.",
		"Scale: the receipts are preloaded with one INSERT … SELECT generate_series, then ANALYZE; the scale figures are compared with the Redis-down figures (database gates alone), where the size of the receipts table matters; with Redis up, a duplicate does not touch the table.",
	)
	return rep, nil
}

// prepare starts PostgreSQL and Redis, builds and migrates, generates keys.
func (r *runner) prepare(ctx context.Context) error {
	if r.opts.WorkDir != "" {
		r.dir = r.opts.WorkDir
		if err := os.MkdirAll(r.dir, 0o700); err != nil {
			return fmt.Errorf("bench: work folder: %w", err)
		}
	} else {
		dir, err := os.MkdirTemp("", "callbench-")
		if err != nil {
			return fmt.Errorf("bench: work folder: %w", err)
		}
		r.dir, r.removeDir = dir, true
	}
	r.step("building callbackd and benchserver")
	var err error
	if r.callbackd, r.benchsrv, err = buildBinaries(ctx, r.dir); err != nil {
		return err
	}
	r.step("starting PostgreSQL (fsync on, synchronous_commit on) and Redis (1 master, 1 replica, 3 Sentinels) on loopback")
	if r.pg, err = testenv.NewPostgres(testenv.WithSetting("max_connections", "300"), testenv.WithSetting("shared_buffers", "256MB"),
		testenv.WithSetting("max_wal_size", "8GB")); err != nil {
		return fmt.Errorf("bench: start PostgreSQL: %w (install it with `make deps`)", err)
	}
	if r.redis, err = testenv.NewRedis(testenv.RedisOptions{Replicas: 1, Sentinels: 3}); err != nil {
		return fmt.Errorf("bench: start Redis: %w (install it with `make deps`)", err)
	}
	if r.dsn, err = r.pg.CreateDatabase(ctx, "callbench"); err != nil {
		return err
	}
	r.step("%s; %s", r.pg, r.redis)
	if r.set, err = keyset.Generate(filepath.Join(r.dir, "keys"), keyset.Spec{Channel: channelName,
		Provider: callbackdv1alpha1.ProviderWeChatPay,
		Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: merchantID, AppID: appID}}); err != nil {
		return err
	}
	r.signer = &paysim.WeChatPay{APIv3Key: r.set.APIv3Key, Serial: r.set.Manifest.WeChatSerial, Key: r.set.PlatformKey}
	r.cfg = benchConfig(r.dsn, r.redis.SentinelAddrs(), r.redis.MasterName, r.set.Channel(callbackdv1alpha1.ChannelSettings{}), int32(dbConcurrency))
	r.step("migrating (callbackd migrate)")
	if err := migrate(ctx, r.callbackd, r.dir, r.cfg); err != nil {
		return err
	}
	if r.pool, err = pgxpool.New(ctx, r.dsn); err != nil {
		return fmt.Errorf("bench: connect PostgreSQL: %w", err)
	}
	r.rdb = redis.NewClient(&redis.Options{Addr: r.redis.MasterAddr()})
	return nil
}

// stop ends everything the run started, in reverse order.
func (r *runner) stop() error {
	var errs []error
	for _, p := range slices.Backward(r.procs) {
		if err := p.stop(20 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if r.rdb != nil {
		_ = r.rdb.Close()
	}
	if r.pool != nil {
		r.pool.Close()
	}
	if r.redis != nil {
		if err := r.redis.Close(); err != nil {
			errs = append(errs, fmt.Errorf("bench: stop Redis: %w", err))
		}
	}
	if r.pg != nil {
		if err := r.pg.Close(); err != nil {
			errs = append(errs, fmt.Errorf("bench: stop PostgreSQL: %w", err))
		}
	}
	if r.removeDir && r.dir != "" {
		_ = os.RemoveAll(r.dir)
	}
	r.step("stopped every process the benchmark started")
	return errors.Join(errs...)
}

// write renders the outputs, comparing with the previous JSON first.
func (r *runner) write(rep *Report) error {
	if err := os.MkdirAll(r.opts.OutDir, 0o755); err != nil {
		return fmt.Errorf("bench: output folder: %w", err)
	}
	jsonPath := filepath.Join(r.opts.OutDir, JSONFile)
	prev, err := readPrevious(jsonPath)
	if err != nil {
		r.step("warning: %v; not comparing", err)
	}
	if prev != nil && prev.Quick != rep.Quick {
		r.step("the previous report is from a %s run; not comparing ratios across modes", map[bool]string{true: "QUICK", false: "full"}[prev.Quick])
		prev = nil
	}
	if prev != nil {
		rep.PreviousDate = prev.Date
		rep.Regressions = CompareRatios(prev.Goals, rep.Goals)
		for _, g := range rep.Regressions {
			r.step("REGRESSION: %s: ratio %.2f, was %.2f (%.1f%% lower)", g.Figure, g.Current, g.Previous, g.DropPct)
		}
	}
	if err := writeChart(filepath.Join(r.opts.OutDir, ChartFile), rep.Scenarios); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(r.opts.OutDir, ReportFile), []byte(rep.Markdown()), 0o644); err != nil {
		return fmt.Errorf("bench: write report: %w", err)
	}
	b, err := jsonMarshal(rep)
	if err != nil {
		return err
	}
	return os.WriteFile(jsonPath, b, 0o644)
}

// notificationSet is a batch of signed notifications for a batch of trades, signed again when it
// is about to leave the timestamp window.
type notificationSet struct {
	trades   []trade
	notes    []paysim.Notification
	signedAt time.Time
}

// trade is one order paid at the provider.
type trade struct {
	orderNo, txnID string
	amount         int64
}

const tradeAmount = 100

// newTrades makes n trades "<prefix>-<i>".
func newTrades(prefix string, n int) []trade {
	out := make([]trade, n)
	for i := range out {
		no := fmt.Sprintf("%s-%07d", prefix, i)
		out[i] = trade{orderNo: no, txnID: fmt.Sprintf("4200%024d", rand.Uint64()%1e18+uint64(i)), amount: tradeAmount}
	}
	return out
}

// register inserts the trades' PENDING orders in bulk (COPY).
func (r *runner) register(ctx context.Context, trades []trade) error {
	rows := make([][]any, len(trades))
	for i, t := range trades {
		rows[i] = []any{t.orderNo, channelName, merchantID, t.amount, "CNY", "bench"}
	}
	_, err := r.pool.CopyFrom(ctx, pgx.Identifier{"payment_orders"},
		[]string{"order_no", "channel", "merchant_id", "amount", "currency", "request_digest"}, pgx.CopyFromRows(rows))
	if err != nil {
		return fmt.Errorf("bench: register %d orders: %w", len(trades), err)
	}
	return nil
}

// sign signs one notification per trade, on every core.
func (r *runner) sign(trades []trade) (*notificationSet, error) {
	ns := &notificationSet{trades: trades, notes: make([]paysim.Notification, len(trades)), signedAt: time.Now()}
	ts := time.Now().Add(4 * time.Minute)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	workers := runtime.NumCPU()
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(trades); i += workers {
				t := trades[i]
				n, err := r.signer.Payment(paysim.WeChatTransaction{
					MchID: merchantID, AppID: appID, OutTradeNo: t.orderNo, TransactionID: t.txnID,
					TradeType: "JSAPI", TradeState: "SUCCESS", TradeStateDesc: "支付成功", BankType: "OTHERS",
					SuccessTime: paysim.WeChatTime(time.Now()),
					Payer:       paysim.WeChatPayer{OpenID: "oUpF8uMuAJO_M2pxb1Q9zNjWeS6o"},
					Amount:      paysim.WeChatAmount{Total: t.amount, PayerTotal: t.amount, Currency: "CNY", PayerCurrency: "CNY"},
				}, paysim.WeChatOptions{ID: fmt.Sprintf("bench-%s", t.txnID), Timestamp: ts})
				if err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, err)
					mu.Unlock()
					return
				}
				ns.notes[i] = n
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, fmt.Errorf("bench: sign notifications: %w", firstErr)
	}
	return ns, nil
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// fresh returns ns, signed again if it is older than 4 minutes.
func (r *runner) fresh(ns *notificationSet) (*notificationSet, error) {
	if time.Since(ns.signedAt) < 4*time.Minute {
		return ns, nil
	}
	r.step("signing %d notifications again (the first signatures are about to leave the timestamp window)", len(ns.trades))
	return r.sign(ns.trades)
}

// requests addresses every notification of ns to url, repeated times over.
func requests(ns *notificationSet, url string, times int) []Request {
	out := make([]Request, 0, len(ns.notes)*times)
	for range times {
		for _, n := range ns.notes {
			out = append(out, Request{URL: url, Notification: n})
		}
	}
	return out
}

// newSet makes, registers and signs n fresh trades.
func (r *runner) newSet(ctx context.Context, prefix string, n int) (*notificationSet, error) {
	trades := newTrades(prefix, n)
	if err := r.register(ctx, trades); err != nil {
		return nil, err
	}
	r.orderCount += n
	return r.sign(trades)
}

// profiled runs load while taking a CPU profile of rep for the first r.sz.profile of it; the
// profile is kept under id, for the goals that turn out not met.
func (r *runner) profiled(ctx context.Context, rep *replica, id string, load func() LoadResult) LoadResult {
	var wg sync.WaitGroup
	wg.Go(func() {
		path, err := cpuProfile(ctx, rep, r.dir, id, r.sz.profile)
		if err != nil {
			r.step("warning: no profile for %s: %v", id, err)
			return
		}
		r.profiles[id] = path
	})
	res := load()
	wg.Wait()
	r.windows[id] = min(r.sz.profile, res.Elapsed)
	return res
}

// Render writes benchmarks.md and benchmarks.png again from the benchmarks.json in outDir,
// without measuring anything (after a change to the report's wording, say).
func Render(outDir string) (*Report, error) {
	rep, err := readPrevious(filepath.Join(outDir, JSONFile))
	if err != nil {
		return nil, err
	}
	if rep == nil {
		return nil, fmt.Errorf("bench: render: no %s in %s; run the benchmark first", JSONFile, outDir)
	}
	if err := writeChart(filepath.Join(outDir, ChartFile), rep.Scenarios); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(outDir, ReportFile), []byte(rep.Markdown()), 0o644); err != nil {
		return nil, fmt.Errorf("bench: write report: %w", err)
	}
	return rep, nil
}
