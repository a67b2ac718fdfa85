package store

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// seedOrders registers n pending orders named prefix-1 … prefix-n in one statement.
func seedOrders(b testing.TB, s *Store, prefix string, n int) {
	b.Helper()
	_, err := s.Pool().Exec(context.Background(), `
INSERT INTO payment_orders (order_no, channel, merchant_id, amount, currency, request_digest)
SELECT $1 || '-' || g, 'wx', 'mch-1', 100, 'CNY', 'bench' FROM generate_series(1, $2::int) g`, prefix, n)
	if err != nil {
		b.Fatalf("seed orders: %v", err)
	}
}

func benchPayment(prefix string, i int64) notify.Notification {
	o := testOrder(fmt.Sprintf("%s-%d", prefix, i))
	return paymentOf(o, fmt.Sprintf("txn-%s-%d", prefix, i))
}

// benchmarkApply measures the exactly-once transaction: first deliveries (the full write path,
// one commit each), then duplicates (receipt conflict, rollback), sequential and in parallel.
func benchmarkApply(b *testing.B, s *Store) {
	ctx := context.Background()
	var run atomic.Int64
	b.Run("applied", func(b *testing.B) {
		prefix := fmt.Sprintf("seq%d", run.Add(1))
		seedOrders(b, s, prefix, b.N)
		b.ResetTimer()
		for i := range b.N {
			if res, err := s.Apply(ctx, benchPayment(prefix, int64(i+1))); err != nil || res.Outcome != Applied {
				b.Fatalf("Apply = %q, %v", res.Outcome, err)
			}
		}
	})
	b.Run("applied-parallel", func(b *testing.B) {
		prefix := fmt.Sprintf("par%d", run.Add(1))
		seedOrders(b, s, prefix, b.N)
		var next atomic.Int64
		b.SetParallelism(4)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if res, err := s.Apply(ctx, benchPayment(prefix, next.Add(1))); err != nil || res.Outcome != Applied {
					b.Errorf("Apply = %q, %v", res.Outcome, err)
					return
				}
			}
		})
	})
	b.Run("duplicate", func(b *testing.B) {
		prefix := fmt.Sprintf("dup%d", run.Add(1))
		seedOrders(b, s, prefix, 1)
		n := benchPayment(prefix, 1)
		if _, err := s.Apply(ctx, n); err != nil {
			b.Fatalf("first Apply: %v", err)
		}
		b.ResetTimer()
		for range b.N {
			if res, err := s.Apply(ctx, n); err != nil || res.Outcome != Duplicate {
				b.Fatalf("Apply = %q, %v", res.Outcome, err)
			}
		}
	})
}

// BenchmarkApply runs on the package's fsync-off server: the cost of the SQL itself.
func BenchmarkApply(b *testing.B) {
	benchmarkApply(b, newStore(b))
}

// BenchmarkApplyDurable runs on a server of its own with fsync on, the production setting: each
// applied notification waits for its WAL flush.
func BenchmarkApplyDurable(b *testing.B) {
	server := testenv.StartPostgres(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := Migrate(ctx, server.DSN(), nil); err != nil {
		b.Fatalf("Migrate: %v", err)
	}
	s, err := Open(ctx, server.DSN(), Options{MaxConns: 16})
	if err != nil {
		b.Fatalf("Open: %v", err)
	}
	defer s.Close()
	benchmarkApply(b, s)
}
