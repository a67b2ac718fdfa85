package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var embeddedMigrations embed.FS

// VersionTable is the table in which goose records the applied migrations.
const VersionTable = "callbackd_schema_version"

// migrationLockID is the key of the session-level advisory lock that serializes concurrent
// migration runs (replicas, Jobs). It is derived from a name of ours so that another goose user
// sharing the database does not wait on us.
var migrationLockID = func() int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("callbackd/store/migrations"))
	return int64(h.Sum64() >> 1)
}()

// Lock acquisition is probed every migrationLockProbe seconds, migrationLockProbes times: a
// replica waits up to 5 minutes for another one's run to finish, then fails (and its Job retries).
const (
	migrationLockProbe  = 1
	migrationLockProbes = 300
)

// migrationLockTimeout is the lock_timeout of migration sessions (a variable for tests).
var migrationLockTimeout = 10 * time.Second

func migrationsFS() fs.FS {
	sub, err := fs.Sub(embeddedMigrations, "migrations")
	if err != nil {
		// The folder is embedded at compile time; failing here is a build defect.
		panic(fmt.Sprintf("store: embedded migrations: %v", err))
	}
	return sub
}

// Migrate applies every embedded migration that the database does not have yet and returns the
// versions it applied (none when the schema is current). Concurrent runs against one database
// are safe: they serialize on a PostgreSQL advisory lock, and each version is applied by exactly
// one of them. Migrations are forward-only; there is no down path.
func Migrate(ctx context.Context, dsn string, logger *slog.Logger) (applied []int64, err error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	connCfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: migrate: %w", dsnError(err))
	}
	connCfg.RuntimeParams["application_name"] = "callbackd-migrate"
	// A schema change waiting for a table lock blocks every query queued behind it; better to
	// fail the run (its Job retries) than to stall the serving replicas for long.
	connCfg.RuntimeParams["lock_timeout"] = millis(migrationLockTimeout)
	db := stdlib.OpenDB(*connCfg)
	defer func() {
		if cerr := db.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("store: migrate: close: %w", cerr)
		}
	}()
	provider, err := newMigrationProvider(db, logger)
	if err != nil {
		return nil, fmt.Errorf("store: migrate: %w", err)
	}
	results, err := provider.Up(ctx)
	var partial *goose.PartialError
	if errors.As(err, &partial) {
		results = partial.Applied
	}
	for _, r := range results {
		if r.Error == nil && r.Source != nil {
			applied = append(applied, r.Source.Version)
		}
	}
	if err != nil {
		if partial != nil && partial.Failed != nil && partial.Failed.Source != nil {
			return applied, fmt.Errorf("store: migrate: version %d: %w", partial.Failed.Source.Version, partial.Err)
		}
		return applied, fmt.Errorf("store: migrate: %w", err)
	}
	if len(applied) > 0 {
		logger.InfoContext(ctx, "schema migrated", slog.Any("applied", applied))
	}
	return applied, nil
}

func newMigrationProvider(db *sql.DB, logger *slog.Logger) (*goose.Provider, error) {
	// A locker holds retry state, so every provider gets its own.
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(migrationLockID),
		lock.WithLockTimeout(migrationLockProbe, migrationLockProbes),
	)
	if err != nil {
		return nil, fmt.Errorf("session locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrationsFS(),
		goose.WithTableName(VersionTable),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
		goose.WithSlog(logger),
	)
	if err != nil {
		return nil, fmt.Errorf("migration provider: %w", err)
	}
	return p, nil
}

// LatestSchemaVersion is the highest migration version embedded in this binary. A daemon whose
// database reports a lower SchemaVersion must not serve.
func LatestSchemaVersion() int64 {
	versions := embeddedVersions()
	if len(versions) == 0 {
		return 0
	}
	return versions[len(versions)-1]
}

// embeddedVersions lists the embedded migration versions in ascending order.
func embeddedVersions() []int64 {
	entries, err := fs.ReadDir(migrationsFS(), ".")
	if err != nil {
		return nil
	}
	var versions []int64
	for _, e := range entries {
		if v, err := goose.NumericComponent(e.Name()); err == nil {
			versions = append(versions, v)
		}
	}
	slices.Sort(versions)
	return versions
}

// SchemaVersion returns the highest migration version applied to the database, 0 for a database
// that was never migrated.
func SchemaVersion(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, VersionTable).Scan(&exists); err != nil {
		return 0, fmt.Errorf("store: schema version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int64
	err := pool.QueryRow(ctx,
		`SELECT COALESCE(MAX(version_id), 0) FROM `+VersionTable+` WHERE is_applied`).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("store: schema version: %w", err)
	}
	return v, nil
}
