package bench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The limits are measured with the servers' own tools, on exactly the statements callbackd runs
// (callbackd/store/apply.go): begin; receipt insert (ON CONFLICT DO NOTHING RETURNING id); the
// order row lock; the status-guarded update, the ledger entry and the outbox event sent in one
// pipeline; commit. Every transaction is a fresh key and a fresh PENDING order, committed with
// synchronous_commit on, so each one waits for its WAL flush as callbackd's do.
const pgbenchUniqueScript = `BEGIN;
INSERT INTO callback_receipts (idempotency_key, channel, provider, merchant_id, sub_merchant_id,
    order_no, kind, out_refund_no, status, amount, currency, provider_txn_id, notify_id,
    body_digest, outcome, occurred_at)
VALUES ('wechat|1900000109||PGB-' || nextval('bench_pgb_seq') || '|payment|', 'wechat', 'wechatpay', '1900000109', '',
    'PGB-' || currval('bench_pgb_seq'), 'payment', '', 'SUCCEEDED', 100, '', '4200000000202611291234567890',
    '0c1d2e3f-4a5b-4c6d-8e7f-8091a2b3c4d5', 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', 'applied', now())
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id, order_no \gset
SELECT channel, merchant_id, sub_merchant_id, amount, refunded_amount, currency, status, provider_txn_id
FROM payment_orders WHERE order_no = :order_no FOR UPDATE;
\startpipeline
UPDATE payment_orders
SET status = 'PAID', provider_txn_id = '4200000000202611291234567890', paid_at = COALESCE(now(), now()), updated_at = now()
WHERE order_no = :order_no AND status = 'PENDING';
INSERT INTO ledger_entries (order_no, entry_type, refund_no, amount, currency, provider_txn_id,
    provider_refund_id, idempotency_key)
VALUES (:order_no, 'payment', '', 100, 'CNY', '4200000000202611291234567890', '', 'wechat|1900000109||' || :order_no || '|payment|');
INSERT INTO outbox_events (event_id, channel, order_no, event_type, payload)
VALUES ('evt_pgb_' || :id, 'wechat', :order_no, 'payment.succeeded',
    ('{"event_id":"evt_pgb_' || :id || '","type":"payment.succeeded","channel":"wechat","merchant_id":"1900000109","order_no":"' || :order_no || '","amount":100,"currency":"CNY","provider_txn_id":"4200000000202611291234567890","order_status":"PAID","occurred_at":"2026-11-29T11:00:00Z"}')::jsonb)
ON CONFLICT (event_id) DO NOTHING;
\endpipeline
COMMIT;
`

// The duplicate path: the receipt insert conflicts, the existing receipt is read, and the
// transaction is rolled back (nothing written), as callbackd does for a duplicate that reaches
// the database.
const pgbenchDuplicateScript = `\set n random(1, :maxn)
BEGIN;
INSERT INTO callback_receipts (idempotency_key, channel, provider, merchant_id, sub_merchant_id,
    order_no, kind, out_refund_no, status, amount, currency, provider_txn_id, notify_id,
    body_digest, outcome, occurred_at)
VALUES ('wechat|1900000109||PGB-' || :n || '|payment|', 'wechat', 'wechatpay', '1900000109', '',
    'PGB-' || :n, 'payment', '', 'SUCCEEDED', 100, '', '4200000000202611291234567890',
    '0c1d2e3f-4a5b-4c6d-8e7f-8091a2b3c4d5', 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', 'applied', now())
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id;
SELECT r.provider_txn_id, r.outcome, COALESCE(o.status, '')
FROM callback_receipts r LEFT JOIN payment_orders o ON o.order_no = 'PGB-' || :n
WHERE r.idempotency_key = 'wechat|1900000109||PGB-' || :n || '|payment|';
ROLLBACK;
`

// pgbenchSetupSQL registers the PENDING orders the unique script pays, one per transaction.
const pgbenchSetupSQL = `
CREATE SEQUENCE IF NOT EXISTS bench_pgb_seq;
INSERT INTO payment_orders (order_no, channel, merchant_id, amount, currency, request_digest)
SELECT 'PGB-' || g, 'wechat', '1900000109', 100, 'CNY', 'bench' FROM generate_series(1, %d) g`

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
var failedLine = regexp.MustCompile(`number of failed transactions: ([0-9]+)`)
var latLine = regexp.MustCompile(`latency average = ([0-9.]+) ms`)

// PgbenchResult is one pgbench run.
type PgbenchResult struct {
	TPS          float64 `json:"tps"`
	LatencyAvgMS float64 `json:"latency_avg_ms"`
	Clients      int     `json:"clients"`
	Seconds      int     `json:"seconds"`
}

