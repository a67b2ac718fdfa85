package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// submitTokenPrefix marks submit tokens so that one pasted in the wrong place is recognizable.
const submitTokenPrefix = "st_"

// IssueSubmitToken creates a single-use submit token (256 random bits). Only its SHA-256 is
// stored.
func (s *Store) IssueSubmitToken(ctx context.Context) (string, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("store: issue submit token: %w", err)
	}
	token := submitTokenPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	if _, err := s.pool.Exec(ctx, `INSERT INTO submit_tokens (token_hash) VALUES ($1)`, hashToken(token)); err != nil {
		return "", fmt.Errorf("store: issue submit token: %w", err)
	}
	return token, nil
}

// ConsumeSubmitToken marks the token used by the submit of orderNo, atomically: of any number of
// concurrent submits with one token exactly one succeeds; the others get ErrAlreadySubmitted. An
// unknown token is ErrNotFound.
func (s *Store) ConsumeSubmitToken(ctx context.Context, token, orderNo string) error {
	if err := consumeSubmitToken(ctx, s.pool, token, orderNo); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// querier is what pgxpool.Pool and pgx.Tx have in common.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func consumeSubmitToken(ctx context.Context, q querier, token, orderNo string) error {
	if orderNo == "" || !storableText(orderNo) {
		return fmt.Errorf("consume submit token: %w: order_no is empty or not text", ErrInvalidInput)
	}
	var consumed, exists bool
	// The UPDATE takes the row lock: a concurrent consumer waits, re-reads the row and finds
	// consumed_at set. The existence check reads the statement's snapshot, in which the token
	// (never deleted while in use) is present whenever it was issued.
	err := q.QueryRow(ctx, `
WITH consumed AS (
    UPDATE submit_tokens SET consumed_at = now(), order_no = $2
    WHERE token_hash = $1 AND consumed_at IS NULL
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM consumed), EXISTS (SELECT 1 FROM submit_tokens WHERE token_hash = $1)`,
		hashToken(token), orderNo).Scan(&consumed, &exists)
	switch {
	case err != nil:
		return fmt.Errorf("consume submit token: %w", err)
	case consumed:
		return nil
	case !exists:
		return fmt.Errorf("consume submit token: %w", ErrNotFound)
	default:
		return fmt.Errorf("consume submit token: %w", ErrAlreadySubmitted)
	}
}

func hashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// PurgeSubmitTokens deletes tokens issued before now-olderThan (used or not) and returns how many.
func (s *Store) PurgeSubmitTokens(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan <= 0 {
		return 0, errors.New("store: purge submit tokens: age must be positive")
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM submit_tokens WHERE created_at < now() - make_interval(secs => $1)`,
		olderThan.Seconds())
	if err != nil {
		return 0, fmt.Errorf("store: purge submit tokens: %w", err)
	}
	return tag.RowsAffected(), nil
}
