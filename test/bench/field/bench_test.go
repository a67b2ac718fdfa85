package field_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/seed-1cff2221/callback-platform/internal/paysim"
	"github.com/seed-1cff2221/callback-platform/test/bench/field"
)

// BenchmarkDesigns compares the designs from the field on one machine, over loopback HTTP with 64
// concurrent senders and signed WeChat Pay notifications (signing is outside the timer):
//
//	unique      every request pays a new order
//	storm-1to9  every notification is delivered 10 times (1 unique : 9 duplicates), the copies
//	            in flight together, as in a retry storm
//
// Reported per sub-benchmark: double-effects (orders booked more than once at the end) and
// retry-answers/op (share of 5xx answers: the provider would resend them). make bench is the real
// measurement; this is for quick local comparisons:
//
//	go test ./test/bench/field -run '^$' -bench Designs -benchtime 2000x
func BenchmarkDesigns(b *testing.B) {
	e := newEnv(b)
	for _, name := range []string{field.NameCheckThenAct, field.NameUniqueIndexOnly, field.NameRedisLockOnly} {
		for _, sc := range []struct {
			name   string
			copies int
		}{{"unique", 1}, {"storm-1to9", 10}} {
			b.Run(name+"/"+sc.name, func(b *testing.B) {
				benchDesign(b, e, e.designs[name], e.urls[name], sc.copies)
			})
		}
	}
}

func benchDesign(b *testing.B, e *env, d field.Design, url string, copies int) {
	ctx := context.Background()
	if err := d.Reset(ctx); err != nil {
		b.Fatal(err)
	}
	uniques := (b.N + copies - 1) / copies
	orders := make([]string, uniques)
	notes := make([]paysim.Notification, uniques)
	for i := range orders {
		orders[i] = fmt.Sprintf("%s-bench-%07d", e.prefix, i)
		notes[i] = payment(b, orders[i], "4200"+orders[i], 100)
	}
	if err := d.Preload(ctx, orders, 100); err != nil {
		b.Fatal(err)
	}
	var next, retries, failures atomic.Int64
	b.SetParallelism(32) // 64 senders on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1) - 1
			code, err := e.post(ctx, url, notes[int(i)/copies])
			switch {
			case err != nil || (code != http.StatusNoContent && code < 500):
				failures.Add(1)
			case code >= 500:
				retries.Add(1)
			}
		}
	})
	b.StopTimer()
	if n := failures.Load(); n > 0 {
		b.Fatalf("expected every answer 204 or 5xx, got %d other answers or transport errors", n)
	}
	double, err := d.DoubleEffects(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(double), "double-effects")
	b.ReportMetric(float64(retries.Load())/float64(b.N), "retry-answers/op")
}
