package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"time"

	"github.com/seed-1cff2221/callback-platform/test/bench/field"
)

func jsonMarshal(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("bench: encode report: %w", err)
	}
	return append(b, '\n'), nil
}

// limits measures (a) to (d).
func (r *runner) limits(ctx context.Context, rep *Report) error {
	r.step("limit (a): registering %d orders for pgbench", r.sz.pgbenchOrders)
	if _, err := r.pool.Exec(ctx, fmt.Sprintf(pgbenchSetupSQL, r.sz.pgbenchOrders)); err != nil {
		return fmt.Errorf("bench: pgbench setup: %w", err)
	}
	r.step("limit (a): pgbench, callbackd's unique-callback transaction, %d clients, %d s", dbConcurrency, r.sz.pgbenchSecs)
	a, err := runPgbench(ctx, r.dsn, r.dir, "unique", pgbenchUniqueScript, dbConcurrency, r.sz.pgbenchSecs)
	if err != nil {
		return err
	}
	rep.Limits.UniqueTx = a
	r.step("limit (a): %.0f transactions/s", a.TPS)
	var maxn int64
	if err := r.pool.QueryRow(ctx, `SELECT count(*) FROM callback_receipts WHERE order_no LIKE 'PGB-%'`).Scan(&maxn); err != nil {
		return fmt.Errorf("bench: count the receipts pgbench left: %w", err)
	}
	if maxn < 1 {
		return errors.New("bench: pgbench of the unique transaction left no receipts")
	}
	r.step("limit (b): pgbench, the duplicate path over %d receipts, %d clients, %d s", maxn, dbConcurrency, r.sz.pgbenchSecs)
	b, err := runPgbench(ctx, r.dsn, r.dir, "duplicate", pgbenchDuplicateScript, dbConcurrency, r.sz.pgbenchSecs, fmt.Sprintf("maxn=%d", maxn))
	if err != nil {
		return err
	}
	rep.Limits.DuplicateTx = b
	r.step("limit (b): %.0f transactions/s", b.TPS)

	r.step("limit (c): redis-benchmark SET NX EX, %d clients, %d requests", dupConcurrency, r.sz.redisRequests)
	c, err := runRedisBenchmark(ctx, r.redis.MasterAddr(), dupConcurrency, r.sz.redisRequests)
	if err != nil {
		return err
	}
	rep.Limits.RedisSetNX = c
	r.step("limit (c): %.0f requests/s", c.RPS)
	if _, err := r.rdb.FlushDB(ctx).Result(); err != nil {
		return fmt.Errorf("bench: flush redis-benchmark keys: %w", err)
	}

	r.step("limit (d): a handler that only verifies WeChat Pay notifications; signing %d notifications", 1000)
	srv, base, err := r.startBenchserver(ctx, "verify-handler", "verify")
	if err != nil {
		return err
	}
	ns, err := r.sign(newTrades("VERIFY", 1000))
	if err != nil {
		return err
	}
	client := NewLoadClient(dupConcurrency, 10*time.Second)
	reqs := requests(ns, base+"/notify/"+channelName, max(1, r.sz.verifyReqs/len(ns.notes)))
	d := ClosedLoop(ctx, client, reqs, dupConcurrency)
	client.CloseIdleConnections()
	if err := srv.stop(10 * time.Second); err != nil {
		return err
	}
	if d.OK != d.Sent {
		return fmt.Errorf("bench: limit (d): %d of %d requests failed (statuses %v, %s)", d.Sent-d.OK, d.Sent, d.Statuses, d.FirstError)
	}
	rep.Limits.VerifyHandler = scenarioOf("limit-d", "limit (d) verify only", "limit", dupConcurrency, 0, d)
	rep.Scenarios = append(rep.Scenarios, Scenario{ID: "limit-a", Name: "limit (a) pgbench unique", Target: "limit",
		Concurrency: a.Clients, Throughput: a.TPS}, Scenario{ID: "limit-b", Name: "limit (b) pgbench duplicate", Target: "limit",
		Concurrency: b.Clients, Throughput: b.TPS}, Scenario{ID: "limit-c", Name: "limit (c) redis SET NX EX", Target: "limit",
		Concurrency: c.Clients, Throughput: c.RPS}, rep.Limits.VerifyHandler)
	r.step("limit (d): %s", d)
	return nil
}

