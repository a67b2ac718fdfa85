package store

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// allVersions is every embedded migration, in order (other packages add theirs from 00010 on).
var allVersions = embeddedVersions()

func TestEmbeddedMigrationsIncludeTheCoreSchema(t *testing.T) {
	if len(allVersions) < 4 || !slices.Equal(allVersions[:4], []int64{1, 2, 3, 4}) {
		t.Fatalf("embedded versions = %v, want 1 to 4 first", allVersions)
	}
}

func TestMigrateAppliesEverythingOnceThenNothing(t *testing.T) {
	ctx := testContext(t)
	dsn := emptyDatabase(t)

	if got := LatestSchemaVersion(); got != allVersions[len(allVersions)-1] {
		t.Fatalf("LatestSchemaVersion() = %d, want %d", got, allVersions[len(allVersions)-1])
	}
	applied, err := Migrate(ctx, dsn, nil)
	if err != nil {
		t.Fatalf("first Migrate: %v", err)
	}
	if !slices.Equal(applied, allVersions) {
		t.Fatalf("first Migrate applied %v, want %v", applied, allVersions)
	}
	applied, err = Migrate(ctx, dsn, nil)
	if err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if len(applied) != 0 {
		t.Fatalf("second Migrate applied %v, want nothing", applied)
	}

	s, err := Open(ctx, dsn, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	v, err := SchemaVersion(ctx, s.Pool())
	if err != nil || v != LatestSchemaVersion() {
		t.Fatalf("SchemaVersion = %d, %v; want %d", v, err, LatestSchemaVersion())
	}
	for _, table := range []string{"payment_orders", "callback_receipts", "ledger_entries", "outbox_events",
		"payment_exceptions", "api_idempotency_keys", "submit_tokens"} {
		var exists bool
		if err := s.Pool().QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil || !exists {
			t.Errorf("table %s exists = %v (err %v), want true", table, exists, err)
		}
	}
}

func TestSchemaVersionOfEmptyDatabaseIsZero(t *testing.T) {
	ctx := testContext(t)
	s, err := Open(ctx, emptyDatabase(t), Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	if v, err := SchemaVersion(ctx, s.Pool()); err != nil || v != 0 {
		t.Fatalf("SchemaVersion = %d, %v; want 0, nil", v, err)
	}
}

// Replicas and migration Jobs may start at once: every run must succeed and every version must
// be applied by exactly one of them.
func TestMigrateConcurrentRunsApplyEachVersionOnce(t *testing.T) {
	ctx := testContext(t)
	dsn := emptyDatabase(t)
	const runs = 4
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		applied []int64
		errs    []error
	)
	start := make(chan struct{})
	for range runs {
		wg.Go(func() {
			<-start
			got, err := Migrate(ctx, dsn, nil)
			mu.Lock()
			defer mu.Unlock()
			applied = append(applied, got...)
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("concurrent Migrate errors: %v", errs)
	}
	slices.Sort(applied)
	if !slices.Equal(applied, allVersions) {
		t.Fatalf("versions applied across %d concurrent runs = %v, want each of %v exactly once", runs, applied, allVersions)
	}
}

func TestOpenSessionSettings(t *testing.T) {
	ctx := testContext(t)
	dsn := emptyDatabase(t)
	// A DSN asking for asynchronous commit does not get it either.
	s, err := Open(ctx, dsn+"&synchronous_commit=off", Options{LockTimeout: 1500 * time.Millisecond, StatementTimeout: 3 * time.Second,
		IdleInTxTimeout: 2500 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	// The test server's default is synchronous_commit=off (see TestMain): the session must
	// override it, since an acknowledged effect must survive a crash.
	want := map[string]string{
		"synchronous_commit":                  "on",
		"lock_timeout":                        "1500ms",
		"statement_timeout":                   "3s",
		"idle_in_transaction_session_timeout": "2500ms",
		"application_name":                    "callbackd",
	}
	for name, value := range want {
		var got string
		if err := s.Pool().QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got); err != nil {
			t.Fatalf("current_setting(%s): %v", name, err)
		}
		if got != value {
			t.Errorf("session %s = %q, want %q", name, got, value)
		}
	}
	// Negative control: a plain session on the same server sees the server default, off; so
	// the "on" above comes from Open and not from the server.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("plain connect: %v", err)
	}
	defer conn.Close(ctx)
	var plain string
	if err := conn.QueryRow(ctx, "SHOW synchronous_commit").Scan(&plain); err != nil {
		t.Fatalf("plain SHOW synchronous_commit: %v", err)
	}
	if plain != "off" {
		t.Fatalf("test server default synchronous_commit = %q, want off (the premise of this test)", plain)
	}
}

func TestOpenErrorsNeverContainTheDSN(t *testing.T) {
	const secret = "s3cr3t-pw"
	for _, dsn := range []string{
		"postgres://callbackd:" + secret + "@127.0.0.1:notaport/db",
		"host=127.0.0.1 port=notaport password=" + secret,
	} {
		_, err := Open(testContext(t), dsn, Options{})
		if err == nil {
			t.Fatalf("Open(invalid DSN) succeeded, want an error")
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Open error %q contains the password", err)
		}
		_, err = Migrate(testContext(t), dsn, nil)
		if err == nil {
			t.Fatalf("Migrate(invalid DSN) succeeded, want an error")
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Migrate error %q contains the password", err)
		}
	}
}

func TestPingFailsWhenTheDatabaseIsUnreachable(t *testing.T) {
	ctx := testContext(t)
	// A port nobody listens on: Open succeeds (connections are lazy), Ping fails.
	s, err := Open(ctx, "postgres://callbackd@127.0.0.1:1/db?connect_timeout=2", Options{})
	if err != nil {
		t.Fatalf("Open: %v, want lazy success", err)
	}
	defer s.Close()
	if err := s.Ping(ctx); err == nil {
		t.Fatalf("Ping of an unreachable server succeeded, want an error")
	}
	ok := newStore(t)
	if err := ok.Ping(ctx); err != nil {
		t.Fatalf("Ping of a running server: %v", err)
	}
}

// A migration that cannot get its table lock (a long transaction holds the table) fails after
// the migration lock timeout instead of queueing every serving query behind it; the versions
// before it stay applied, and the next run finishes the job.
func TestMigrateGivesUpOnABusyTableAndResumesLater(t *testing.T) {
	ctx := testContext(t)
	dsn := emptyDatabase(t)
	defer func(d time.Duration) { migrationLockTimeout = d }(migrationLockTimeout)
	migrationLockTimeout = 300 * time.Millisecond

	// Bring the schema to version 3, just before 4 alters payment_orders.
	connCfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse DSN: %v", err)
	}
	db := stdlib.OpenDB(*connCfg)
	defer db.Close()
	p, err := newMigrationProvider(db, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("provider: %v", err)
	}
	if _, err := p.UpTo(ctx, 3); err != nil {
		t.Fatalf("UpTo(3): %v", err)
	}

	holder, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer holder.Close(ctx)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM payment_orders`); err != nil { // ACCESS SHARE until rollback
		t.Fatalf("hold payment_orders: %v", err)
	}
	applied, err := Migrate(ctx, dsn, nil)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("Migrate against a busy table = %v (applied %v), want lock_not_available (55P03)", err, applied)
	}
	if len(applied) != 0 {
		t.Errorf("Migrate applied %v before failing, want nothing (version 4 is the first pending)", applied)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	applied, err = Migrate(ctx, dsn, nil)
	if err != nil {
		t.Fatalf("Migrate after the lock was released: %v", err)
	}
	if want := allVersions[3:]; !slices.Equal(applied, want) {
		t.Fatalf("resumed Migrate applied %v, want %v", applied, want)
	}
}
