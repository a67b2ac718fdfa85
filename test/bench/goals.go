package bench

import (
	"context"
	"fmt"
)

// goals turns the measurements into the report's table, the goals in its order.
func (r *runner) goals(ctx context.Context, rep *Report, uniq, win, red, uniqDown, dupDown, uniqScale, dupScale LoadResult) {
	a, b, d := rep.Limits.UniqueTx.TPS, rep.Limits.DuplicateTx.TPS, rep.Limits.VerifyHandler.Throughput
	var u50, u80, storm Scenario
	for _, s := range rep.Scenarios {
		switch s.ID {
		case "unique50":
			u50 = s
		case "unique80":
			u80 = s
		case "storm":
			storm = s
		}
	}
	ratio := func(id, figure, limit string, limitV, value, min float64) Goal {
		g := Goal{ID: id, Figure: figure, Limit: limit, LimitV: limitV, Value: value, Unit: "/s",
			Target: fmt.Sprintf("≥ %.1f × limit", min)}
		if limitV > 0 {
			g.Ratio = value / limitV
		}
		g.Met = g.Ratio >= min
		g.Profile = id // replaced by the profile's top entries below
		return g
	}
	atMost := func(id, figure string, value, maxV float64, unit, profile string) Goal {
		g := Goal{ID: id, Figure: figure, Value: value, Unit: unit, Target: fmt.Sprintf("≤ %s", num(maxV, unit)), Met: value > 0 && value <= maxV}
		g.Profile = profile
		return g
	}
	gs := []Goal{
		ratio("unique", "unique callbacks, maximum throughput", "(a) pgbench", a, uniq.Throughput, 0.8),
		atMost("unique50-p99", fmt.Sprintf("unique callbacks p99 at 50%% load (%.0f/s)", u50.RatePerSec), u50.P99MS, 25, "ms", "unique50"),
		atMost("unique80-p99", fmt.Sprintf("unique callbacks p99 at 80%% load (%.0f/s)", u80.RatePerSec), u80.P99MS, 80, "ms", "unique80"),
		ratio("window", "duplicates answered from the in-process window", "(d) verify only", d, win.Throughput, 0.7),
		ratio("redis", "duplicates answered from the Redis gate", "(d) verify only", d, red.Throughput, 0.5),
		atMost("redis-p99", "duplicates from the Redis gate, p99", ms(red.P99), 10, "ms", "redis"),
	}
	before := Goal{ID: "storm-before-db", Figure: "duplicate storm: duplicates that never reached PostgreSQL",
		Value: rep.Storm.BeforeDatabasePct, Unit: "%", Target: "≥ 99.70%", Met: rep.Storm.BeforeDatabasePct >= 99.7}
	before.Profile = "storm"
	gs = append(gs, before,
		ratio("down-dup", "Redis down: duplicates (PostgreSQL receipt)", "(b) pgbench", b, dupDown.Throughput, 0.5),
		ratio("down-unique", "Redis down: unique callbacks", "(a) pgbench", a, uniqDown.Throughput, 0.6),
		ratio("scale-unique", fmt.Sprintf("%s receipts: unique callbacks (Redis down)", count(rep.ScaleReceipts)), "empty table", uniqDown.Throughput, uniqScale.Throughput, 0.9),
		ratio("scale-dup", fmt.Sprintf("%s receipts: duplicates (Redis down)", count(rep.ScaleReceipts)), "empty table", dupDown.Throughput, dupScale.Throughput, 0.9),
		atMost("rss", fmt.Sprintf("peak RSS with %d concurrent connections", rep.ConnectionsForRSS), float64(rep.PeakRSSBytes)/(1<<20), 100, "MiB", ""),
	)
	for _, ds := range rep.Designs {
		g := Goal{ID: "field-" + ds.Name, Figure: fmt.Sprintf("duplicate storm vs %s (its double effects: %d)", ds.Name, ds.DoubleEffects),
			Limit: ds.Name, LimitV: ds.Storm.Throughput, Value: storm.Throughput, Unit: "/s",
			Target: "design slower (ratio > 1) or showing double effects"}
		if ds.Storm.Throughput > 0 {
			g.Ratio = storm.Throughput / ds.Storm.Throughput
		}
		g.Met = g.Ratio > 1 || ds.DoubleEffects > 0
		gs = append(gs, g)
	}
	gs = append(gs, Goal{ID: "callbackd-double-effects", Figure: "callbackd: orders booked twice (whole run)",
		Value: float64(rep.CallbackdDoubleEffects), Unit: "", Target: "0", Met: rep.CallbackdDoubleEffects == 0})
	// The profiles of the goals not met, as `go tool pprof -top` shows them.
	for i := range gs {
		id := gs[i].Profile
		gs[i].Profile = ""
		if gs[i].Met || id == "" {
			continue
		}
		top, err := pprofTop(ctx, r.callbackd, r.profiles[id], r.windows[id])
		if err != nil {
			r.step("warning: %v", err)
			continue
		}
		gs[i].Profile = top
	}
	rep.Goals = gs
}

func count(n int64) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%d million", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%d,000", n/1000)
	default:
		return fmt.Sprint(n)
	}
}
