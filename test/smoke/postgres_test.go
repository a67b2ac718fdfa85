package smoke_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

func TestPostgresCommittedRowSurvivesCrashUncommittedDoesNot(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	conn := mustConnect(ctx, t, pg.DSN())
	var version string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		t.Fatalf("SHOW server_version: %v", err)
	}
	t.Logf("real server: postgres %s on %s (fsync on)", version, pg.Addr())

	mustExec(ctx, t, conn, `CREATE TABLE payments (out_trade_no text PRIMARY KEY, amount_fen bigint NOT NULL)`)
	mustExec(ctx, t, conn, `INSERT INTO payments VALUES ('T-1', 9900)`)
	if got := amountOf(ctx, t, conn, "T-1"); got != 9900 {
		t.Fatalf("read back T-1: expected 9900 fen, got %d", got)
	}

	// A transaction still open at the crash must vanish; the committed row must stay.
	open, err := conn.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	if _, err := open.Exec(ctx, `INSERT INTO payments VALUES ('T-2', 100)`); err != nil {
		t.Fatalf("insert T-2 in the open transaction: %v", err)
	}

	pg.Crash(t)
	pg.Start(t)

	after := mustConnect(ctx, t, pg.DSN())
	if got := amountOf(ctx, t, after, "T-1"); got != 9900 {
		t.Errorf("committed row T-1 after crash: expected 9900 fen, got %d", got)
	}
	var n int
	err = after.QueryRow(ctx, `SELECT count(*) FROM payments WHERE out_trade_no = 'T-2'`).Scan(&n)
	if err != nil || n != 0 {
		t.Errorf("uncommitted row T-2 after crash: expected 0 rows, got %d (err %v)", n, err)
	}
}

func TestPostgresNewDatabaseIsIsolated(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	t.Logf("real server: %s", pg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	a := mustConnect(ctx, t, pg.NewDatabase(t, "tenant_a"))
	b := mustConnect(ctx, t, pg.NewDatabase(t, ""))
	mustExec(ctx, t, a, `CREATE TABLE only_in_a (id int)`)
	var exists bool
	if err := b.QueryRow(ctx, `SELECT to_regclass('only_in_a') IS NOT NULL`).Scan(&exists); err != nil {
		t.Fatalf("look up table in the second database: %v", err)
	}
	if exists {
		t.Errorf("table created in database tenant_a: expected it absent from the other database, found it")
	}
}

func mustConnect(ctx context.Context, t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func mustExec(ctx context.Context, t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func amountOf(ctx context.Context, t *testing.T, conn *pgx.Conn, orderNo string) int64 {
	t.Helper()
	var amount int64
	err := conn.QueryRow(ctx, `SELECT amount_fen FROM payments WHERE out_trade_no = $1`, orderNo).Scan(&amount)
	if errors.Is(err, pgx.ErrNoRows) {
		return -1
	}
	if err != nil {
		t.Fatalf("select %s: %v", orderNo, err)
	}
	return amount
}
