package testenv_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to %s: %v", dsn, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func TestPostgresDefaultsAreDurableAndLoopbackOnly(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	t.Logf("using %s", pg)
	conn := connect(t, pg.DSN())
	ctx := context.Background()

	want := map[string]string{
		"fsync":              "on",
		"synchronous_commit": "on",
		"full_page_writes":   "on",
		"listen_addresses":   "127.0.0.1",
		"server_encoding":    "UTF8",
	}
	for name, value := range want {
		var got string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got); err != nil {
			t.Fatalf("current_setting(%q): %v", name, err)
		}
		if got != value {
			t.Errorf("setting %s: expected %q, got %q", name, value, got)
		}
	}
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatalf("current_database: %v", err)
	}
	if db != "test" {
		t.Errorf("DSN database: expected %q, got %q", "test", db)
	}
	if !strings.HasPrefix(pg.DSN(), "postgres://postgres@127.0.0.1:") || !strings.HasSuffix(pg.DSN(), "/test?sslmode=disable") {
		t.Errorf("DSN: expected postgres://postgres@127.0.0.1:PORT/test?sslmode=disable, got %s", pg.DSN())
	}
}

func TestPostgresOptionsReachTheServer(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t,
		testenv.WithoutFsync("this test only reads settings back; nothing it writes must survive a crash"),
		testenv.WithSetting("max_connections", "321"),
		testenv.WithSetting("application_name", "it's quoted"),
		testenv.WithDatabase("orders"),
	)
	conn := connect(t, pg.DSN())
	ctx := context.Background()
	want := map[string]string{
		"fsync":              "off",
		"synchronous_commit": "off",
		"max_connections":    "321",
		"application_name":   "it's quoted",
	}
	for name, value := range want {
		var got string
		if err := conn.QueryRow(ctx, "SELECT setting FROM pg_settings WHERE name = $1", name).Scan(&got); err != nil {
			t.Fatalf("pg_settings %q: %v", name, err)
		}
		if got != value {
			t.Errorf("setting %s: expected %q, got %q", name, value, got)
		}
	}
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil || db != "orders" {
		t.Errorf("WithDatabase: expected DSN database %q, got %q (err %v)", "orders", db, err)
	}
}

func TestPostgresWithoutFsyncNeedsAReason(t *testing.T) {
	t.Parallel()
	_, err := testenv.NewPostgres(testenv.WithoutFsync(" "))
	if err == nil || !strings.Contains(err.Error(), "reason") {
		t.Fatalf("WithoutFsync with a blank reason: expected an error asking for a reason, got %v", err)
	}
}

func TestPostgresStopThenStartKeepsDataAndPort(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	dsn, port := pg.DSN(), pg.Port()
	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx, "CREATE TABLE t (v int); INSERT INTO t VALUES (42)"); err != nil {
		t.Fatalf("create and insert: %v", err)
	}

	pg.Stop(t)
	if err := conn.Ping(ctx); err == nil {
		t.Fatalf("ping after Stop: expected an error, got none")
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	if c, err := pgx.Connect(short, dsn); err == nil {
		_ = c.Close(ctx)
		t.Errorf("connect after Stop: expected refusal, got a connection")
	}
	cancel()

	pg.Start(t)
	if pg.Port() != port || pg.DSN() != dsn {
		t.Errorf("after Start: expected port %d and DSN %s unchanged, got %d and %s", port, dsn, pg.Port(), pg.DSN())
	}
	var v int
	if err := connect(t, dsn).QueryRow(ctx, "SELECT v FROM t").Scan(&v); err != nil || v != 42 {
		t.Errorf("row after Stop and Start: expected 42, got %d (err %v)", v, err)
	}
}

func TestPostgresKillThenStartRecoversCommittedRows(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	conn := connect(t, pg.DSN())
	if _, err := conn.Exec(ctx, "CREATE TABLE t (v int); INSERT INTO t VALUES (7)"); err != nil {
		t.Fatalf("create and insert: %v", err)
	}

	pg.Kill(t)
	if err := conn.Ping(ctx); err == nil {
		t.Fatalf("ping after Kill: expected an error, got none")
	}
	pg.Start(t)

	var v int
	if err := connect(t, pg.DSN()).QueryRow(ctx, "SELECT v FROM t").Scan(&v); err != nil || v != 7 {
		t.Errorf("committed row after Kill and Start: expected 7, got %d (err %v)", v, err)
	}
	if log := pg.LogTail(1000); !strings.Contains(log, "database system was interrupted") {
		t.Errorf("server log after Kill and Start: expected crash recovery (\"database system was interrupted\"), got:\n%s", log)
	}
}
