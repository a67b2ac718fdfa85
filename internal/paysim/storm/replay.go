package storm

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// ReplayConfig shapes the replay of a provider's retry schedule.
type ReplayConfig struct {
	// Trades are the paid orders whose notifications are delivered.
	Trades []Trade
	// Schedule is the wait before each resend, after an unacknowledged attempt (WeChat Pay:
	// 15s, 15s, 30s, 3m, …). A trade gets at most len(Schedule)+1 attempts.
	Schedule []time.Duration
	// Compress divides every wait (1000: WeChat Pay's 24 h 4 min pass in 87 s). At least 1.
	Compress float64
	// Concurrency is the number of trades replayed at once (at least 1).
	Concurrency int
}

// ReplayResult is the outcome of a replay.
type ReplayResult struct {
	// Summary counts every attempt of every trade.
	Summary Summary `json:"summary"`
	// Acknowledged is the number of trades the target acknowledged; GaveUp the number still
	// unacknowledged after the last attempt of the schedule.
	Acknowledged int `json:"acknowledged"`
	GaveUp       int `json:"gave_up"`
	// AttemptsToAcknowledge counts acknowledged trades by the attempt that was acknowledged
	// (1 = the first delivery).
	AttemptsToAcknowledge map[int]int `json:"attempts_to_acknowledge"`
	// Trades holds each trade's attempts, in the order of Config.Trades.
	Trades []TradeReplay `json:"trades"`
}

// TradeReplay is one trade's delivery history.
type TradeReplay struct {
	OrderNo      string    `json:"order_no"`
	Outcomes     []Outcome `json:"outcomes"`
	Acknowledged bool      `json:"acknowledged"`
	// Waits are the compressed waits actually slept before each resend.
	Waits []time.Duration `json:"waits_ns"`
}

// String renders the result for people.
func (r ReplayResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n  trades: acknowledged=%d gave_up=%d", r.Summary, r.Acknowledged, r.GaveUp)
	for _, attempt := range slices.Sorted(maps.Keys(r.AttemptsToAcknowledge)) {
		fmt.Fprintf(&b, "\n  acknowledged at attempt %d: %d", attempt, r.AttemptsToAcknowledge[attempt])
	}
	return b.String()
}

// Replay delivers each trade's notification and, while the answer is not the provider's
// success form, resends it after the next wait of the schedule divided by Compress, until it
// is acknowledged or the schedule is exhausted. Rejections are resent too: a provider knows no
// "permanent failure" answer. Every resend is signed afresh with the same notification id.
func (s *Sender) Replay(ctx context.Context, cfg ReplayConfig) (ReplayResult, error) {
	if len(cfg.Schedule) == 0 {
		return ReplayResult{}, errNoSchedule
	}
	if cfg.Compress < 1 || cfg.Concurrency < 1 {
		return ReplayResult{}, fmt.Errorf("storm: replay: compress and concurrency must be at least 1, got %g and %d", cfg.Compress, cfg.Concurrency)
	}
	res := ReplayResult{
		Summary:               Summary{Provider: s.notifier.Provider(), Target: s.targetNames(), Orders: len(cfg.Trades)},
		AttemptsToAcknowledge: map[int]int{},
		Trades:                make([]TradeReplay, len(cfg.Trades)),
	}
	var rec recorder
	var mu sync.Mutex
	var firstErr error
	start := time.Now()
	forEach(ctx, len(cfg.Trades), cfg.Concurrency, func(i int) {
		tr, err := s.replayOne(ctx, cfg, cfg.Trades[i], &rec)
		mu.Lock()
		defer mu.Unlock()
		if err != nil && firstErr == nil {
			firstErr = err
		}
		res.Trades[i] = tr
	})
	res.Summary = rec.summary(res.Summary, time.Since(start))
	for _, tr := range res.Trades {
		if tr.Acknowledged {
			res.Acknowledged++
			res.Summary.OrdersAcknowledged++
			res.AttemptsToAcknowledge[len(tr.Outcomes)]++
		} else {
			res.GaveUp++
		}
	}
	if firstErr != nil {
		return res, firstErr
	}
	return res, ctx.Err()
}

func (s *Sender) replayOne(ctx context.Context, cfg ReplayConfig, t Trade, rec *recorder) (TradeReplay, error) {
	tr := TradeReplay{OrderNo: t.OrderNo}
	for attempt := 0; ; attempt++ {
		a, err := s.Send(ctx, t)
		if err != nil {
			return tr, err
		}
		if ctx.Err() != nil {
			return tr, ctx.Err()
		}
		rec.record(a.Outcome, a.Latency)
		tr.Outcomes = append(tr.Outcomes, a.Outcome)
		if a.Outcome == OutcomeSuccess {
			tr.Acknowledged = true
			return tr, nil
		}
		if attempt == len(cfg.Schedule) {
			return tr, nil
		}
		wait := time.Duration(float64(cfg.Schedule[attempt]) / cfg.Compress)
		tr.Waits = append(tr.Waits, wait)
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return tr, ctx.Err()
		}
	}
}

// ParseSchedule parses a comma-separated list of Go durations ("15s,15s,30s,3m").
func ParseSchedule(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		d, err := time.ParseDuration(part)
		if err != nil {
			return nil, fmt.Errorf("storm: retry schedule: %w", err)
		}
		if d <= 0 {
			return nil, fmt.Errorf("storm: retry schedule: wait %q must be positive", part)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, errNoSchedule
	}
	return out, nil
}
