package integration_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-1cff2221/callback-platform/internal/promtext"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// Acceptance 3 (issue 3): the Redis master is killed (SIGKILL) during a storm and Sentinel
// promotes the replica; every order still takes effect exactly once, every delivery ends in
// success, and the Redis gate works again on the new master afterwards.
func TestRedisMasterKilledDuringStorm(t *testing.T) {
	const orders, copies, concurrency = 300, 4, 16
	pg := sharedPostgres(t)
	rg := testenv.StartRedis(t, testenv.RedisOptions{Replicas: 1, Sentinels: 3})
	s := newStack(t, pg, "failover", stackOptions{redis: rg})
	a := s.start(t, "a")

	ps := newPayments(t, "failover", orders)
	s.registerOrders(t, a, ps)
	oldMaster := rg.MasterAddr()
	var master *testenv.RedisNode
	for _, n := range rg.Nodes() {
		if n.Addr == oldMaster {
			master = n
		}
	}
	if master == nil {
		t.Fatalf("no Redis node has the master address %s reported by Sentinel", oldMaster)
	}

	// Deliveries in random order, so that first notifications of new orders keep arriving while
	// the server is down, not only duplicates the in-process window answers.
	jobs := shuffledJobs(orders, copies)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var started, retries, refused, unfinished atomic.Int64
	results := make(chan struct{})
	// Pace the storm (one delivery started every 5 ms, about 6 s in all) so that it spans the
	// kill, the promotion and the time after it instead of finishing inside the outage.
	pace := time.NewTicker(5 * time.Millisecond)
	defer pace.Stop()
	go func() {
		defer close(results)
		parallel(orders*copies, concurrency, func(k int) {
			<-pace.C
			started.Add(1)
			p := ps[jobs[k].order]
			d := s.deliver(ctx, a, p, fmt.Sprintf("msg_%s_%d", p.OrderNo, jobs[k].copy), 400)
			retries.Add(int64(d.retries))
			if d.rejects > 0 {
				refused.Add(1)
			} else if !d.succeeded {
				unfinished.Add(1)
			}
		})
	}()

	// Kill the master a quarter of the way into the storm, then wait for Sentinel's promotion.
	for started.Load() < orders*copies/4 {
		time.Sleep(5 * time.Millisecond)
	}
	killedAt := time.Now()
	master.Kill(t)
	newMaster := rg.WaitForMaster(t, oldMaster, 60*time.Second)
	promoted := time.Since(killedAt)
	sentBeforePromotion := started.Load()
	<-results
	stormDone := time.Since(killedAt)
	if sentBeforePromotion >= orders*copies {
		// A slow promotion on a loaded machine: the fresh notifications below still exercise the
		// new master; say so, since the storm itself did not span the promotion.
		t.Logf("note: all %d storm deliveries started before the promotion", orders*copies)
	}

	if n := refused.Load(); n > 0 {
		t.Errorf("deliveries refused: expected 0, got %d", n)
	}
	if n := unfinished.Load(); n > 0 {
		t.Errorf("deliveries without a success answer: expected 0, got %d", n)
	}

	// The Redis gate must come back on the new master: a fresh notification leaves its key there.
	rdb := redis.NewClient(&redis.Options{Addr: newMaster})
	defer rdb.Close()
	baseline, err := rdb.DBSize(ctx).Result()
	if err != nil {
		t.Fatalf("DBSIZE on the new master %s: %v", newMaster, err)
	}
	fresh := 0
	var gateBack time.Duration
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		p := newPayments(t, "failover-after", 1)[0]
		s.registerOrder(t, a, p, merchantID)
		fresh++
		if d := s.deliver(ctx, a, p, "msg_after_"+p.OrderNo, 100); !d.succeeded {
			t.Fatalf("notification after the failover: expected success, got none after %d attempts", d.attempts)
		}
		size, err := rdb.DBSize(ctx).Result()
		if err == nil && size > baseline {
			gateBack = time.Since(killedAt)
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if gateBack == 0 {
		t.Errorf("Redis gate on the new master %s: expected a key for a fresh notification within 30s, DBSIZE stayed %d", newMaster, baseline)
	}

	m := s.scrape(t, a)
	t.Logf("sent=%d deliveries (%d orders x %d) at concurrency %d; master %s killed after %d had started; %s promoted after %v with %d deliveries started; storm finished %v after the kill; interim retryable answers=%d; refused=%d; unfinished=%d; Redis gate back on the new master %v after the kill (%d fresh notifications); redis degraded %s; duplicates stopped per gate %s",
		orders*copies, orders, copies, concurrency, oldMaster, orders*copies/4, newMaster, promoted.Round(time.Millisecond), sentBeforePromotion,
		stormDone.Round(time.Millisecond), retries.Load(), refused.Load(), unfinished.Load(), gateBack.Round(time.Millisecond), fresh,
		promtext.Format(m.ByLabel("callbackd_redis_degraded_total", "reason", nil)), promtext.Format(m.ByLabel("callbackd_duplicates_stopped_total", "gate", nil)))
	s.expectExactlyOnce(t, int64(orders+fresh))
	t.Logf("database: %s", s.counts(t))
}
