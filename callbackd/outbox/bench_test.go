package outbox_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/outbox"
)

// BenchmarkDeliver measures one dispatcher's throughput, from fan-out to recorded result, for
// events delivered to one loopback endpoint that answers at once (MaxConcurrency 8). It reports
// deliveries per second; each delivery costs a share of a fan-out and of a claim, one signed HTTP
// request and one recording transaction.
func BenchmarkDeliver(b *testing.B) {
	db := newTestDB(b)
	key, _ := newSecret(b)
	s := newSink(b, always(http.StatusNoContent))
	ch := channel("wx", nil, callbackdv1alpha1.DeliveryEndpoint{Name: "crm", URL: s.srv.URL, MaxConcurrency: 8})
	d, err := outbox.NewDispatcher(db.pool(), []config.Channel{ch}, outbox.Options{
		Secrets: outbox.StaticSecrets{"wx": {"crm": key}}, PollInterval: 10 * time.Millisecond,
	})
	if err != nil {
		b.Fatal(err)
	}
	db.seedEvents(b, "wx", b.N)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b.ResetTimer()
	start := time.Now()
	go func() { done <- d.Run(ctx) }()
	waitFor(b, 10*time.Minute, "every delivery delivered", func() bool {
		return db.countDeliveries(b, outbox.StatusDelivered) == b.N
	})
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "deliveries/s")
}
