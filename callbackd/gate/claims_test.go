package gate

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

const testTimeout = 50 * time.Millisecond

// newRedis starts a plain Redis for one test and returns a gate client on it plus a direct client
// for inspecting and arranging state.
func newRedis(t *testing.T) (*testenv.RedisGroup, *Claims, *redis.Client) {
	t.Helper()
	g := testenv.StartRedis(t, testenv.RedisOptions{})
	addr := g.Nodes()[0].Addr
	client, err := NewRedisClient(config.Redis{Addr: addr, Timeout: metav1.Duration{Duration: testTimeout}})
	if err != nil {
		t.Fatalf("NewRedisClient: %v", err)
	}
	t.Cleanup(func() { _ = client.Close() })
	direct := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = direct.Close() })
	return g, NewClaims(client, testTimeout), direct
}

func TestClaimOutcomes(t *testing.T) {
	_, claims, direct := newRedis(t)
	ctx := context.Background()
	k := KeyOf("wx|1900000001||ORDER-1|payment|")
	key := RedisKey("wx", k)

	first := claims.Claim(ctx, "wx", k, 10*time.Second)
	if first.Outcome != Claimed || !first.Held() {
		t.Fatalf("first claim of a free key: expected claimed, got %s (err %v)", first.Outcome, first.Err)
	}
	if v := direct.Get(ctx, key).Val(); v == SuccessMark || v == "" {
		t.Fatalf("after a claim: expected a token (never SUCCESS before commit), got %q", v)
	}
	if ttl := direct.PTTL(ctx, key).Val(); ttl <= 0 || ttl > 10*time.Second {
		t.Fatalf("claim TTL: expected within (0, 10s], got %s", ttl)
	}

	second := claims.Claim(ctx, "wx", k, 10*time.Second)
	if second.Outcome != HeldByOther || second.Held() {
		t.Fatalf("second claim while held: expected held_by_other, got %s (err %v)", second.Outcome, second.Err)
	}
	if other := claims.Claim(ctx, "ali", k, 10*time.Second); other.Outcome != Claimed {
		t.Fatalf("same digest on another channel: expected claimed (channels are namespaced), got %s", other.Outcome)
	}

	marked, err := claims.MarkSuccess(ctx, first, 48*time.Hour)
	if err != nil || !marked {
		t.Fatalf("holder marks success: expected marked, got %t (err %v)", marked, err)
	}
	if ttl := direct.PTTL(ctx, key).Val(); ttl < 47*time.Hour || ttl > 48*time.Hour {
		t.Fatalf("success mark TTL: expected about 48h, got %s", ttl)
	}
	third := claims.Claim(ctx, "wx", k, 10*time.Second)
	if third.Outcome != AlreadySucceeded {
		t.Fatalf("claim after the success mark: expected already_succeeded, got %s (err %v)", third.Outcome, third.Err)
	}
	if v := direct.Get(ctx, key).Val(); v != SuccessMark {
		t.Fatalf("a claim must not disturb the mark: expected %q, got %q", SuccessMark, v)
	}
}

