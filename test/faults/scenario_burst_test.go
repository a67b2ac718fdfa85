package faults

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"runtime/debug"
	"slices"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/callbackd/metrics"
	"github.com/seed-1cff2221/callback-platform/internal/paysim"
)

// TestScenario7Burst64 is scenario 7: 64 byte-identical deliveries of one notification (same
// webhook-id, timestamp and signature) released within one millisecond on two replicas, 32
// each, round after round, with the Redis gate and with the database gates alone.
//
// The release is a barrier on pre-opened connections: each carries the whole request but the
// last byte of its body, so every handler is already waiting inside callbackd; then one loop
// writes the 64 last bytes. The spread (first write to last) is measured per round; rounds that
// took more than a millisecond (a preempted test process) are reported and replaced.
//
// Expected: per order exactly one effect (one receipt, ledger entry, event id); every answer is
// success or the provider's retryable failure (never a refusal, never a dropped connection);
// the checker's invariants hold once the provider retried what was answered retryable.
func TestScenario7Burst64(t *testing.T) {
	for _, tc := range []struct {
		name  string
		redis bool
	}{
		{name: "redis-and-database-gates", redis: true},
		{name: "database-gates-only", redis: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := NewEnv(t, EnvOptions{Postgres: SharedPostgres(t), Redis: tc.redis})
			a := e.StartCallbackd("a", CallbackdOptions{})
			b := e.StartCallbackd("b", CallbackdOptions{})
			targets := []*Callbackd{a, b}

			const (
				rounds = 8
				copies = 64
			)
			// Spares replace rounds slower than 1 ms (a test process preempted during the
			// release loop on a busy machine).
			ns := e.NewPayments("s7", 6*rounds)
			e.RegisterOrders(a, ns)
			ctx, cancel := context.WithTimeout(t.Context(), 100*time.Second)
			defer cancel()

			var used []Notification
			var spreads []time.Duration
			within, realtime := 0, 0
			for _, n := range ns {
				if within == rounds {
					break
				}
				br, err := e.burst(ctx, n, targets, copies)
				if err != nil {
					t.Fatalf("burst of %s: %v", n.OrderNo, err)
				}
				used = append(used, n)
				spreads = append(spreads, br.spread)
				if br.spread <= time.Millisecond {
					within++
				}
				if br.realtime {
					realtime++
				}
				tally := Tally(br.ops)
				perTarget := map[string]int{}
				for _, op := range br.ops {
					perTarget[op.Instance]++
				}
				t.Logf("scenario 7 (%s): %s: %d identical requests (a=%d b=%d) released within %s (real-time release thread: %v): %s",
					tc.name, n.OrderNo, len(br.ops), perTarget["a"], perTarget["b"], br.spread, br.realtime, TallyString(tally))
				if tally[Rejected] > 0 || tally[Transport] > 0 {
					t.Errorf("%s: expected only success or retryable answers, got %s", n.OrderNo, TallyString(tally))
				}
				if tally[Success]+tally[Retryable] != copies {
					t.Errorf("%s: expected %d answers, got %s", n.OrderNo, copies, TallyString(tally))
				}
			}
			slices.Sort(spreads)
			burstOps := e.History.Ops()
			res := e.ProviderRetries(ctx, used, targets, 20)
			t.Logf("scenario 7 (%s): %d rounds, %d within 1 ms; release spread min %s, median %s, max %s; answers %s; provider retries: %d resent, %d unfinished",
				tc.name, len(used), within, spreads[0], spreads[len(spreads)/2], spreads[len(spreads)-1],
				TallyString(Tally(burstOps)), res.Resent, res.Unfinished)
			t.Logf("scenario 7 (%s): duplicates stopped by gate: %s; lock contention: %.0f; callbacks by outcome: %s",
				tc.name, FormatCounts(e.MetricsByLabel(metrics.DuplicatesStoppedTotal, "gate")),
				e.MetricsTotal(metrics.LockContentionTotal, nil), FormatCounts(e.MetricsByLabel(metrics.CallbacksTotal, "outcome")))

			faults := []Fault{{
				Name: fmt.Sprintf("%d identical callbacks within 1 ms on two replicas", copies),
				Evidence: fmt.Sprintf("%d of %d rounds released within 1 ms (median spread %s; %d released from a real-time thread, which needs CAP_SYS_NICE); %d requests answered",
					within, len(used), spreads[len(spreads)/2], realtime, len(burstOps)),
				Happened: within == rounds && len(burstOps) == copies*len(used),
			}}
			r := e.Check("scenario 7 ("+tc.name+")", used, CheckOptions{Faults: faults})
			RequireOK(t, r)
		})
	}
}