// findTool looks a server tool up on PATH, then in PostgreSQL's versioned bin folders.
func findTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(matches) > 0 {
		return matches[len(matches)-1], nil
	}
	return "", fmt.Errorf("bench: %s not found on PATH or in /usr/lib/postgresql/*/bin: install it with `make deps` (hack/deps.sh: postgresql, postgresql-contrib, redis-server, redis-tools)", name)
}

// runPgbench runs script at clients for secs against dsn and parses the rate.
func runPgbench(ctx context.Context, dsn, dir, name, script string, clients, secs int, defines ...string) (PgbenchResult, error) {
	bin, err := findTool("pgbench")
	if err != nil {
		return PgbenchResult{}, err
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return PgbenchResult{}, fmt.Errorf("bench: parse DSN: %w", err)
	}
	path := filepath.Join(dir, name+".sql")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		return PgbenchResult{}, fmt.Errorf("bench: write pgbench script: %w", err)
	}
	args := []string{"-n", "-M", "prepared", "-c", strconv.Itoa(clients), "-j", "2", "-T", strconv.Itoa(secs),
		"-h", u.Hostname(), "-p", u.Port(), "-U", u.User.Username(), "-f", path}
	for _, d := range defines {
		args = append(args, "-D", d)
	}
	args = append(args, strings.TrimPrefix(u.Path, "/"))
	cmd := execCommand(ctx, bin, args...)
	if pw, ok := u.User.Password(); ok {
		cmd.Env = append(cmd.Env, "PGPASSWORD="+pw)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return PgbenchResult{}, fmt.Errorf("bench: pgbench %s: %w\n%s", name, err, tail(string(out), 15))
	}
	m := tpsLine.FindSubmatch(out)
	if m == nil {
		return PgbenchResult{}, fmt.Errorf("bench: pgbench %s: no tps in its output:\n%s", name, tail(string(out), 15))
	}
	res := PgbenchResult{Clients: clients, Seconds: secs}
	res.TPS, _ = strconv.ParseFloat(string(m[1]), 64)
	if l := latLine.FindSubmatch(out); l != nil {
		res.LatencyAvgMS, _ = strconv.ParseFloat(string(l[1]), 64)
	}
	// A run whose clients aborted or whose transactions failed measured something else: refuse it.
	if f := failedLine.FindSubmatch(out); strings.Contains(string(out), "aborted") || (f != nil && string(f[1]) != "0") {
		return res, fmt.Errorf("bench: pgbench %s: transactions failed or clients aborted:\n%s", name, tail(string(out), 15))
	}
	return res, nil
}

// RedisBenchResult is one redis-benchmark run.
type RedisBenchResult struct {
	RPS     float64 `json:"rps"`
	Clients int     `json:"clients"`
	Command string  `json:"command"`
}

// runRedisBenchmark measures SET key NX EX on random keys (redis-benchmark's -t cannot do NX, so
// the command is given literally; __rand_int__ is replaced per request, -r sets the key space).
func runRedisBenchmark(ctx context.Context, addr string, clients, requests int) (RedisBenchResult, error) {
	bin, err := findTool("redis-benchmark")
	if err != nil {
		return RedisBenchResult{}, err
	}
	host, port, _ := strings.Cut(addr, ":")
	command := []string{"SET", "bench:claim:__rand_int__", "attempt-token-0123456789abcdef", "NX", "EX", "60"}
	args := append([]string{"-h", host, "-p", port, "-c", strconv.Itoa(clients), "-n", strconv.Itoa(requests),
		"-r", "100000000", "--csv"}, command...)
	out, err := execCommand(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return RedisBenchResult{}, fmt.Errorf("bench: redis-benchmark: %w\n%s", err, tail(string(out), 10))
	}
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Split(line, ",")
		if len(fields) < 2 || strings.HasPrefix(line, `"test"`) {
			continue
		}
		rps, err := strconv.ParseFloat(strings.Trim(fields[1], `"`), 64)
		if err == nil && rps > 0 {
			return RedisBenchResult{RPS: rps, Clients: clients, Command: strings.Join(command, " ")}, nil
		}
	}
	return RedisBenchResult{}, fmt.Errorf("bench: redis-benchmark: no rate in its output:\n%s", tail(string(out), 10))
}

// sinceSeconds is a helper for progress lines.
func sinceSeconds(t time.Time) string { return fmt.Sprintf("%.1fs", time.Since(t).Seconds()) }
