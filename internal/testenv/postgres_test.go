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