// burstResult is one round of identical requests.
type burstResult struct {
	// spread is the time from the first to the last release write.
	spread time.Duration
	// realtime: the release loop ran at real-time priority.
	realtime bool
	ops      []Op
}

// burst delivers copies identical signed requests of n, spread over targets in turn, released
// together: every connection is opened and given the request minus its last byte first, then
// one loop writes the last bytes. Each answer is recorded in the history (phase "burst").
func (e *Env) burst(ctx context.Context, n Notification, targets []*Callbackd, copies int) (burstResult, error) {
	signer := paysim.StandardWebhooks{Secrets: []string{e.secret}}
	note, err := signer.Event("msg_"+n.OrderNo+"_burst", n.Body())
	if err != nil {
		return burstResult{}, fmt.Errorf("sign: %w", err)
	}
	conns := make([]net.Conn, copies)
	raws := make([][]byte, copies)
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	for i := range copies {
		tgt := targets[i%len(targets)]
		u, err := url.Parse(tgt.Base)
		if err != nil {
			return burstResult{}, fmt.Errorf("target %s: %w", tgt.Name, err)
		}
		req, err := note.Request(ctx, tgt.Base+"/notify/"+n.Channel)
		if err != nil {
			return burstResult{}, err
		}
		var buf bytes.Buffer
		if err := req.Write(&buf); err != nil {
			return burstResult{}, fmt.Errorf("serialize request: %w", err)
		}
		raws[i] = buf.Bytes()
		d := net.Dialer{Timeout: 5 * time.Second}
		c, err := d.DialContext(ctx, "tcp", u.Host)
		if err != nil {
			return burstResult{}, fmt.Errorf("connect to %s: %w", tgt.Name, err)
		}
		conns[i] = c
		if _, err := c.Write(raws[i][:len(raws[i])-1]); err != nil {
			return burstResult{}, fmt.Errorf("write to %s: %w", tgt.Name, err)
		}
	}
	// Let every server goroutine parse its headers and block on the body's last byte.
	time.Sleep(150 * time.Millisecond)

	sent := make([]time.Time, copies)
	last := make([][]byte, copies)
	for i := range raws {
		last[i] = raws[i][len(raws[i])-1:]
	}
	// The release loop runs locked to its thread at real-time priority when allowed (the woken
	// callbackd threads would otherwise preempt it on a busy machine), out of the collector's
	// way; the thread gets its normal priority back before it is unlocked.
	var (
		start      time.Time
		rt         bool
		writeErr   error
		restoreErr error
	)
	gc := debug.SetGCPercent(-1)
	released := make(chan struct{})
	go func() {
		defer close(released)
		runtime.LockOSThread()
		var restore func() error
		rt, restore = realtimeThread()
		start = time.Now()
		for i, c := range conns {
			if _, err := c.Write(last[i]); err != nil {
				writeErr = fmt.Errorf("release write: %w", err)
				break
			}
			sent[i] = time.Now()
		}
		if restoreErr = restore(); restoreErr != nil {
			// Never hand a real-time thread back to the scheduler, and never let it exit (its
			// exit would SIGKILL the children it forked): park this goroutine on it for good.
			close(released)
			select {}
		}
		runtime.UnlockOSThread()
	}()
	<-released
	debug.SetGCPercent(gc)
	if restoreErr != nil {
		return burstResult{}, fmt.Errorf("restore the release thread's priority: %w", restoreErr)
	}
	if writeErr != nil {
		return burstResult{}, writeErr
	}
	res := burstResult{spread: sent[copies-1].Sub(start), realtime: rt}

	ops := make([]Op, copies)
	Parallel(copies, copies, func(i int) {
		tgt := targets[i%len(targets)]
		op := Op{Key: n.Key(), Channel: n.Channel, OrderNo: n.OrderNo, Kind: n.Kind, MsgID: "msg_" + n.OrderNo + "_burst",
			Instance: tgt.Name, Phase: "burst", Sent: sent[i]}
		_ = conns[i].SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conns[i]), nil)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			op.Status, op.Class, op.Body = resp.StatusCode, ClassOf(resp.StatusCode), string(body)
		} else {
			op.Class, op.Err = Transport, e.Redact(err.Error())
		}
		op.Answered = time.Now()
		ops[i] = e.History.Record(op)
	})
	res.ops = ops
	return res, nil
}
