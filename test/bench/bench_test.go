package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// logWriter forwards progress lines to the test log.
type logWriter struct {
	t  *testing.T
	mu sync.Mutex
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestQuickBenchmark runs `make bench QUICK=1`'s benchmark end to end (real PostgreSQL, Redis
// Sentinel, callbackd, pgbench, redis-benchmark) into a temporary folder that already holds a
// previous run whose ratios are far above anything reachable, and checks that the report, the
// chart and the JSON are written with sane numbers and that the planted regression is flagged.
func TestQuickBenchmark(t *testing.T) {
	out := t.TempDir()
	planted := Report{Date: "2000-01-01T00:00:00Z", Quick: true, Goals: []Goal{
		{ID: "unique", Figure: "unique callbacks, maximum throughput", Ratio: 50},
		{ID: "window", Figure: "duplicates answered from the in-process window", Ratio: 50},
	}}
	b, err := json.Marshal(planted)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, JSONFile), b, 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{Quick: true, OutDir: out, Log: &logWriter{t: t}})
	if err != nil {
		t.Fatalf("bench.Run(QUICK): expected a completed run, got %v", err)
	}

	// The three files, non-empty, of the right kind.
	md, err := os.ReadFile(filepath.Join(out, ReportFile))
	if err != nil {
		t.Fatalf("expected %s: %v", ReportFile, err)
	}
	png, err := os.ReadFile(filepath.Join(out, ChartFile))
	if err != nil {
		t.Fatalf("expected %s: %v", ChartFile, err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 10_000 {
		t.Errorf("%s: expected a PNG image of some size, got %d bytes starting %q", ChartFile, len(png), png[:min(8, len(png))])
	}
	var written Report
	raw, err := os.ReadFile(filepath.Join(out, JSONFile))
	if err != nil {
		t.Fatalf("expected %s: %v", JSONFile, err)
	}
	if err := json.Unmarshal(raw, &written); err != nil {
		t.Fatalf("%s: expected JSON, got %v", JSONFile, err)
	}
	if written.Date != rep.Date || len(written.Goals) != len(rep.Goals) {
		t.Errorf("%s: expected the run's report (date %s, %d goals), got date %s, %d goals", JSONFile, rep.Date, len(rep.Goals), written.Date, len(written.Goals))
	}

	// Sane, non-zero numbers.
	limits := map[string]float64{
		"(a) pgbench unique tps":      written.Limits.UniqueTx.TPS,
		"(b) pgbench duplicate tps":   written.Limits.DuplicateTx.TPS,
		"(c) redis-benchmark rps":     written.Limits.RedisSetNX.RPS,
		"(d) verify handler requests": written.Limits.VerifyHandler.Throughput,
	}
	for name, v := range limits {
		if v <= 0 || v > 10_000_000 {
			t.Errorf("limit %s: expected a positive, plausible rate, got %v", name, v)
		}
	}
	want := []string{"unique", "window", "redis", "unique50", "unique80", "storm", "rss", "down-unique", "down-dup", "scale-unique", "scale-dup",
		"field-check-then-act", "field-unique-index-only", "field-redis-lock-only"}
	got := map[string]Scenario{}
	for _, s := range written.Scenarios {
		got[s.ID] = s
	}
	for _, id := range want {
		s, ok := got[id]
		switch {
		case !ok:
			t.Errorf("scenario %s: expected in the report, missing", id)
		case s.Throughput <= 0 || s.Requests <= 0 || s.P99MS <= 0 || s.P50MS > s.P99MS:
			t.Errorf("scenario %s: expected requests > 0, throughput > 0 and 0 < p50 ≤ p99, got %d requests, %.1f/s, p50 %.2f ms, p99 %.2f ms",
				id, s.Requests, s.Throughput, s.P50MS, s.P99MS)
		}
	}
	if written.Storm.Window+written.Storm.Redis+written.Storm.Database == 0 {
		t.Errorf("storm: expected duplicates counted by callbackd's gates, got none")
	}
	if written.PeakRSSBytes < 1<<20 {
		t.Errorf("peak RSS: expected at least 1 MiB, got %d bytes", written.PeakRSSBytes)
	}
	if written.CallbackdDoubleEffects != 0 {
		t.Errorf("callbackd: expected no order booked twice, got %d", written.CallbackdDoubleEffects)
	}
	if len(written.Designs) != 3 {
		t.Errorf("designs from the field: expected 3, got %d", len(written.Designs))
	}
	if len(written.Goals) < 15 {
		t.Errorf("goals: expected every goal of the issue (at least 15 rows), got %d", len(written.Goals))
	}
	for _, g := range written.Goals {
		if !g.Met && g.Ratio > 0 && g.Profile == "" && g.ID != "rss" && !strings.HasPrefix(g.ID, "field-") {
			t.Errorf("goal %s not met: expected a CPU profile of callbackd in the report, got none", g.ID)
		}
	}

	// The planted regression is flagged, in the JSON and in the note.
	flagged := map[string]bool{}
	for _, r := range written.Regressions {
		flagged[r.ID] = true
	}
	if !flagged["unique"] || !flagged["window"] {
		t.Errorf("regressions: expected the planted drops of unique and window flagged, got %+v", written.Regressions)
	}
	for _, s := range []string{"| figure | limit | callbackd | ratio | goal |", "## Machine", "benchmarks.png",
		"Compared with the previous run (2000-01-01T00:00:00Z)", "QUICK mode"} {
		if !strings.Contains(string(md), s) {
			t.Errorf("%s: expected it to contain %q", ReportFile, s)
		}
	}
}

func TestCompareRatios(t *testing.T) {
	tests := []struct {
		name           string
		previous, now  float64
		missingBefore  bool
		wantRegression bool
	}{
		{name: "drop of 16% is flagged", previous: 1.0, now: 0.84, wantRegression: true},
		{name: "drop of 14% is not", previous: 1.0, now: 0.86},
		{name: "improvement is not", previous: 0.5, now: 0.9},
		{name: "new goal is not compared", missingBefore: true, now: 0.1},
		{name: "goal without ratio is not compared", previous: 0, now: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var prev []Goal
			if !tc.missingBefore {
				prev = []Goal{{ID: "g", Ratio: tc.previous}}
			}
			regs := CompareRatios(prev, []Goal{{ID: "g", Ratio: tc.now}})
			if got := len(regs) == 1; got != tc.wantRegression {
				t.Fatalf("expected regression %v, got %+v", tc.wantRegression, regs)
			}
		})
	}
}

