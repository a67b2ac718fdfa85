package gate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-1cff2221/callback-platform/callbackd/config"
)

// SuccessMark is the value a key holds in Redis once its effect is committed in PostgreSQL.
const SuccessMark = "SUCCESS"

// keyPrefix namespaces callbackd's keys in a Redis that may be shared.
const keyPrefix = "cb:"

// Outcome is what a claim attempt found.
type Outcome int

// The claim outcomes.
const (
	// Claimed: the key was free and this request now holds it (until Release, MarkSuccess or
	// the lock TTL).
	Claimed Outcome = iota + 1
	// HeldByOther: another request (here or on another replica) is processing the key, or
	// crashed while holding it. Only the database can say whether its effect is committed.
	HeldByOther
	// AlreadySucceeded: the key carries the SUCCESS mark, written after a commit.
	AlreadySucceeded
	// Unavailable: Redis failed or timed out. The gate is skipped; the database decides.
	Unavailable
)

// String names the outcome for logs.
func (o Outcome) String() string {
	switch o {
	case Claimed:
		return "claimed"
	case HeldByOther:
		return "held_by_other"
	case AlreadySucceeded:
		return "already_succeeded"
	case Unavailable:
		return "unavailable"
	default:
		return fmt.Sprintf("outcome(%d)", int(o))
	}
}

// Claim is the result of one claim attempt. Its zero value holds nothing.
type Claim struct {
	// Outcome is what the attempt found.
	Outcome Outcome
	// Err is the Redis error behind Unavailable.
	Err error

	redisKey string
	token    string // set only when Outcome == Claimed
}

// Held reports whether this request holds the key.
func (c Claim) Held() bool { return c.Outcome == Claimed }

// releaseScript deletes the key only when it still holds our token: a claim that expired and was
// taken by another request is never released by its former holder. One atomic step, not a read
// followed by a delete.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// markScript writes the SUCCESS mark when the key is free, holds our token, or is already marked;
// it leaves another request's claim alone (that request will mark or release it itself).
var markScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == false or v == ARGV[1] or v == ARGV[2] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
`)

// Claims is the Redis gate. It is safe for concurrent use.
type Claims struct {
	client  redis.UniversalClient
	timeout time.Duration
}

// NewClaims uses client with a per-operation timeout: past it an operation counts as Unavailable
// and the request goes on through the database gates.
func NewClaims(client redis.UniversalClient, timeout time.Duration) *Claims {
	return &Claims{client: client, timeout: timeout}
}

// RedisKey is the Redis key of a channel's idempotency key digest.
func RedisKey(channel string, k Key) string {
	return keyPrefix + channel + ":" + k.String()
}

// Claim tries to take the key for lockTTL with SET key token NX GET PX lockTTL, in one round trip:
// the reply is the previous value (SUCCESS or another request's token) or nil when we took it.
func (c *Claims) Claim(ctx context.Context, channel string, k Key, lockTTL time.Duration) Claim {
	key := RedisKey(channel, k)
	token, err := newToken()
	if err != nil {
		return Claim{Outcome: Unavailable, Err: fmt.Errorf("gate: claim: %w", err), redisKey: key}
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	prev, err := c.client.SetArgs(ctx, key, token, redis.SetArgs{Mode: "NX", Get: true, TTL: lockTTL}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return Claim{Outcome: Claimed, redisKey: key, token: token}
	case err != nil:
		return Claim{Outcome: Unavailable, Err: fmt.Errorf("gate: claim: %w", err), redisKey: key}
	case prev == SuccessMark:
		return Claim{Outcome: AlreadySucceeded, redisKey: key}
	default:
		return Claim{Outcome: HeldByOther, redisKey: key}
	}
}

// Release gives the key back after a failure that committed nothing, so the provider's retry
// can be processed at once instead of waiting for the lock TTL. It deletes the key only while it
// still holds this claim's token. released is false when there was nothing of ours to delete.
func (c *Claims) Release(ctx context.Context, cl Claim) (released bool, err error) {
	if !cl.Held() || cl.token == "" {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	n, err := releaseScript.Run(ctx, c.client, []string{cl.redisKey}, cl.token).Int()
	if err != nil {
		return false, fmt.Errorf("gate: release: %w", err)
	}
	return n == 1, nil
}

// MarkSuccess writes the SUCCESS mark for successTTL. Call it only after the effect is committed
// in PostgreSQL (or confirmed committed there): the mark lets later duplicates be acknowledged
// from Redis. It works for a claim of any outcome (after an Unavailable claim it marks a free
// key), and never overwrites another request's claim. marked reports whether the mark was set.
func (c *Claims) MarkSuccess(ctx context.Context, cl Claim, successTTL time.Duration) (marked bool, err error) {
	if cl.redisKey == "" {
		return false, errors.New("gate: mark success: the claim names no key")
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	n, err := markScript.Run(ctx, c.client, []string{cl.redisKey}, cl.token, SuccessMark, successTTL.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("gate: mark success: %w", err)
	}
	return n == 1, nil
}

// IsTimeout reports whether a gate error is a timeout (as opposed to a refused connection, a
// READONLY replica after a failover, or another Redis error).
func IsTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func newToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("random token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// NewRedisClient builds the Redis client of the configuration: a Sentinel failover client for a
// Sentinel group, a plain client for one address. Retries are off and every timeout is short:
// the gate must answer within its budget or step aside, never hold a callback up.
func NewRedisClient(r config.Redis) (redis.UniversalClient, error) {
	password, err := r.Password()
	if err != nil {
		return nil, fmt.Errorf("gate: redis client: %w", err)
	}
	timeout := r.Timeout.Duration
	if timeout <= 0 {
		timeout = config.DefaultRedisTimeout
	}
	// Dialing gets more than one operation's budget (the per-operation context still bounds a
	// callback's wait), so that Sentinel discovery and reconnects after a failover can finish.
	dialTimeout := max(10*timeout, 500*time.Millisecond)
	if len(r.SentinelAddrs) > 0 {
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:            r.MasterName,
			SentinelAddrs:         r.SentinelAddrs,
			Password:              password,
			MaxRetries:            -1,
			DialTimeout:           dialTimeout,
			DialerRetries:         1,
			ReadTimeout:           timeout,
			WriteTimeout:          timeout,
			PoolTimeout:           timeout,
			ContextTimeoutEnabled: true,
			DisableIdentity:       true,
			Dialer:                faultInjectDialer,
		}), nil
	}
	return redis.NewClient(&redis.Options{
		Addr:                  r.Addr,
		Password:              password,
		MaxRetries:            -1,
		DialTimeout:           dialTimeout,
		DialerRetries:         1,
		ReadTimeout:           timeout,
		WriteTimeout:          timeout,
		PoolTimeout:           timeout,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
		Dialer:                faultInjectDialer,
	}), nil
}
