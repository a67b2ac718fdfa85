package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// MinIdempotencyKeyRetention is the shortest age at which API idempotency keys may be purged:
// a client retrying within a day always gets the first answer back.
const MinIdempotencyKeyRetention = 24 * time.Hour

// IdempotencyClaimTimeout is how long a claimed key may stay without a response before another
// request with the same body takes it over (the first one's process died mid-request).
const IdempotencyClaimTimeout = time.Minute

// StoredResponse is the first answer given for an API idempotency key.
type StoredResponse struct {
	Status int
	Body   []byte
}

// ClaimIdempotencyKey atomically claims an API idempotency key for a request whose body has the
// given digest. Exactly one of the concurrent callers gets claimed=true and must then store its
// answer with RememberResponse (or give the key up with ReleaseIdempotencyKey on a failure that
// the client should retry). Later callers with the same digest get the stored response
// (claimed=false), or ErrIdempotencyKeyInProgress while the first request is still running; a
// different digest gets ErrIdempotencyKeyReused.
func (s *Store) ClaimIdempotencyKey(ctx context.Context, key, digest string) (resp StoredResponse, claimed bool, err error) {
	if key == "" || digest == "" || !storableText(key) || !storableText(digest) {
		return StoredResponse{}, false, fmt.Errorf("store: claim idempotency key: %w: empty or non-text key or digest", ErrInvalidInput)
	}
	err = s.pool.QueryRow(ctx, `
INSERT INTO api_idempotency_keys (idempotency_key, request_digest) VALUES ($1, $2)
ON CONFLICT (idempotency_key) DO UPDATE SET created_at = now()
    WHERE api_idempotency_keys.response_status IS NULL
      AND api_idempotency_keys.request_digest = EXCLUDED.request_digest
      AND api_idempotency_keys.created_at < now() - make_interval(secs => $3)
RETURNING true`, key, digest, IdempotencyClaimTimeout.Seconds()).Scan(&claimed)
	if err == nil {
		return StoredResponse{}, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return StoredResponse{}, false, fmt.Errorf("store: claim idempotency key: %w", err)
	}
	resp, found, err := s.LookupResponse(ctx, key, digest)
	switch {
	case err != nil:
		return StoredResponse{}, false, fmt.Errorf("store: claim idempotency key: %w", err)
	case !found:
		// Purged between our insert and our read: vanishingly rare; the client retries.
		return StoredResponse{}, false, fmt.Errorf("store: claim idempotency key: %w", ErrIdempotencyKeyInProgress)
	}
	return resp, false, nil
}

// LookupResponse returns the stored response for the key (found=false when the key is unknown).
// A key first used with another digest is ErrIdempotencyKeyReused; a claimed key without a
// response yet is ErrIdempotencyKeyInProgress.
func (s *Store) LookupResponse(ctx context.Context, key, digest string) (resp StoredResponse, found bool, err error) {
	var (
		storedDigest string
		status       *int32
		body         []byte
	)
	err = s.pool.QueryRow(ctx, `
SELECT request_digest, response_status, response_body FROM api_idempotency_keys WHERE idempotency_key = $1`,
		key).Scan(&storedDigest, &status, &body)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return StoredResponse{}, false, nil
	case err != nil:
		return StoredResponse{}, false, fmt.Errorf("store: lookup idempotency key: %w", err)
	case storedDigest != digest:
		return StoredResponse{}, true, fmt.Errorf("store: lookup idempotency key: %w", ErrIdempotencyKeyReused)
	case status == nil:
		return StoredResponse{}, true, fmt.Errorf("store: lookup idempotency key: %w", ErrIdempotencyKeyInProgress)
	}
	return StoredResponse{Status: int(*status), Body: body}, true, nil
}

// RememberResponse stores the answer of the request that claimed the key (or records key and
// answer at once for a caller that did not claim). The first stored answer wins: remembering
// again is a no-op. A key first used with another digest is ErrIdempotencyKeyReused.
func (s *Store) RememberResponse(ctx context.Context, key, digest string, status int, body []byte) error {
	if key == "" || digest == "" || !storableText(key) || !storableText(digest) {
		return fmt.Errorf("store: remember response: %w: empty or non-text key or digest", ErrInvalidInput)
	}
	if body == nil {
		body = []byte{}
	}
	var stored bool
	err := s.pool.QueryRow(ctx, `
INSERT INTO api_idempotency_keys (idempotency_key, request_digest, response_status, response_body, completed_at)
VALUES ($1, $2, $3, $4, now())
ON CONFLICT (idempotency_key) DO UPDATE
    SET response_status = EXCLUDED.response_status, response_body = EXCLUDED.response_body, completed_at = now()
    WHERE api_idempotency_keys.request_digest = EXCLUDED.request_digest
      AND api_idempotency_keys.response_status IS NULL
RETURNING true`, key, digest, int32(status), body).Scan(&stored)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("store: remember response: %w", err)
	}
	if _, _, err := s.LookupResponse(ctx, key, digest); err != nil {
		return fmt.Errorf("store: remember response: %w", err)
	}
	return nil // an answer was already stored for this key and body
}

// ReleaseIdempotencyKey gives up a claim that has no response yet, so that the client's retry
// runs the request again (used when the request failed in a way the client should retry).
func (s *Store) ReleaseIdempotencyKey(ctx context.Context, key, digest string) error {
	if _, err := s.pool.Exec(ctx, `
DELETE FROM api_idempotency_keys
WHERE idempotency_key = $1 AND request_digest = $2 AND response_status IS NULL`, key, digest); err != nil {
		return fmt.Errorf("store: release idempotency key: %w", err)
	}
	return nil
}

// PurgeIdempotencyKeys deletes keys created before now-olderThan and returns how many. Ages
// below MinIdempotencyKeyRetention are refused.
func (s *Store) PurgeIdempotencyKeys(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan < MinIdempotencyKeyRetention {
		return 0, fmt.Errorf("store: purge idempotency keys: %w: keys are kept at least %s, not %s",
			ErrInvalidInput, MinIdempotencyKeyRetention, olderThan)
	}
	tag, err := s.pool.Exec(ctx,
		`DELETE FROM api_idempotency_keys WHERE created_at < now() - make_interval(secs => $1)`,
		olderThan.Seconds())
	if err != nil {
		return 0, fmt.Errorf("store: purge idempotency keys: %w", err)
	}
	return tag.RowsAffected(), nil
}
