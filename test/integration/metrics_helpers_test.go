package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/internal/promtext"
)

// scrape fetches and parses /metrics of inst; a failed scrape fails the test.
func (s *stack) scrape(t testing.TB, inst *instance) promtext.Families {
	t.Helper()
	ms, err := s.tryScrape(inst)
	if err != nil {
		t.Fatalf("%v", err) // the error names the URL
	}
	return ms
}

// tryScrape fetches and parses /metrics of inst within 5 s, for polls that tolerate a miss.
func (s *stack) tryScrape(inst *instance) (promtext.Families, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return promtext.Scrape(ctx, s.client, inst.base+"/metrics")
}
