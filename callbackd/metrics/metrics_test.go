package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestEveryMetricIsExposedFromTheStart(t *testing.T) {
	m := New()
	m.InitChannel("wx", "wechatpay")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: expected 200, got %d", rec.Code)
	}
	body := rec.Body.String()
	for _, name := range []string{CallbacksTotal, DuplicatesStoppedTotal, RedisDegradedTotal, LockContentionTotal,
		ProcessingSeconds + "_bucket", InFlight, AnomaliesTotal, OverloadRejectionsTotal, "go_goroutines", "process_cpu_seconds_total"} {
		if !strings.Contains(body, "\n"+name) {
			t.Errorf("/metrics before any traffic: expected %s, not found", name)
		}
	}
}

func TestInitChannelCreatesABoundedSetOfSeries(t *testing.T) {
	m := New()
	m.InitChannel("wx", "wechatpay")
	one := testutil.CollectAndCount(m.Callbacks) + testutil.CollectAndCount(m.Anomalies) + testutil.CollectAndCount(m.RedisDegraded)
	m.InitChannel("wx", "wechatpay") // idempotent
	m.InitChannel("ali", "alipay")
	two := testutil.CollectAndCount(m.Callbacks) + testutil.CollectAndCount(m.Anomalies) + testutil.CollectAndCount(m.RedisDegraded)
	if two != 2*one {
		t.Fatalf("series for two channels: expected twice those of one (%d), got %d", 2*one, two)
	}
}