func TestReleaseOnlyByTheHolder(t *testing.T) {
	_, claims, direct := newRedis(t)
	ctx := context.Background()
	k := KeyOf("k1")
	key := RedisKey("wx", k)

	mine := claims.Claim(ctx, "wx", k, 10*time.Second)
	if mine.Outcome != Claimed {
		t.Fatalf("expected claimed, got %s", mine.Outcome)
	}
	// The claim expires while we are slow and another request takes the key.
	if err := direct.Set(ctx, key, "token-of-another-request", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	released, err := claims.Release(ctx, mine)
	if err != nil || released {
		t.Fatalf("release of a claim taken over by another request: expected not released, got %t (err %v)", released, err)
	}
	if v := direct.Get(ctx, key).Val(); v != "token-of-another-request" {
		t.Fatalf("the other request's claim: expected untouched, got %q", v)
	}

	// A loser has nothing to release.
	loser := claims.Claim(ctx, "wx", k, 10*time.Second)
	if released, err := claims.Release(ctx, loser); err != nil || released {
		t.Fatalf("release by a loser: expected nothing released, got %t (err %v)", released, err)
	}

	// The holder releases its own claim, and the key is free again.
	k2 := KeyOf("k2")
	own := claims.Claim(ctx, "wx", k2, 10*time.Second)
	if released, err := claims.Release(ctx, own); err != nil || !released {
		t.Fatalf("release by the holder: expected released, got %t (err %v)", released, err)
	}
	if n := direct.Exists(ctx, RedisKey("wx", k2)).Val(); n != 0 {
		t.Fatalf("after release: expected the key gone, got %d", n)
	}
	if again := claims.Claim(ctx, "wx", k2, 10*time.Second); again.Outcome != Claimed {
		t.Fatalf("claim after release: expected claimed, got %s", again.Outcome)
	}
}

func TestMarkSuccessNeverOverwritesAnotherClaim(t *testing.T) {
	_, claims, direct := newRedis(t)
	ctx := context.Background()
	k := KeyOf("k")
	key := RedisKey("wx", k)

	// This request found Redis unavailable at claim time, committed, and now marks: another
	// request meanwhile claimed the key, so its claim stays.
	skipped := Claim{Outcome: Unavailable, redisKey: key}
	other := claims.Claim(ctx, "wx", k, 10*time.Second)
	if other.Outcome != Claimed {
		t.Fatalf("expected claimed, got %s", other.Outcome)
	}
	marked, err := claims.MarkSuccess(ctx, skipped, time.Hour)
	if err != nil || marked {
		t.Fatalf("mark over another request's claim: expected not marked, got %t (err %v)", marked, err)
	}
	if v := direct.Get(ctx, key).Val(); v == SuccessMark {
		t.Fatal("another request's claim was overwritten with SUCCESS")
	}

	// With the key free, the same mark is written.
	if _, err := claims.Release(ctx, other); err != nil {
		t.Fatal(err)
	}
	if marked, err := claims.MarkSuccess(ctx, skipped, time.Hour); err != nil || !marked {
		t.Fatalf("mark of a free key after commit: expected marked, got %t (err %v)", marked, err)
	}
	if v := direct.Get(ctx, key).Val(); v != SuccessMark {
		t.Fatalf("expected %q, got %q", SuccessMark, v)
	}
	if _, err := claims.MarkSuccess(ctx, Claim{}, time.Hour); err == nil {
		t.Fatal("mark of an empty claim: expected an error, got none")
	}
}

func TestScriptsSurviveAFlushedScriptCache(t *testing.T) {
	_, claims, direct := newRedis(t)
	ctx := context.Background()
	k := KeyOf("k")
	c := claims.Claim(ctx, "wx", k, 10*time.Second)
	if _, err := claims.MarkSuccess(ctx, c, time.Hour); err != nil {
		t.Fatal(err)
	}
	// A promoted replica has an empty script cache: EVALSHA fails with NOSCRIPT and the gate
	// must fall back to EVAL.
	if err := direct.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	c2 := claims.Claim(ctx, "wx", KeyOf("k2"), 10*time.Second)
	if released, err := claims.Release(ctx, c2); err != nil || !released {
		t.Fatalf("release after SCRIPT FLUSH: expected released, got %t (err %v)", released, err)
	}
}

func TestUnavailableRedisIsSkippedFast(t *testing.T) {
	t.Run("stopped", func(t *testing.T) {
		g, claims, _ := newRedis(t)
		g.Nodes()[0].Stop(t)
		start := time.Now()
		c := claims.Claim(context.Background(), "wx", KeyOf("k"), 10*time.Second)
		elapsed := time.Since(start)
		if c.Outcome != Unavailable || c.Err == nil {
			t.Fatalf("claim with Redis stopped: expected unavailable with an error, got %s (err %v)", c.Outcome, c.Err)
		}
		if elapsed > time.Second {
			t.Fatalf("claim with Redis stopped: expected a fast failure, took %s", elapsed)
		}
		if c.Held() {
			t.Fatal("an unavailable claim must hold nothing")
		}
		if _, err := claims.MarkSuccess(context.Background(), c, time.Hour); err == nil {
			t.Fatal("mark with Redis stopped: expected an error, got none")
		}
	})
	t.Run("paused", func(t *testing.T) {
		g, claims, _ := newRedis(t)
		// Warm the pool so the claim below hits a live connection to a frozen server.
		if c := claims.Claim(context.Background(), "wx", KeyOf("warm"), time.Second); c.Outcome != Claimed {
			t.Fatalf("warm-up claim: expected claimed, got %s (err %v)", c.Outcome, c.Err)
		}
		node := g.Nodes()[0]
		node.Pause(t)
		defer node.Resume(t)
		start := time.Now()
		c := claims.Claim(context.Background(), "wx", KeyOf("k"), 10*time.Second)
		elapsed := time.Since(start)
		if c.Outcome != Unavailable || !IsTimeout(c.Err) {
			t.Fatalf("claim against a frozen Redis: expected an unavailable timeout, got %s (err %v)", c.Outcome, c.Err)
		}
		// The budget is 50 ms; allow a generous margin for a loaded 2-core machine.
		if elapsed > 500*time.Millisecond {
			t.Fatalf("claim against a frozen Redis: expected to give up within its 50ms budget, took %s", elapsed)
		}
	})
}

func TestIsTimeout(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"deadline", context.DeadlineExceeded, true},
		{"wrapped deadline", errors.Join(errors.New("claim"), context.DeadlineExceeded), true},
		{"net timeout", &net.OpError{Op: "read", Err: timeoutErr{}}, true},
		{"refused", errors.New("dial tcp: connection refused"), false},
		{"readonly", errors.New("READONLY You can't write against a read only replica."), false},
	}
	for _, c := range cases {
		if got := IsTimeout(c.err); got != c.want {
			t.Errorf("%s: expected %t, got %t", c.name, c.want, got)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
