// Package gate holds the two fast deduplication gates that stand in front of the database:
//
//  1. Window, in process: remembers, for a few seconds, the keys this replica itself finished
//     with success, and answers their repeats without any I/O.
//  2. Claims, in Redis: one request at a time per key across all replicas (SET NX GET EX in one
//     round trip), and a SUCCESS mark written only after the database committed.
//
// Neither gate is a source of truth. The window only ever holds keys whose effect is committed;
// a Redis failure skips the Redis gate (Unavailable) and the database decides. Neither gate ever
// records "done" before the work is done, so a failed first attempt is never swallowed.
package gate

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/maypok86/otter/v2"
)

// Key is the SHA-256 of a notification's idempotency key. The gates only ever see this digest,
// so neither the process memory dumps nor Redis hold order numbers or merchant ids in clear.
type Key [sha256.Size]byte

// KeyOf hashes an idempotency key (notify.Notification.IdempotencyKey).
func KeyOf(idempotencyKey string) Key { return sha256.Sum256([]byte(idempotencyKey)) }

// String is the hex form used in Redis keys and logs.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// Short is the first 12 hex digits, enough to correlate log lines of one key.
func (k Key) Short() string { return hex.EncodeToString(k[:6]) }

// Window is the in-process gateway window: a bounded, expiring set of keys that this replica
// finished with success (an effect it committed, or a duplicate it confirmed). It is safe for
// concurrent use.
type Window struct {
	cache *otter.Cache[Key, time.Duration]
}

// WindowOptions configure a Window.
type WindowOptions struct {
	// MaxEntries bounds the number of keys held; the least valuable are evicted first.
	MaxEntries int
	// Clock is the time source (nil: the wall clock). Tests move it to expire entries.
	Clock otter.Clock
}

// NewWindow creates an empty window.
func NewWindow(opts WindowOptions) (*Window, error) {
	if opts.MaxEntries <= 0 {
		return nil, fmt.Errorf("gate: new window: MaxEntries must be positive, got %d", opts.MaxEntries)
	}
	c, err := otter.New(&otter.Options[Key, time.Duration]{
		MaximumSize: opts.MaxEntries,
		// Each entry lives for the TTL it was remembered with (its channel's gateway window),
		// counted from its creation: repeats do not extend it.
		ExpiryCalculator: otter.ExpiryCreatingFunc(func(e otter.Entry[Key, time.Duration]) time.Duration {
			return e.Value
		}),
		Clock: opts.Clock,
	})
	if err != nil {
		return nil, fmt.Errorf("gate: new window: %w", err)
	}
	return &Window{cache: c}, nil
}

// Contains reports whether the key was finished with success by this replica within its TTL.
// A nil window contains nothing.
func (w *Window) Contains(k Key) bool {
	if w == nil {
		return false
	}
	_, ok := w.cache.GetIfPresent(k)
	return ok
}

// Remember records that the key's effect is committed (or confirmed as committed). Call it only
// after the commit: the window never answers for work that has not been done. A non-positive TTL
// or a nil window records nothing.
func (w *Window) Remember(k Key, ttl time.Duration) {
	if w == nil || ttl <= 0 {
		return
	}
	w.cache.SetIfAbsent(k, ttl)
}

// Len is the approximate number of keys held.
func (w *Window) Len() int {
	if w == nil {
		return 0
	}
	return w.cache.EstimatedSize()
}