func TestLatenciesQuantile(t *testing.T) {
	var l Latencies
	for i := 100; i >= 1; i-- {
		l.Add(time.Duration(i) * time.Millisecond)
	}
	tests := []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0.001, time.Millisecond}}
	for _, tc := range tests {
		if got := l.Quantile(tc.q); got != tc.want {
			t.Errorf("Quantile(%v): expected %v, got %v", tc.q, tc.want, got)
		}
	}
	var empty Latencies
	if got := empty.Quantile(0.99); got != 0 {
		t.Errorf("Quantile of no samples: expected 0, got %v", got)
	}
}

func TestParseGates(t *testing.T) {
	text := `# HELP callbackd_duplicates_stopped_total Duplicate callbacks acknowledged without effect.
# TYPE callbackd_duplicates_stopped_total counter
callbackd_duplicates_stopped_total{channel="wechat",gate="window"} 1600
callbackd_duplicates_stopped_total{channel="alipay",gate="window"} 4
callbackd_duplicates_stopped_total{channel="wechat",gate="redis"} 2e+02
callbackd_duplicates_stopped_total{channel="wechat",gate="database"} 0
callbackd_callbacks_total{channel="wechat",outcome="applied"} 200
callbackd_lock_contention_total{channel="wechat"} 7
`
	got := gateCounts{}
	if err := parseGates(strings.NewReader(text), got); err != nil {
		t.Fatalf("parseGates: %v", err)
	}
	want := gateCounts{"window": 1604, "redis": 200, "database": 0, contentionKey: 7}
	for g, n := range want {
		if got[g] != n {
			t.Errorf("gate %s: expected %d, got %d", g, n, got[g])
		}
	}
	if got.total() != 1804 {
		t.Errorf("total of the gates: expected 1804 (lock contention is not a gate), got %d", got.total())
	}
}
