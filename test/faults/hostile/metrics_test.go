package hostile

import (
	"context"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/internal/promtext"
)

// scrape fetches and parses callbackd's /metrics; a failed scrape fails the test.
func (e *env) scrape(t testing.TB) promtext.Families {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := promtext.Scrape(ctx, e.client, e.base+"/metrics")
	if err != nil {
		t.Fatalf("%v", err) // the error names the URL and, for a non-200 answer, the status
	}
	return m
}

// anomalies is callbackd_anomalies_total of a channel by reason.
func anomalies(m promtext.Families, channel string) map[string]float64 {
	return m.ByLabel("callbackd_anomalies_total", "reason", map[string]string{"channel": channel})
}
