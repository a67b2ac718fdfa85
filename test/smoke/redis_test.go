package smoke_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

func TestRedisSentinelReplicatesAndFailsOver(t *testing.T) {
	t.Parallel()
	g := testenv.StartRedis(t, testenv.RedisOptions{Replicas: 1, Sentinels: 3})
	t.Logf("real servers: %s; sentinels %v", g, g.SentinelAddrs())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	master, replica := g.Nodes()[0], g.Nodes()[1]

	if got := g.MasterAddr(); got != master.Addr {
		t.Fatalf("Sentinel's master before failover: expected %s, got %s", master.Addr, got)
	}
	m := redisClient(t, master.Addr)
	if err := m.Set(ctx, "order:T-1", "SUCCESS", 0).Err(); err != nil {
		t.Fatalf("SET on master: %v", err)
	}
	r := redisClient(t, replica.Addr)
	if got := eventually(ctx, t, r, "order:T-1", "SUCCESS"); got != "SUCCESS" {
		t.Fatalf("GET on replica: expected %q, got %q", "SUCCESS", got)
	}

	start := time.Now()
	master.Kill(t) // SIGKILL
	promoted := g.WaitForMaster(t, master.Addr, time.Minute)
	t.Logf("Sentinel promoted %s %s after the master was killed", promoted, time.Since(start).Round(100*time.Millisecond))
	if promoted != replica.Addr {
		t.Fatalf("promoted master: expected the replica %s, got %s", replica.Addr, promoted)
	}
	if got := g.MasterAddr(); got != replica.Addr {
		t.Fatalf("Sentinel's master after failover: expected %s, got %s", replica.Addr, got)
	}

	// A Sentinel-aware client finds the new master and can write to it.
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: g.MasterName, SentinelAddrs: g.SentinelAddrs()})
	t.Cleanup(func() { _ = fc.Close() })
	if err := fc.Set(ctx, "order:T-2", "SUCCESS", 0).Err(); err != nil {
		t.Fatalf("SET through Sentinel after failover: %v", err)
	}
	for key, want := range map[string]string{"order:T-1": "SUCCESS", "order:T-2": "SUCCESS"} {
		if got, err := r.Get(ctx, key).Result(); err != nil || got != want {
			t.Errorf("GET %s on the new master: expected %q, got %q (err %v)", key, want, got, err)
		}
	}
}

func redisClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// eventually polls GET key until it returns want or ctx ends, and returns the last value.
func eventually(ctx context.Context, t *testing.T, c *redis.Client, key, want string) string {
	t.Helper()
	for {
		got, _ := c.Get(ctx, key).Result()
		if got == want {
			return got
		}
		select {
		case <-ctx.Done():
			return got
		case <-time.After(20 * time.Millisecond):
		}
	}
}
