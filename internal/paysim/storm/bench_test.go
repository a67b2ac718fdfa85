package storm_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/storm"
)

// BenchmarkNotification measures the simulator's own cost of one delivery attempt per provider
// (RSA-2048 signing dominates WeChat Pay and Alipay), the ceiling of a storm's send rate.
func BenchmarkNotification(b *testing.B) {
	for _, p := range []callbackdv1alpha1.Provider{
		callbackdv1alpha1.ProviderWeChatPay, callbackdv1alpha1.ProviderAlipay,
		callbackdv1alpha1.ProviderStripe, callbackdv1alpha1.ProviderStandardWebhooks,
	} {
		b.Run(string(p), func(b *testing.B) {
			n, err := storm.NewNotifier(keySet(b, p))
			if err != nil {
				b.Fatal(err)
			}
			trade := storm.NewTrades("B", 1, "CNY", paidAt)[0]
			b.ReportAllocs()
			for b.Loop() {
				if _, err := n.Notification(trade); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStormLoopback measures a storm's HTTP path against a target that acknowledges at
// once: the overhead paysim adds to what it measures.
func BenchmarkStormLoopback(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer srv.Close()
	n, err := storm.NewNotifier(keySet(b, callbackdv1alpha1.ProviderStandardWebhooks))
	if err != nil {
		b.Fatal(err)
	}
	sender, err := storm.NewSender(n, srv.URL, storm.NewClient(16, storm.DefaultTimeout))
	if err != nil {
		b.Fatal(err)
	}
	trades := storm.NewTrades("B", b.N, "CNY", paidAt)
	b.ResetTimer()
	sum, err := sender.Storm(context.Background(), storm.Config{Trades: trades, Duplicates: 1, Concurrency: 16})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(sum.Throughput, "req/s")
	b.ReportMetric(sum.Latency.P99, "p99-ms")
}
