package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strings"
)

// Report is everything one run measured; it is written as docs/benchmarks.json (raw numbers, for
// later runs to compare with) and rendered as docs/benchmarks.md.
type Report struct {
	Date            string     `json:"date"`
	Quick           bool       `json:"quick"`
	DurationSeconds float64    `json:"duration_seconds"`
	Machine         Machine    `json:"machine"`
	Limits          Limits     `json:"limits"`
	Scenarios       []Scenario `json:"scenarios"`
	// Storm is the duplicate storm's split by gate.
	Storm   StormGates     `json:"storm"`
	Designs []DesignResult `json:"designs"`
	// CallbackdDoubleEffects counts orders with more than one payment ledger entry after the run.
	CallbackdDoubleEffects int64 `json:"callbackd_double_effects"`
	// PeakRSSBytes is callbackd's VmHWM after serving ConnectionsForRSS concurrent connections.
	PeakRSSBytes      int64 `json:"peak_rss_bytes"`
	ConnectionsForRSS int   `json:"connections_for_rss"`
	// ScaleReceipts is the number of receipts preloaded for the scale scenarios.
	ScaleReceipts int64        `json:"scale_receipts"`
	Goals         []Goal       `json:"goals"`
	Regressions   []Regression `json:"regressions,omitempty"`
	// PreviousDate is the date of the report compared with, if any.
	PreviousDate string   `json:"previous_date,omitempty"`
	Notes        []string `json:"notes,omitempty"`
}

// Machine describes where the numbers come from.
type Machine struct {
	CPU        string `json:"cpu"`
	Cores      int    `json:"cores"`
	Kernel     string `json:"kernel"`
	Go         string `json:"go"`
	PostgreSQL string `json:"postgresql"`
	Redis      string `json:"redis"`
	LoadAvg    string `json:"load_average_at_start"`
}

// Limits are the physical limits, measured first.
type Limits struct {
	UniqueTx      PgbenchResult    `json:"a_pgbench_unique"`
	DuplicateTx   PgbenchResult    `json:"b_pgbench_duplicate"`
	RedisSetNX    RedisBenchResult `json:"c_redis_set_nx_ex"`
	VerifyHandler Scenario         `json:"d_verify_handler"`
}

// Scenario is one load run.
type Scenario struct {
	ID          string      `json:"id"`
	Name        string      `json:"name"`
	Target      string      `json:"target"` // callbackd, limit, or a design's name
	Concurrency int         `json:"concurrency,omitempty"`
	RatePerSec  float64     `json:"open_loop_rate,omitempty"`
	Requests    int         `json:"requests"`
	OK          int         `json:"ok"`
	Throughput  float64     `json:"throughput"`
	P50MS       float64     `json:"p50_ms"`
	P99MS       float64     `json:"p99_ms"`
	Seconds     float64     `json:"seconds"`
	Statuses    map[int]int `json:"statuses,omitempty"`
	Note        string      `json:"note,omitempty"`
}

func scenarioOf(id, name, target string, concurrency int, rate float64, r LoadResult) Scenario {
	return Scenario{ID: id, Name: name, Target: target, Concurrency: concurrency, RatePerSec: rate,
		Requests: r.Sent, OK: r.OK, Throughput: r.Throughput, P50MS: ms(r.P50), P99MS: ms(r.P99),
		Seconds: r.Elapsed.Seconds(), Statuses: r.Statuses}
}

// StormGates splits the duplicate storm's duplicates by the gate that stopped them.
type StormGates struct {
	Window   int64 `json:"window"`
	Redis    int64 `json:"redis"`
	Database int64 `json:"database"`
	// BeforeDatabasePct is the share of stopped duplicates that never reached PostgreSQL.
	BeforeDatabasePct float64 `json:"before_database_pct"`
	// Retries counts answers asking the provider to resend (a duplicate that found the first
	// attempt still in flight).
	Retries int `json:"retries"`
	// LockContention counts callbacks that found their key claimed in Redis by an attempt still in
	// flight: they wait for its result and then confirm with PostgreSQL, which is how a duplicate
	// reaches the database while Redis is up.
	LockContention int64 `json:"lock_contention"`
}

// DesignResult is a design from the field under the duplicate storm.
type DesignResult struct {
	Name          string   `json:"name"`
	Storm         Scenario `json:"storm"`
	DoubleEffects int64    `json:"double_effects"`
}

