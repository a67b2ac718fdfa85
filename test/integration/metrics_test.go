package integration_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

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
// lock contention, in-flight), a forged request (anomalies) and a storm with Redis stopped
// (Redis degraded). The in-flight gauge is sampled during the storm, since it is back to zero
// once the storm is over.
func TestMetricsAfterStorms(t *testing.T) {
	const orders, burst = 60, 12
	pg := sharedPostgres(t)
	rg := testenv.StartRedis(t, testenv.RedisOptions{Replicas: 1, Sentinels: 3})
	s := newStack(t, pg, "metrics", stackOptions{redis: rg})
	a := s.start(t, "a")
	ps := newPayments(t, "metrics", orders+20)
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
				maxInflight = max(maxInflight, m.total("callbackd_inflight", nil))
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
		value := m.total(name, nil)
		if name == "callbackd_inflight" {
			if !m.has(name) {
				t.Errorf("%s: expected on /metrics, missing", name)
			}
			value = maxInflight
		}
		if value <= 0 {
			t.Errorf("%s: expected a non-zero value after the storms, got %g (exposed: %v)", name, value, m.has(name))
		}
		t.Logf("%s = %g", name, value)
	}
	t.Logf("callbacks by outcome %s; duplicates stopped by gate %s; Redis degraded by reason %s; anomalies by reason %s",
		format(m.byLabel("callbackd_callbacks_total", "outcome")), format(m.byLabel("callbackd_duplicates_stopped_total", "gate")),
		format(m.byLabel("callbackd_redis_degraded_total", "reason")), format(m.byLabel("callbackd_anomalies_total", "reason")))
	s.expectExactlyOnce(t, orders+20)
}
