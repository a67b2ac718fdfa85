package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/internal/promtext"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// Acceptance 1 (issue 3), the replay test from the field: one valid notification sent 100 times at
// concurrency 20 → every answer is success, and the database holds exactly one PAID order, one
// receipt, one ledger entry and one outbox event; with Redis, with Redis stopped, and with two
// instances sharing PostgreSQL and Redis. Every send is a single attempt: a copy that arrives
// while the first request still holds the key must wait for its outcome, not bounce the provider.
func TestReplayOfOneNotification(t *testing.T) {
	pg := sharedPostgres(t)
	rg := testenv.StartRedis(t, testenv.RedisOptions{Replicas: 1, Sentinels: 3})

	t.Run("one instance with Redis Sentinel", func(t *testing.T) {
		s := newStack(t, pg, "replay_redis", stackOptions{redis: rg})
		a := s.start(t, "a")
		replay(t, s, []*instance{a})
	})

	t.Run("two instances sharing PostgreSQL and Redis", func(t *testing.T) {
		s := newStack(t, pg, "replay_two", stackOptions{redis: rg})
		a, b := s.start(t, "a"), s.start(t, "b")
		replay(t, s, []*instance{a, b})
	})

	t.Run("Redis stopped", func(t *testing.T) {
		s := newStack(t, pg, "replay_noredis", stackOptions{redis: rg})
		a := s.start(t, "a")
		for _, n := range rg.Nodes() {
			n.Stop(t)
		}
		t.Logf("stopped every Redis node (%d) after callbackd became ready", len(rg.Nodes()))
		replay(t, s, []*instance{a})
		m := s.scrape(t, a)
		if got := m.Sum("callbackd_redis_degraded_total", nil); got == 0 {
			t.Errorf("callbackd_redis_degraded_total with Redis stopped: expected > 0, got 0")
		}
	})
}

// replay registers one order, sends its payment notification 100 times at concurrency 20 split
// round-robin over insts, and checks that every answer is success and the exactly-once counts.
func replay(t *testing.T, s *stack, insts []*instance) {
	const sends, concurrency = 100, 20
	p := newPayments(t, "replay", 1)[0]
	s.registerOrder(t, insts[0], p, merchantID)
	msgID := "msg_" + randomHex(t, 12)

	before := gateCounts(s, t, insts)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	answers := make([]answer, sends)
	start := time.Now()
	parallel(sends, concurrency, func(i int) {
		answers[i] = s.notify(ctx, insts[i%len(insts)], p, msgID)
	})
	elapsed := time.Since(start)

	var tally [4]int
	for i, a := range answers {
		tally[a.verdict]++
		if a.verdict != success {
			t.Errorf("send %d: expected success, got %d %s %s%v", i, a.code, a.verdict, a.body, a.err)
		}
	}
	dups := promtext.Delta(before, gateCounts(s, t, insts))
	t.Logf("sent=%d at concurrency %d over %d instance(s) in %v: success=%d retryable=%d refused=%d transport errors=%d; duplicates stopped per gate %s",
		sends, concurrency, len(insts), elapsed.Round(time.Millisecond), tally[success], tally[retryable], tally[rejected], tally[transportError], promtext.Format(dups))
	s.expectExactlyOnce(t, 1)
	t.Logf("database: %s", s.counts(t))

	// The merchant sees the payment through the orders API of any instance.
	got := s.getOrder(t, insts[len(insts)-1], p.OrderNo)
	if got.Status != "PAID" || got.ProviderTxnID != p.TxnID || got.PaidAt == nil || len(got.LedgerEntries) != 1 || got.LedgerEntries[0].Amount != p.Amount {
		t.Errorf("GET /v1/orders/%s: expected PAID by %s with one ledger entry of %d, got %+v", p.OrderNo, p.TxnID, p.Amount, got)
	}
}

// gateCounts sums callbackd_duplicates_stopped_total per gate over the instances.
func gateCounts(s *stack, t testing.TB, insts []*instance) map[string]float64 {
	out := map[string]float64{}
	for _, inst := range insts {
		for gate, v := range s.scrape(t, inst).ByLabel("callbackd_duplicates_stopped_total", "gate", nil) {
			out[gate] += v
		}
	}
	return out
}