// Goal is one row of the report's table: a figure, the limit it is compared with, the ratio and
// the goal.
type Goal struct {
	ID     string  `json:"id"`
	Figure string  `json:"figure"`
	Limit  string  `json:"limit,omitempty"`
	LimitV float64 `json:"limit_value,omitempty"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	// Ratio is Value / LimitV for the figures measured against a limit (higher is better).
	Ratio  float64 `json:"ratio,omitempty"`
	Target string  `json:"goal"`
	Met    bool    `json:"met"`
	// Profile holds `go tool pprof -top` of callbackd during the scenario, for goals not met.
	Profile string `json:"profile,omitempty"`
}

// Regression is a ratio that dropped by more than RegressionThreshold since the previous run.
type Regression struct {
	ID       string  `json:"id"`
	Figure   string  `json:"figure"`
	Previous float64 `json:"previous_ratio"`
	Current  float64 `json:"current_ratio"`
	DropPct  float64 `json:"drop_pct"`
}

// RegressionThreshold is the relative drop of a ratio that is reported as a regression.
const RegressionThreshold = 0.15

// CompareRatios returns the goals whose ratio dropped by more than RegressionThreshold relative
// to the previous report's ratio of the same goal. Ratios are comparable across machines where
// absolute numbers are not.
func CompareRatios(previous, current []Goal) []Regression {
	prev := map[string]Goal{}
	for _, g := range previous {
		prev[g.ID] = g
	}
	var out []Regression
	for _, g := range current {
		p, ok := prev[g.ID]
		if !ok || p.Ratio <= 0 || g.Ratio <= 0 {
			continue
		}
		if drop := (p.Ratio - g.Ratio) / p.Ratio; drop > RegressionThreshold {
			out = append(out, Regression{ID: g.ID, Figure: g.Figure, Previous: p.Ratio, Current: g.Ratio, DropPct: 100 * drop})
		}
	}
	return out
}

// readPrevious loads a previous report; a missing file is no report and no error.
func readPrevious(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bench: read previous report: %w", err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("bench: previous report %s: %w", path, err)
	}
	return &r, nil
}

func machine() Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				m.CPU = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}

// Markdown renders the report as docs/benchmarks.md.
func (r *Report) Markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# Benchmarks\n\n")
	w("Generated by `make bench`%s on %s (%.0f s). Do not edit: run it again.\n\n", map[bool]string{true: " QUICK=1", false: ""}[r.Quick], r.Date, r.DurationSeconds)
	w("callbackd is measured against the physical limits of its parts on the same machine, in the same run, and\n")
	w("reported as ratios: the machines are shared and noisy, absolute numbers drift, ratios from one run hold.\n\n")
	if r.Quick {
		w("> **QUICK mode**: short runs and %d preloaded receipts instead of 10 million; the numbers show that the\n", r.ScaleReceipts)
		w("> harness works, not what callbackd can do. Run `make bench` for the real figures.\n\n")
	}
	w("## Machine\n\n| | |\n| --- | --- |\n")
	w("| CPU | %s |\n| cores | %d |\n| kernel | %s |\n| Go | %s |\n| PostgreSQL | %s (fsync on, synchronous_commit on) |\n| Redis | %s |\n| load average at start | %s |\n\n",
		r.Machine.CPU, r.Machine.Cores, r.Machine.Kernel, r.Machine.Go, r.Machine.PostgreSQL, r.Machine.Redis, r.Machine.LoadAvg)

	met := 0
	for _, g := range r.Goals {
		if g.Met {
			met++
		}
	}
	w("## Goals: %d of %d met\n\n", met, len(r.Goals))
	w("| figure | limit | callbackd | ratio | goal | |\n| --- | ---: | ---: | ---: | --- | --- |\n")
	for _, g := range r.Goals {
		limit, ratio := "", ""
		if g.Limit != "" {
			limit = fmt.Sprintf("%s: %s", g.Limit, num(g.LimitV, g.Unit))
		}
		if g.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f", g.Ratio)
		}
		verdict := "met"
		if !g.Met {
			verdict = "**not met**"
		}
		w("| %s | %s | %s | %s | %s | %s |\n", g.Figure, limit, num(g.Value, g.Unit), ratio, g.Target, verdict)
	}
	w("\n![throughput and p99 per scenario](benchmarks.png)\n\n")

	w("## Limits (measured first)\n\n")
	w("- (a) `pgbench`, callbackd's unique-callback transaction (receipt insert, order row lock, guarded `UPDATE … WHERE status = 'PENDING'`, ledger, outbox, commit; the three writes pipelined as callbackd sends them), %d clients: **%.0f transactions/s** (average latency %.2f ms).\n",
		r.Limits.UniqueTx.Clients, r.Limits.UniqueTx.TPS, r.Limits.UniqueTx.LatencyAvgMS)
	w("- (b) `pgbench`, the duplicate path (receipt conflict, read of the existing receipt, rollback), %d clients: **%.0f transactions/s**.\n",
		r.Limits.DuplicateTx.Clients, r.Limits.DuplicateTx.TPS)
	w("- (c) `redis-benchmark` of `%s`, %d clients: **%.0f requests/s**.\n", r.Limits.RedisSetNX.Command, r.Limits.RedisSetNX.Clients, r.Limits.RedisSetNX.RPS)
	w("- (d) a Go HTTP handler that only verifies a WeChat Pay v3 notification (callbackd's own adapter: RSA-2048 signature, timestamp window, AES-256-GCM decryption) and answers 204, own process, same load generator, concurrency %d: **%.0f requests/s** (p99 %.2f ms).\n\n",
		r.Limits.VerifyHandler.Concurrency, r.Limits.VerifyHandler.Throughput, r.Limits.VerifyHandler.P99MS)

	w("## Duplicate storm (1 unique : 9 duplicates, concurrency 64, two replicas behind round-robin)\n\n")
	total := r.Storm.Window + r.Storm.Redis + r.Storm.Database
	w("| gate | duplicates stopped | share |\n| --- | ---: | ---: |\n")
	for _, g := range []struct {
		n string
		v int64
	}{{"in-process window", r.Storm.Window}, {"Redis claim / success mark", r.Storm.Redis}, {"PostgreSQL receipt", r.Storm.Database}} {
		w("| %s | %d | %s |\n", g.n, g.v, pct(g.v, total))
	}
	w("\n%.2f%% of the duplicates never reached PostgreSQL; %d answers asked the provider to resend. %d callbacks found their key claimed in Redis by an attempt still in flight (callbackd_lock_contention_total): they wait for that attempt's result and then confirm it with PostgreSQL, so these are the duplicates the database sees while Redis is up; their number grows with the time a first attempt spends in its transaction.\n\n",
		r.Storm.BeforeDatabasePct, r.Storm.Retries, r.Storm.LockContention)

	w("## Designs from the field, on the same storm\n\n")
	w("Implemented minimally inside the benchmark (`test/bench/field`), never in the product; same verification, two instances (own processes) behind the same round-robin as callbackd's two replicas.\n\n")
	w("| design | throughput | p99 | double effects | vs callbackd |\n| --- | ---: | ---: | ---: | ---: |\n")
	var cbStorm Scenario
	for _, s := range r.Scenarios {
		if s.ID == "storm" {
			cbStorm = s
		}
	}
	w("| callbackd | %.0f/s | %.2f ms | %d | 1.00 |\n", cbStorm.Throughput, cbStorm.P99MS, r.CallbackdDoubleEffects)
	for _, d := range r.Designs {
		rel := 0.0
		if cbStorm.Throughput > 0 {
			rel = d.Storm.Throughput / cbStorm.Throughput
		}
		w("| %s | %.0f/s | %.2f ms | %d | %.2f |\n", d.Name, d.Storm.Throughput, d.Storm.P99MS, d.DoubleEffects, rel)
	}
	w("\n")

	w("## Every scenario\n\n| scenario | target | concurrency / rate | requests | ok | throughput | p50 | p99 |\n| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, s := range r.Scenarios {
		load := fmt.Sprintf("closed loop, %d", s.Concurrency)
		if s.RatePerSec > 0 {
			load = fmt.Sprintf("open loop, %.0f/s", s.RatePerSec)
		}
		w("| %s | %s | %s | %d | %d | %.0f/s | %.2f ms | %.2f ms |\n", s.Name, s.Target, load, s.Requests, s.OK, s.Throughput, s.P50MS, s.P99MS)
	}
	w("\nPeak RSS of callbackd (VmHWM) after %d concurrent connections: %.1f MiB. Receipts preloaded for the scale scenarios: %d.\n\n",
		r.ConnectionsForRSS, float64(r.PeakRSSBytes)/(1<<20), r.ScaleReceipts)

	var profiled []Goal
	for _, g := range r.Goals {
		if !g.Met && g.Profile != "" {
			profiled = append(profiled, g)
		}
	}
	if len(profiled) > 0 {
		w("## What limits the goals not met\n\nCPU profile of callbackd during the scenario (`go tool pprof -top`, top entries).\n\n")
		for _, g := range profiled {
			verdict, top, ok := strings.Cut(g.Profile, "\n\n")
			if !ok {
				verdict, top = "", g.Profile
			}
			w("### %s\n\n%s\n\n```\n%s\n```\n\n", g.Figure, verdict, top)
		}
	}
	if r.PreviousDate != "" {
		w("## Compared with the previous run (%s)\n\n", r.PreviousDate)
		if len(r.Regressions) == 0 {
			w("No ratio dropped by more than %.0f%%.\n\n", 100*RegressionThreshold)
		} else {
			w("Ratios that dropped by more than %.0f%% (compared with the benchmarks.json this run replaced; on a shared machine a drop can be noise, so run again before believing it):\n\n", 100*RegressionThreshold)
			w("| figure | previous ratio | ratio now | drop |\n| --- | ---: | ---: | ---: |\n")
			for _, g := range r.Regressions {
				w("| %s | %.2f | %.2f | **%.1f%%** |\n", g.Figure, g.Previous, g.Current, g.DropPct)
			}
			w("\n")
		}
	}
	if len(r.Notes) > 0 {
		w("## Method notes\n\n")
		for _, n := range r.Notes {
			w("- %s\n", n)
		}
	}
	return b.String()
}

func num(v float64, unit string) string {
	switch unit {
	case "ms":
		return fmt.Sprintf("%.2f ms", v)
	case "MiB":
		return fmt.Sprintf("%.1f MiB", v)
	case "%":
		return fmt.Sprintf("%.2f%%", v)
	case "":
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.0f %s", v, unit)
	}
}

func pct(v, total int64) string {
	if total == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", 100*float64(v)/float64(total))
}
