package store

import (
	"errors"
	"sync"
	"testing"
	"time"
)

func TestIdempotencyKeyLifecycle(t *testing.T) {
	ctx := testContext(t)
	s := newStore(t)
	const key, digest = "idem-1", "digest-a"

	if _, found, err := s.LookupResponse(ctx, key, digest); err != nil || found {
		t.Fatalf("LookupResponse(unknown) = found %v, %v; want not found", found, err)
	}
	if _, claimed, err := s.ClaimIdempotencyKey(ctx, key, digest); err != nil || !claimed {
		t.Fatalf("first claim = %v, %v; want claimed", claimed, err)
	}
	if _, _, err := s.ClaimIdempotencyKey(ctx, key, digest); !errors.Is(err, ErrIdempotencyKeyInProgress) {
		t.Fatalf("claim while in progress = %v, want ErrIdempotencyKeyInProgress", err)
	}
	if _, _, err := s.ClaimIdempotencyKey(ctx, key, "digest-b"); !errors.Is(err, ErrIdempotencyKeyReused) {
		t.Fatalf("claim with another body = %v, want ErrIdempotencyKeyReused", err)
	}
	if err := s.RememberResponse(ctx, key, digest, 201, []byte(`{"order_no":"o-1"}`)); err != nil {
		t.Fatalf("RememberResponse: %v", err)
	}
	resp, claimed, err := s.ClaimIdempotencyKey(ctx, key, digest)
	if err != nil || claimed || resp.Status != 201 || string(resp.Body) != `{"order_no":"o-1"}` {
		t.Fatalf("claim after the answer = %+v claimed %v, %v; want the stored 201 replayed", resp, claimed, err)
	}
	// The first answer wins.
	if err := s.RememberResponse(ctx, key, digest, 500, []byte("late")); err != nil {
		t.Fatalf("second RememberResponse: %v", err)
	}
	if resp, found, err := s.LookupResponse(ctx, key, digest); err != nil || !found || resp.Status != 201 {
		t.Fatalf("LookupResponse = %+v found %v, %v; want the first 201", resp, found, err)
	}
	if err := s.RememberResponse(ctx, key, "digest-b", 201, nil); !errors.Is(err, ErrIdempotencyKeyReused) {
		t.Fatalf("RememberResponse with another body = %v, want ErrIdempotencyKeyReused", err)
	}
	if _, _, err := s.LookupResponse(ctx, key, "digest-b"); !errors.Is(err, ErrIdempotencyKeyReused) {
		t.Fatalf("LookupResponse with another body = %v, want ErrIdempotencyKeyReused", err)
	}
}

func TestIdempotencyKeyReleaseAndStaleClaims(t *testing.T) {
	ctx := testContext(t)
	s := newStore(t)
	if _, claimed, err := s.ClaimIdempotencyKey(ctx, "k", "d"); err != nil || !claimed {
		t.Fatalf("claim = %v, %v", claimed, err)
	}
	if err := s.ReleaseIdempotencyKey(ctx, "k", "d"); err != nil {
		t.Fatalf("release: %v", err)
	}
	if _, claimed, err := s.ClaimIdempotencyKey(ctx, "k", "d"); err != nil || !claimed {
		t.Fatalf("claim after release = %v, %v; want claimed again", claimed, err)
	}

	// A claim abandoned by a crashed process is taken over after IdempotencyClaimTimeout, by
	// the same body only.
	if _, err := s.Pool().Exec(ctx, `UPDATE api_idempotency_keys SET created_at = now() - interval '2 minutes'`); err != nil {
		t.Fatalf("age claim: %v", err)
	}
	if _, _, err := s.ClaimIdempotencyKey(ctx, "k", "other"); !errors.Is(err, ErrIdempotencyKeyReused) {
		t.Fatalf("stale claim, other body = %v, want ErrIdempotencyKeyReused", err)
	}
	if _, claimed, err := s.ClaimIdempotencyKey(ctx, "k", "d"); err != nil || !claimed {
		t.Fatalf("stale claim, same body = %v, %v; want taken over", claimed, err)
	}
}

func TestIdempotencyKeyConcurrentClaimsOnlyOneWins(t *testing.T) {
	ctx := testContext(t)
	s := newStore(t)
	const callers = 10
	claimedBy := make([]bool, callers)
	errs := make([]error, callers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { <-start; _, claimedBy[i], errs[i] = s.ClaimIdempotencyKey(ctx, "k", "d") })
	}
	close(start)
	wg.Wait()
	wins := 0
	for i := range callers {
		switch {
		case claimedBy[i]:
			wins++
		case !errors.Is(errs[i], ErrIdempotencyKeyInProgress):
			t.Errorf("caller %d: claimed false, err %v; want ErrIdempotencyKeyInProgress", i, errs[i])
		}
	}
	if wins != 1 {
		t.Fatalf("%d callers claimed the key, want 1", wins)
	}
}

func TestPurgeIdempotencyKeysKeepsADay(t *testing.T) {
	ctx := testContext(t)
	s := newStore(t)
	if _, err := s.PurgeIdempotencyKeys(ctx, time.Hour); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("purge after 1h = %v, want ErrInvalidInput (keys are kept at least 24h)", err)
	}
	for _, k := range []string{"old", "young"} {
		if err := s.RememberResponse(ctx, k, "d", 201, []byte("{}")); err != nil {
			t.Fatalf("RememberResponse(%s): %v", k, err)
		}
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE api_idempotency_keys SET created_at = now() - interval '25 hours' WHERE idempotency_key = 'old'`); err != nil {
		t.Fatalf("age key: %v", err)
	}
	if n, err := s.PurgeIdempotencyKeys(ctx, MinIdempotencyKeyRetention); err != nil || n != 1 {
		t.Fatalf("PurgeIdempotencyKeys = %d, %v; want 1", n, err)
	}
	if _, found, _ := s.LookupResponse(ctx, "old", "d"); found {
		t.Errorf("old key still present after purge")
	}
	if _, found, err := s.LookupResponse(ctx, "young", "d"); err != nil || !found {
		t.Errorf("young key = found %v, %v; want kept", found, err)
	}
}