// startBenchserver starts benchserver with mode's arguments and waits for it.
func (r *runner) startBenchserver(ctx context.Context, name string, args ...string) (*process, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	args = append(args, "--keys", filepath.Join(r.dir, "keys"), "--listen", addr)
	p, err := startProcess(name, r.benchsrv, args, nil, filepath.Join(r.dir, name+".log"))
	if err != nil {
		return nil, "", err
	}
	r.procs = append(r.procs, p)
	if err := waitHTTP(ctx, p, "http://"+addr+"/healthz", 30*time.Second); err != nil {
		return nil, "", err
	}
	return p, "http://" + addr, nil
}

// startReplica starts one more callbackd replica with the run's configuration.
func (r *runner) startReplica(ctx context.Context, name string) (*replica, error) {
	rp, err := startReplica(ctx, r.callbackd, r.dir, name, r.cfg)
	if err != nil {
		return nil, err
	}
	r.procs = append(r.procs, rp.proc)
	return rp, nil
}

// check fails a run that measured nothing: no request sent, or most of them not acknowledged
// (a broken setup rather than a slow server). A few retryable answers under load are a result,
// not a failure: they are reported with the scenario.
func (r *runner) check(name string, res LoadResult) error {
	if res.Sent == 0 {
		return fmt.Errorf("bench: %s: no request was sent", name)
	}
	if res.OK*2 < res.Sent {
		return fmt.Errorf("bench: %s: %d of %d requests were not acknowledged (statuses %v; %s)", name, res.Sent-res.OK, res.Sent, res.Statuses, res.FirstError)
	}
	if res.OK != res.Sent {
		r.step("%s: %d of %d requests were answered with a retryable failure (statuses %v)", name, res.Sent-res.OK, res.Sent, res.Statuses)
	}
	return nil
}

