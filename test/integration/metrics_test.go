package integration_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-1cff2221/callback-platform/callbackd/gate"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/pipeline"
	"github.com/seed-1cff2221/callback-platform/internal/promtext"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// pipelineMetrics are the metric names the pipeline exports (issue 3), each checked non-zero
// after the storms of TestMetricsAfterStorms.
var pipelineMetrics = []string{
	"callbackd_callbacks_total",
	"callbackd_duplicates_stopped_total",
	"callbackd_redis_degraded_total",
	"callbackd_lock_contention_total",
	"callbackd_processing_seconds",
	"callbackd_inflight",
	"callbackd_anomalies_total",
}

// Acceptance 6 (issue 3): /metrics shows the pipeline's metrics with non-zero values after
// storms that exercise each of them: bursts of simultaneous duplicates (duplicates stopped,
// in-flight), a Redis claim left by a crashed replica (lock contention), a forged request
// (anomalies) and a storm with Redis stopped (Redis degraded). The in-flight gauge is sampled during the storm, since it is back to zero
// once the storm is over.
func TestMetricsAfterStorms(t *testing.T) {
	const orders, burst = 60, 12
	pg := sharedPostgres(t)
	rg := testenv.StartRedis(t, testenv.RedisOptions{Replicas: 1, Sentinels: 3})
	s := newStack(t, pg, "metrics", stackOptions{redis: rg})
	a := s.start(t, "a")
	ps := newPayments(t, "metrics", orders+21)
	s.registerOrders(t, a, ps)

	// Sample the in-flight gauge while the storm runs.
	var maxInflight float64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stopSampling:
				return
			default:
			}
			if m, err := s.tryScrape(a); err == nil {
				maxInflight = max(maxInflight, m.Sum("callbackd_inflight", nil))
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()

	// Bursts: every order's notification sent burst times at the same instant.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := 0; i < orders; i++ {
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for c := 0; c < burst; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				if d := s.deliver(ctx, a, ps[i], fmt.Sprintf("msg_%d_%d", i, c), 100); !d.succeeded {
					t.Errorf("burst delivery of %s: expected success after retries, got none (%d attempts, %d refusals)", ps[i].OrderNo, d.attempts, d.rejects)
				}
			}()
		}
		close(gate)
		wg.Wait()
	}
	close(stopSampling)
	<-sampled

	// A claim left in Redis by a replica that crashed while holding it: the next delivery waits
	// for the holder, finds nothing committed and answers "not yet" (lock contention), and once
	// the claim expires the delivery goes through, exactly once.
	crashed := ps[orders+20]
	rdb := redis.NewClient(&redis.Options{Addr: rg.MasterAddr()})
	defer rdb.Close()
	staleKey := gate.RedisKey(channelName, pipeline.GateKey(notify.Notification{
		Channel: channelName, MerchantID: merchantID, OutTradeNo: crashed.OrderNo,
		Kind: notify.KindPayment, Status: notify.StatusSucceeded, ProviderTxnID: crashed.TxnID,
	}))
	if err := rdb.Set(ctx, staleKey, "token-of-a-crashed-replica", 3*time.Second).Err(); err != nil {
		t.Fatalf("plant a stale claim: %v", err)
	}
	first := s.notify(ctx, a, crashed, "msg_crashed_1")
	if first.verdict != retryable {
		t.Errorf("delivery while a crashed replica's claim is held: expected a retryable answer, got %d %s", first.code, first.verdict)
	}
	if d := s.deliver(ctx, a, crashed, "msg_crashed_2", 200); !d.succeeded {
		t.Errorf("delivery after the stale claim expired: expected success, got none after %d attempts", d.attempts)
	}

	// A forged request: an anomaly.
	forged := newWebhookSigner(t)
	body := ps[0].body()
	if ans := s.notifyRaw(ctx, a, body, forged.headers("msg_forged", time.Now(), body)); ans.verdict != rejected {
		t.Errorf("forged request: expected a refusal, got %d %s", ans.code, ans.verdict)
	}

	// A storm with Redis stopped: the Redis gate degrades, the database gates carry on.
	for _, n := range rg.Nodes() {
		n.Stop(t)
	}
	parallel(20, 10, func(k int) {
		if d := s.deliver(ctx, a, ps[orders+k], "msg_noredis_"+ps[orders+k].OrderNo, 50); !d.succeeded {
			t.Errorf("delivery with Redis stopped: expected success, got none (%d attempts)", d.attempts)
		}
	})

	m := s.scrape(t, a)
	for _, name := range pipelineMetrics {
		value := m.Sum(name, nil)
		if name == "callbackd_inflight" {
			if !m.Has(name) {
				t.Errorf("%s: expected on /metrics, missing", name)
			}
			value = maxInflight
		}
		if value <= 0 {
			t.Errorf("%s: expected a non-zero value after the storms, got %g (exposed: %v)", name, value, m.Has(name))
		}
		t.Logf("%s = %g", name, value)
	}
	t.Logf("callbacks by outcome %s; duplicates stopped by gate %s; Redis degraded by reason %s; anomalies by reason %s",
		promtext.Format(m.ByLabel("callbackd_callbacks_total", "outcome", nil)), promtext.Format(m.ByLabel("callbackd_duplicates_stopped_total", "gate", nil)),
		promtext.Format(m.ByLabel("callbackd_redis_degraded_total", "reason", nil)), promtext.Format(m.ByLabel("callbackd_anomalies_total", "reason", nil)))
	s.expectExactlyOnce(t, orders+21)
}
