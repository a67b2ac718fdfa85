package faults

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// TestPGProxyCommitFaults proves the proxy's commit faults on a real PostgreSQL with pgx, the
// driver callbackd uses: a reset before the COMMIT leaves no effect, a reset after it leaves the
// effect committed while the client gets an error, a held answer means committed-but-unanswered,
// and an untouched transaction passes.
func TestPGProxyCommitFaults(t *testing.T) {
	pg := testenv.StartPostgres(t, testenv.WithoutFsync("the proxy test checks visibility, not durability"))
	dsn := pg.NewDatabase(t, "pgwire_proxy")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	direct, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect directly: %v", err)
	}
	defer direct.Close(context.Background())
	if _, err := direct.Exec(ctx, `CREATE TABLE effects (k text PRIMARY KEY)`); err != nil {
		t.Fatalf("create table: %v", err)
	}

	proxy, err := NewPGProxy(pg.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	proxied, err := proxy.DSN(dsn)
	if err != nil {
		t.Fatal(err)
	}

	release := make(chan struct{})
	proxy.SetRule(func(q PGQuery) PGAction {
		if !q.IsCommit() {
			return PGAction{}
		}
		switch {
		case q.TxContains("key-reset-before"):
			return PGAction{Label: "before", ResetBefore: true}
		case q.TxContains("key-reset-after"):
			return PGAction{Label: "after", ResetAfter: true}
		case q.TxContains("key-held"):
			return PGAction{Label: "held", HoldAfter: release}
		case q.TxContains("key-lost"):
			return PGAction{Label: "lost", ReplaceSQL: "rollback", AnswerTag: "COMMIT"}
		}
		return PGAction{}
	})

	for _, tc := range []struct {
		key        string
		label      string
		wantErr    bool
		wantEffect bool
	}{
		{key: "key-plain", wantErr: false, wantEffect: true},
		{key: "key-reset-before", label: "before", wantErr: true, wantEffect: false},
		{key: "key-reset-after", label: "after", wantErr: true, wantEffect: true},
		{key: "key-held", label: "held", wantErr: false, wantEffect: true},
		// The negative-control lie: rolled back, yet the client hears COMMIT.
		{key: "key-lost", label: "lost", wantErr: false, wantEffect: false},
	} {
		t.Run(tc.key, func(t *testing.T) {
			conn, err := pgx.Connect(ctx, proxied)
			if err != nil {
				t.Fatalf("connect through the proxy: %v", err)
			}
			defer conn.Close(context.Background())
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatalf("begin: %v", err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO effects (k) VALUES ($1)`, tc.key); err != nil {
				t.Fatalf("insert: %v", err)
			}
			commitErr := make(chan error, 1)
			go func() { commitErr <- tx.Commit(ctx) }()

			if tc.label == "held" {
				// Committed but unanswered: the effect is visible while the client still waits.
				if err := proxy.WaitCount(ctx, "held", StageHeldAnswer, 1); err != nil {
					t.Fatal(err)
				}
				if !effectPresent(ctx, t, direct, tc.key) {
					t.Errorf("held answer: expected the commit visible before the answer, got no row")
				}
				select {
				case err := <-commitErr:
					t.Fatalf("held answer: expected Commit to wait, got %v", err)
				case <-time.After(100 * time.Millisecond):
				}
				close(release)
			}
			err = <-commitErr
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Errorf("commit: expected error=%v, got %v", tc.wantErr, err)
			}
			if got := effectPresent(ctx, t, direct, tc.key); got != tc.wantEffect {
				t.Errorf("effect after commit: expected present=%v, got %v", tc.wantEffect, got)
			}
		})
	}
	want := map[string]int64{
		"before/" + StageResetBefore:             1,
		"after/" + StageResetAfter:               1,
		"after/" + StageAnswerPrefix + "COMMIT":  1,
		"held/" + StageHeldAnswer:                1,
		"held/" + StageRelayed:                   1,
		"lost/" + StageReplaced:                  1,
		"lost/" + StageAnswerPrefix + "ROLLBACK": 1,
		"lost/" + StageRetagged:                  1,
	}
	got := proxy.Counts()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("proxy counter %s: expected %d, got %d (all: %v)", k, v, got[k], got)
		}
	}
}

func effectPresent(ctx context.Context, t *testing.T, db *pgx.Conn, key string) bool {
	t.Helper()
	var k string
	err := db.QueryRow(ctx, `SELECT k FROM effects WHERE k = $1`, key).Scan(&k)
	if errors.Is(err, pgx.ErrNoRows) {
		return false
	}
	if err != nil {
		t.Fatalf("read effect %s: %v", key, err)
	}
	return true
}
