package testenv_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

func redisClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestPlainRedisHasNoPersistence(t *testing.T) {
	t.Parallel()
	g := testenv.StartRedis(t, testenv.RedisOptions{})
	t.Logf("using %s", g)
	if n := len(g.Nodes()); n != 1 {
		t.Fatalf("nodes: expected 1, got %d", n)
	}
	if got := g.MasterAddr(); got != g.Nodes()[0].Addr {
		t.Errorf("MasterAddr without Sentinels: expected %s, got %s", g.Nodes()[0].Addr, got)
	}
	c := redisClient(t, g.Nodes()[0].Addr)
	ctx := context.Background()
	cfg, err := c.ConfigGet(ctx, "*").Result()
	if err != nil {
		t.Fatalf("CONFIG GET: %v", err)
	}
	for name, want := range map[string]string{"save": "", "appendonly": "no", "bind": "127.0.0.1"} {
		if got := cfg[name]; got != want {
			t.Errorf("config %s: expected %q, got %q", name, want, got)
		}
	}
}

func TestSentinelPromotesReplicaWhenMasterIsKilled(t *testing.T) {
	t.Parallel()
	g := testenv.StartRedis(t, testenv.RedisOptions{Replicas: 1, Sentinels: 3})
	t.Logf("using %s", g)
	master, replica := g.Nodes()[0], g.Nodes()[1]
	if got := g.MasterAddr(); got != master.Addr {
		t.Fatalf("MasterAddr before failover: expected %s, got %s", master.Addr, got)
	}
	if n := len(g.SentinelAddrs()); n != 3 {
		t.Fatalf("SentinelAddrs: expected 3, got %d", n)
	}
	start := time.Now()
	master.Kill(t)
	got := g.WaitForMaster(t, master.Addr, 30*time.Second)
	t.Logf("failover took %s", time.Since(start).Round(time.Millisecond))
	if got != replica.Addr {
		t.Fatalf("new master: expected the replica %s, got %s", replica.Addr, got)
	}
	if got := g.MasterAddr(); got != replica.Addr {
		t.Errorf("MasterAddr after failover: expected %s, got %s", replica.Addr, got)
	}

	// The old master comes back as a replica of the new one.
	master.Restart(t)
	c := redisClient(t, master.Addr)
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := c.Info(context.Background(), "replication").Result()
		if err == nil && containsLine(info, "role:slave") && containsLine(info, "master_port:"+portOf(replica.Addr)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restarted old master: expected role:slave of %s, got INFO %q (err %v)", replica.Addr, info, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestRedisPauseFreezesAndResumeThaws(t *testing.T) {
	t.Parallel()
	g := testenv.StartRedis(t, testenv.RedisOptions{})
	node := g.Nodes()[0]
	c := redisClient(t, node.Addr)
	ctx := context.Background()

	node.Pause(t)
	if !node.Running() {
		t.Errorf("Running while paused: expected true, got false")
	}
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err := c.Ping(short).Err()
	cancel()
	if err == nil {
		t.Fatalf("PING to a paused node: expected a timeout, got an answer")
	}

	node.Resume(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Resume: expected PONG, got %v", err)
	}
}

func TestRedisStopKillRestartKeepTheAddress(t *testing.T) {
	t.Parallel()
	g := testenv.StartRedis(t, testenv.RedisOptions{Persistence: true})
	node := g.Nodes()[0]
	addr := node.Addr
	c := redisClient(t, addr)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}

	node.Stop(t) // SIGTERM: with persistence on, the data is written before exit
	if node.Running() {
		t.Fatalf("Running after Stop: expected false, got true")
	}
	node.Restart(t)
	if node.Addr != addr {
		t.Errorf("address after Restart: expected %s, got %s", addr, node.Addr)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Errorf("GET k after Stop and Restart with persistence: expected %q, got %q (err %v)", "v", got, err)
	}

	node.Kill(t)
	if err := c.Ping(ctx).Err(); err == nil {
		t.Errorf("PING after Kill: expected an error, got PONG")
	}
	node.Restart(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Errorf("PING after Kill and Restart: expected PONG, got %v", err)
	}
}