// callbackdScenarios runs every callbackd scenario and the designs from the field.
func (r *runner) callbackdScenarios(ctx context.Context, rep *Report) error {
	r.step("starting two callbackd replicas")
	rep1, err := r.startReplica(ctx, "callbackd-1")
	if err != nil {
		return err
	}
	rep2, err := r.startReplica(ctx, "callbackd-2")
	if err != nil {
		return err
	}
	url1, url2 := rep1.notifyURL(), rep2.notifyURL()
	dbClient := NewLoadClient(dbConcurrency, 10*time.Second)
	dupClient := NewLoadClient(dupConcurrency, 10*time.Second)
	openClient := NewLoadClient(512, 10*time.Second)
	defer dbClient.CloseIdleConnections()
	defer dupClient.CloseIdleConnections()
	defer openClient.CloseIdleConnections()

	// Unique callbacks, maximum throughput.
	r.step("unique: registering and signing %d orders", r.sz.unique)
	setA, err := r.newSet(ctx, "BENCH-A", r.sz.unique)
	if err != nil {
		return err
	}
	// Warm-up, not measured: callbackd's pools open their connections and prepare their
	// statements on first use, and PostgreSQL's caches start cold.
	warm, err := r.newSet(ctx, "BENCH-W", max(200, r.sz.unique/20))
	if err != nil {
		return err
	}
	r.step("warm-up: %d callbacks to each replica, not measured", len(warm.notes))
	if err := r.check("warm-up", ClosedLoop(ctx, dbClient, requests(warm, url1, 1), dbConcurrency)); err != nil {
		return err
	}
	if err := r.check("warm-up", ClosedLoop(ctx, dupClient, requests(warm, url2, 1), dupConcurrency)); err != nil {
		return err
	}
	r.step("unique: %d callbacks, closed loop at concurrency %d", r.sz.unique, dbConcurrency)
	uniq := r.profiled(ctx, rep1, "unique", func() LoadResult { return ClosedLoop(ctx, dbClient, requests(setA, url1, 1), dbConcurrency) })
	if err := r.check("unique", uniq); err != nil {
		return err
	}
	rep.Scenarios = append(rep.Scenarios, scenarioOf("unique", "unique max", "callbackd", dbConcurrency, 0, uniq))
	r.step("unique: %s", uniq)

	// Duplicates answered from the in-process window: the same notifications, same replica.
	r.step("window: %d duplicates of finished callbacks to the same replica, concurrency %d", 2*len(setA.notes), dupConcurrency)
	win := r.profiled(ctx, rep1, "window", func() LoadResult { return ClosedLoop(ctx, dupClient, requests(setA, url1, 2), dupConcurrency) })
	if err := r.check("window", win); err != nil {
		return err
	}
	rep.Scenarios = append(rep.Scenarios, scenarioOf("window", "duplicates, window", "callbackd", dupConcurrency, 0, win))
	r.step("window: %s", win)

	// Duplicates answered by the Redis success mark: the other replica has never seen them.
	r.step("redis gate: %d duplicates to the other replica, concurrency %d", len(setA.notes), dupConcurrency)
	red := r.profiled(ctx, rep2, "redis", func() LoadResult { return ClosedLoop(ctx, dupClient, requests(setA, url2, 1), dupConcurrency) })
	if err := r.check("redis gate", red); err != nil {
		return err
	}
	rep.Scenarios = append(rep.Scenarios, scenarioOf("redis", "duplicates, Redis gate", "callbackd", dupConcurrency, 0, red))
	r.step("redis gate: %s", red)

	// Unique callbacks at 50% and 80% of the maximum, open loop.
	for _, load := range []struct {
		id   string
		frac float64
	}{{"unique50", 0.5}, {"unique80", 0.8}} {
		rate := load.frac * uniq.Throughput
		n := max(50, int(rate*r.sz.openSecs))
		r.step("%s: registering and signing %d orders", load.id, n)
		s, err := r.newSet(ctx, "BENCH-"+load.id, n)
		if err != nil {
			return err
		}
		r.step("%s: open loop at %.0f/s (%.0f%% of the maximum) for %.0f s", load.id, rate, 100*load.frac, r.sz.openSecs)
		res := r.profiled(ctx, rep1, load.id, func() LoadResult { return OpenLoop(ctx, openClient, requests(s, url1, 1), rate, 512) })
		if err := r.check(load.id, res); err != nil {
			return err
		}
		rep.Scenarios = append(rep.Scenarios, scenarioOf(load.id, fmt.Sprintf("unique at %.0f%%", 100*load.frac), "callbackd", 0, rate, res))
		r.step("%s: %s", load.id, res)
	}

	// The duplicate storm, 1 unique : 9 duplicates, shuffled, over both replicas.
	r.step("storm: registering and signing %d orders", r.sz.stormKeys)
	setD, err := r.newSet(ctx, "BENCH-D", r.sz.stormKeys)
	if err != nil {
		return err
	}
	storm := stormRequests(setD, []string{url1, url2})
	before, err := scrapeGates(ctx, rep1, rep2)
	if err != nil {
		return err
	}
	r.step("storm: %d requests (%d orders × 10), shuffled, concurrency %d, two replicas", len(storm), r.sz.stormKeys, dupConcurrency)
	st := r.profiled(ctx, rep1, "storm", func() LoadResult { return ClosedLoop(ctx, dupClient, storm, dupConcurrency) })
	after, err := scrapeGates(ctx, rep1, rep2)
	if err != nil {
		return err
	}
	gates := after.sub(before)
	rep.Storm = StormGates{Window: gates["window"], Redis: gates["redis"], Database: gates["database"], Retries: st.Sent - st.OK,
		LockContention: gates[contentionKey]}
	if t := gates.total(); t > 0 {
		rep.Storm.BeforeDatabasePct = 100 * float64(gates["window"]+gates["redis"]) / float64(t)
	}
	rep.Scenarios = append(rep.Scenarios, scenarioOf("storm", "duplicate storm 1:9", "callbackd", dupConcurrency, 0, st))
	r.step("storm: %s; stopped by window %d, Redis %d, PostgreSQL %d (%.2f%% before the database), %d answered resend",
		st, rep.Storm.Window, rep.Storm.Redis, rep.Storm.Database, rep.Storm.BeforeDatabasePct, rep.Storm.Retries)
	if err := r.check("storm", st); err != nil {
		return err
	}

	// Peak RSS with 1,000 concurrent connections, on a fresh replica.
	r.step("rss: a fresh replica, %d concurrent connections", rssConnections)
	rep3, err := r.startReplica(ctx, "callbackd-3")
	if err != nil {
		return err
	}
	if setA, err = r.fresh(setA); err != nil {
		return err
	}
	rssClient := NewLoadClient(rssConnections, 30*time.Second)
	rssReqs := requests(setA, rep3.notifyURL(), max(1, rssConnections*r.sz.rssPerConn/len(setA.notes)))
	rss := ClosedLoop(ctx, rssClient, rssReqs, rssConnections)
	rssClient.CloseIdleConnections()
	if rep.PeakRSSBytes, err = peakRSS(rep3.proc.pid()); err != nil {
		return err
	}
	if err := rep3.proc.stop(20 * time.Second); err != nil {
		return err
	}
	rep.Scenarios = append(rep.Scenarios, scenarioOf("rss", "1,000 connections", "callbackd", rssConnections, 0, rss))
	r.step("rss: %s; peak RSS %.1f MiB", rss, float64(rep.PeakRSSBytes)/(1<<20))

	// The designs from the field on the same storm.
	if err := r.fieldDesigns(ctx, rep, setD); err != nil {
		return err
	}
	if err := r.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT order_no FROM ledger_entries WHERE entry_type = 'payment'
GROUP BY order_no HAVING count(*) > 1) d`).Scan(&rep.CallbackdDoubleEffects); err != nil {
		return fmt.Errorf("bench: count callbackd's double effects: %w", err)
	}
	var unpaid int64
	if err := r.pool.QueryRow(ctx, `SELECT count(*) FROM payment_orders WHERE order_no LIKE 'BENCH-%' AND status <> 'PAID'`).Scan(&unpaid); err != nil {
		return fmt.Errorf("bench: count unpaid orders: %w", err)
	}
	r.step("callbackd: %d orders booked twice, %d of %d orders still unpaid", rep.CallbackdDoubleEffects, unpaid, r.orderCount)

	// Redis down: the database gates alone.
	r.step("redis down: stopping Redis (master, replica, Sentinels)")
	if err := r.redis.Close(); err != nil {
		return fmt.Errorf("bench: stop Redis: %w", err)
	}
	r.redis = nil
	uniqDown, dupDown, err := r.databaseGates(ctx, rep, "down", "BENCH-E", r.sz.redisDown, rep1, rep2)
	if err != nil {
		return err
	}

	// Scale: the same two figures with many receipts already in the table.
	r.step("scale: preloading %d receipts (one INSERT … SELECT generate_series)", r.sz.scaleReceipts)
	t0 := time.Now()
	if err := r.preloadReceipts(ctx, r.sz.scaleReceipts); err != nil {
		return err
	}
	rep.ScaleReceipts = r.sz.scaleReceipts
	r.step("scale: preloaded in %s", sinceSeconds(t0))
	uniqScale, dupScale, err := r.databaseGates(ctx, rep, "scale", "BENCH-F", r.sz.scaleUnique, rep1, rep2)
	if err != nil {
		return err
	}
	r.goals(ctx, rep, uniq, win, red, uniqDown, dupDown, uniqScale, dupScale)
	return nil
}

// databaseGates measures, with Redis stopped, unique callbacks (fresh orders, to rep1) and then
// duplicates stopped by the PostgreSQL receipt: the same notifications, finished on rep1, sent
// once each to rep2, whose window never saw them.
func (r *runner) databaseGates(ctx context.Context, rep *Report, id, prefix string, n int, rep1, rep2 *replica) (LoadResult, LoadResult, error) {
	r.step("%s: registering and signing %d orders", id, n)
	set, err := r.newSet(ctx, prefix, n)
	if err != nil {
		return LoadResult{}, LoadResult{}, err
	}
	dc := NewLoadClient(dbConcurrency, 10*time.Second)
	defer dc.CloseIdleConnections()
	r.step("%s: %d unique callbacks, closed loop at concurrency %d", id, n, dbConcurrency)
	u := r.profiled(ctx, rep1, id+"-unique", func() LoadResult {
		return ClosedLoop(ctx, dc, requests(set, rep1.notifyURL(), 1), dbConcurrency)
	})
	if err := r.check(id+" unique", u); err != nil {
		return u, LoadResult{}, err
	}
	rep.Scenarios = append(rep.Scenarios, scenarioOf(id+"-unique", map[string]string{"down": "Redis down, unique", "scale": "scale, unique"}[id], "callbackd", dbConcurrency, 0, u))
	r.step("%s unique: %s", id, u)
	uc := NewLoadClient(dupConcurrency, 10*time.Second)
	defer uc.CloseIdleConnections()
	r.step("%s: the same %d callbacks again, to the other replica: duplicates stopped by the PostgreSQL receipt, concurrency %d", id, len(set.notes), dupConcurrency)
	d := r.profiled(ctx, rep2, id+"-dup", func() LoadResult {
		return ClosedLoop(ctx, uc, requests(set, rep2.notifyURL(), 1), dupConcurrency)
	})
	if err := r.check(id+" duplicates", d); err != nil {
		return u, d, err
	}
	rep.Scenarios = append(rep.Scenarios, scenarioOf(id+"-dup", map[string]string{"down": "Redis down, duplicates", "scale": "scale, duplicates"}[id], "callbackd", dupConcurrency, 0, d))
	r.step("%s duplicates: %s", id, d)
	return u, d, nil
}

// stormRequests is the duplicate storm: every notification 10 times, shuffled, spread over the
// targets in turn as by a round-robin load balancer.
func stormRequests(ns *notificationSet, targets []string) []Request {
	var out []Request
	for range 10 {
		for _, n := range ns.notes {
			out = append(out, Request{Notification: n})
		}
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	for i := range out {
		out[i].URL = targets[i%len(targets)]
	}
	return out
}

// fieldDesigns runs each design from the field on the storm's load.
func (r *runner) fieldDesigns(ctx context.Context, rep *Report, setD *notificationSet) error {
	designs := field.Designs(r.pool, r.rdb, nil)
	orderNos := make([]string, len(setD.trades))
	for i, t := range setD.trades {
		orderNos[i] = t.orderNo
	}
	setD, err := r.fresh(setD)
	if err != nil {
		return err
	}
	for _, d := range designs {
		r.step("field %s: setting up, %d orders", d.Name, len(orderNos))
		if err := d.Setup(ctx); err != nil {
			return fmt.Errorf("bench: field %s: setup: %w", d.Name, err)
		}
		if err := d.Reset(ctx); err != nil {
			return fmt.Errorf("bench: field %s: reset: %w", d.Name, err)
		}
		if err := d.Preload(ctx, orderNos, tradeAmount); err != nil {
			return fmt.Errorf("bench: field %s: preload: %w", d.Name, err)
		}
		// Two instances behind the same round-robin, as callbackd's two replicas: same topology,
		// same load.
		var procs []*process
		var targets []string
		for i := range 2 {
			p, base, err := r.startBenchserver(ctx, fmt.Sprintf("field-%s-%d", d.Name, i+1), "field", "--design", d.Name, "--dsn", r.dsn,
				"--redis", r.redis.MasterAddr(), "--max-conns", fmt.Sprint(dbConcurrency))
			if err != nil {
				return err
			}
			procs = append(procs, p)
			targets = append(targets, base+"/notify/"+channelName)
		}
		c := NewLoadClient(dupConcurrency, 10*time.Second)
		storm := stormRequests(setD, targets)
		r.step("field %s: the same storm, %d requests, concurrency %d, two instances", d.Name, len(storm), dupConcurrency)
		res := ClosedLoop(ctx, c, storm, dupConcurrency)
		c.CloseIdleConnections()
		for _, p := range procs {
			if err := p.stop(10 * time.Second); err != nil {
				return err
			}
		}
		doubles, err := d.DoubleEffects(ctx)
		if err != nil {
			return fmt.Errorf("bench: field %s: double effects: %w", d.Name, err)
		}
		s := scenarioOf("field-"+d.Name, "field: "+d.Name, d.Name, dupConcurrency, 0, res)
		rep.Scenarios = append(rep.Scenarios, s)
		rep.Designs = append(rep.Designs, DesignResult{Name: d.Name, Storm: s, DoubleEffects: doubles})
		r.step("field %s: %s; %d orders booked twice", d.Name, res, doubles)
	}
	return nil
}

// preloadReceipts adds n committed receipts to callback_receipts with one INSERT … SELECT
// generate_series. The table's two secondary indexes (the unique idempotency key and created_at)
// are dropped first and built again afterwards, in the same transaction: one sorted index build
// is minutes faster than ten million scattered B-tree insertions, and the table ends exactly as
// the migrations define it. A CHECKPOINT and ANALYZE follow, so the timed runs neither pay for the
// load's dirty pages nor plan on stale statistics.
func (r *runner) preloadReceipts(ctx context.Context, n int64) error {
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("bench: preload receipts: %w", err)
	}
	defer conn.Release()
	stmts := []string{
		`SET maintenance_work_mem = '512MB'`,
		`BEGIN`,
		`ALTER TABLE callback_receipts DROP CONSTRAINT callback_receipts_idempotency_key`,
		`DROP INDEX callback_receipts_created_at`,
		fmt.Sprintf(`INSERT INTO callback_receipts (idempotency_key, channel, provider, merchant_id, order_no, kind, status, amount,
    currency, provider_txn_id, notify_id, body_digest, outcome, occurred_at, created_at)
SELECT 'wechat|1900000109||SCALE-' || g || '|payment|', 'wechat', 'wechatpay', '1900000109', 'SCALE-' || g, 'payment',
    'SUCCEEDED', 100, '', '4200' || lpad(g::text, 24, '0'), '0c1d2e3f-4a5b-4c6d-8e7f-8091a2b3c4d5',
    'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', 'applied', now(), now()
FROM generate_series(1, %d::bigint) g`, n),
		`ALTER TABLE callback_receipts ADD CONSTRAINT callback_receipts_idempotency_key UNIQUE (idempotency_key)`,
		`CREATE INDEX callback_receipts_created_at ON callback_receipts (created_at)`,
		`COMMIT`,
		`RESET maintenance_work_mem`,
		`CHECKPOINT`,
		`VACUUM ANALYZE callback_receipts`,
	}
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			_, _ = conn.Exec(context.WithoutCancel(ctx), `ROLLBACK`)
			return fmt.Errorf("bench: preload receipts: %s: %w", strings.Fields(q)[0], err)
		}
	}
	return nil
}
