package gate

import (
	"context"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// BenchmarkWindowContains measures a window lookup with 100k keys held, in parallel.
func BenchmarkWindowContains(b *testing.B) {
	w, err := NewWindow(WindowOptions{MaxEntries: 100_000})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]Key, 100_000)
	for i := range keys {
		keys[i] = KeyOf(strconv.Itoa(i))
		w.Remember(keys[i], time.Hour)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			w.Contains(keys[i%len(keys)])
			i++
		}
	})
}

// BenchmarkClaimAndMark measures the Redis gate of a first delivery against a real local Redis:
// the claim (one SET NX GET round trip) and the SUCCESS mark (one script call).
func BenchmarkClaimAndMark(b *testing.B) {
	g := testenv.StartRedis(b, testenv.RedisOptions{})
	client, err := NewRedisClient(config.Redis{Addr: g.Nodes()[0].Addr, Timeout: metav1.Duration{Duration: time.Second}})
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	claims := NewClaims(client, time.Second)
	ctx := context.Background()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		c := claims.Claim(ctx, "bench", KeyOf(strconv.Itoa(i)), 10*time.Second)
		if c.Outcome != Claimed {
			b.Fatalf("expected claimed, got %s (%v)", c.Outcome, c.Err)
		}
		if _, err := claims.MarkSuccess(ctx, c, time.Hour); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
