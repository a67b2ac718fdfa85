package store

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSubmitTokensAreSingleUse(t *testing.T) {
	ctx := testContext(t)
	s := newStore(t)
	token, err := s.IssueSubmitToken(ctx)
	if err != nil {
		t.Fatalf("IssueSubmitToken: %v", err)
	}
	if !strings.HasPrefix(token, "st_") || len(token) != len("st_")+43 {
		t.Errorf("token %q: want st_ and 43 base64url characters (256 bits)", token)
	}
	other, err := s.IssueSubmitToken(ctx)
	if err != nil || other == token {
		t.Fatalf("second IssueSubmitToken = %q, %v; want a different token", other, err)
	}

	if err := s.ConsumeSubmitToken(ctx, token, "o-1"); err != nil {
		t.Fatalf("first consume: %v", err)
	}
	if err := s.ConsumeSubmitToken(ctx, token, "o-1"); !errors.Is(err, ErrAlreadySubmitted) {
		t.Fatalf("second consume = %v, want ErrAlreadySubmitted", err)
	}
	if err := s.ConsumeSubmitToken(ctx, "st_unknown", "o-1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown token = %v, want ErrNotFound", err)
	}

	// Only the hash is stored: the token itself appears nowhere in the table.
	var leaked bool
	if err := s.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM submit_tokens WHERE token_hash = $1 OR order_no = $1)`,
		token).Scan(&leaked); err != nil || leaked {
		t.Errorf("token stored in clear = %v (err %v), want false", leaked, err)
	}
}

func TestSubmitTokenConcurrentConsumersOnlyOneWins(t *testing.T) {
	ctx := testContext(t)
	s := newStore(t)
	token, err := s.IssueSubmitToken(ctx)
	if err != nil {
		t.Fatalf("IssueSubmitToken: %v", err)
	}
	const submits = 10
	errs := make([]error, submits)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range submits {
		wg.Go(func() { <-start; errs[i] = s.ConsumeSubmitToken(ctx, token, "o-1") })
	}
	close(start)
	wg.Wait()
	wins, already := 0, 0
	for i, err := range errs {
		switch {
		case err == nil:
			wins++
		case errors.Is(err, ErrAlreadySubmitted):
			already++
		default:
			t.Errorf("submit %d: %v", i, err)
		}
	}
	if wins != 1 || already != submits-1 {
		t.Fatalf("%d wins, %d already submitted; want 1 and %d", wins, already, submits-1)
	}
}

func TestCreateOrderConsumesItsSubmitTokenAtomically(t *testing.T) {
	ctx := testContext(t)
	s := newStore(t)
	token, err := s.IssueSubmitToken(ctx)
	if err != nil {
		t.Fatalf("IssueSubmitToken: %v", err)
	}

	// A conflicting registration fails and leaves the token unused.
	mustCreate(t, s, testOrder("o-taken"))
	conflicting := testOrder("o-taken")
	conflicting.Amount = 5
	conflicting.SubmitToken = token
	if _, _, err := s.CreateOrder(ctx, conflicting); !errors.Is(err, ErrOrderConflict) {
		t.Fatalf("conflicting CreateOrder = %v, want ErrOrderConflict", err)
	}

	in := testOrder("o-1")
	in.SubmitToken = token
	if _, created, err := s.CreateOrder(ctx, in); err != nil || !created {
		t.Fatalf("CreateOrder with a fresh token = created %v, %v; want created", created, err)
	}
	second := testOrder("o-2")
	second.SubmitToken = token
	if _, _, err := s.CreateOrder(ctx, second); !errors.Is(err, ErrAlreadySubmitted) {
		t.Fatalf("CreateOrder with a used token = %v, want ErrAlreadySubmitted", err)
	}
	if _, err := s.GetOrder(ctx, "o-2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("order of the refused submit: GetOrder = %v, want ErrNotFound", err)
	}
	unknown := testOrder("o-3")
	unknown.SubmitToken = "st_nope"
	if _, _, err := s.CreateOrder(ctx, unknown); !errors.Is(err, ErrNotFound) {
		t.Fatalf("CreateOrder with an unknown token = %v, want ErrNotFound", err)
	}
	var orderNo string
	if err := s.Pool().QueryRow(ctx, `SELECT order_no FROM submit_tokens WHERE token_hash = $1`, hashToken(token)).Scan(&orderNo); err != nil || orderNo != "o-1" {
		t.Fatalf("token consumed by %q (%v), want o-1", orderNo, err)
	}
}

func TestPurgeSubmitTokens(t *testing.T) {
	ctx := testContext(t)
	s := newStore(t)
	old, err := s.IssueSubmitToken(ctx)
	if err != nil {
		t.Fatalf("IssueSubmitToken: %v", err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE submit_tokens SET created_at = now() - interval '2 days'`); err != nil {
		t.Fatalf("age token: %v", err)
	}
	fresh, err := s.IssueSubmitToken(ctx)
	if err != nil {
		t.Fatalf("IssueSubmitToken: %v", err)
	}
	if n, err := s.PurgeSubmitTokens(ctx, 24*time.Hour); err != nil || n != 1 {
		t.Fatalf("PurgeSubmitTokens = %d, %v; want 1", n, err)
	}
	if err := s.ConsumeSubmitToken(ctx, old, "o-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("purged token = %v, want ErrNotFound", err)
	}
	if err := s.ConsumeSubmitToken(ctx, fresh, "o-1"); err != nil {
		t.Errorf("fresh token: %v", err)
	}
}
