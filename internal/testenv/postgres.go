package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgSuperuser is the superuser initdb creates; every DSN connects as it (trust authentication
// on loopback, so there is no password to leak).
const pgSuperuser = "postgres"

// defaultPGDatabase is the database DSN() points at.
const defaultPGDatabase = "test"

// pgReadyTimeout bounds how long a start (including crash recovery) may take.
const pgReadyTimeout = 90 * time.Second

// PGOption customizes a PostgreSQL server started by StartPostgres or NewPostgres.
type PGOption func(*pgConfig)

type pgConfig struct {
	settings      [][2]string
	noFsyncReason string
	noFsync       bool
	database      string
}

// WithoutFsync turns fsync, synchronous_commit and full_page_writes off for speed. Durability
// is the point of most database tests here, so the caller must say why it does not matter
// (reason is required; an empty one fails the start).
func WithoutFsync(reason string) PGOption {
	return func(c *pgConfig) {
		c.noFsync = true
		c.noFsyncReason = reason
	}
}

// WithSetting sets a postgresql.conf parameter, e.g. WithSetting("max_connections", "300").
// Later settings win over earlier ones and over the package's defaults.
func WithSetting(name, value string) PGOption {
	return func(c *pgConfig) { c.settings = append(c.settings, [2]string{name, value}) }
}

// WithDatabase names the database that DSN() points at (default "test").
func WithDatabase(name string) PGOption {
	return func(c *pgConfig) { c.database = name }
}

// Postgres is a throwaway PostgreSQL server on 127.0.0.1, owned by one test or one TestMain.
type Postgres struct {
	binDir  string
	version string
	dir     string // the instance folder; removed by Close
	dataDir string
	sockDir string
	port    int
	cred    *syscall.Credential
	cfg     pgConfig

	mu     sync.Mutex
	proc   *process // nil while stopped
	closed bool
}

// StartPostgres starts a PostgreSQL server for t (initdb'd into a fresh folder, fsync on unless
// an option says otherwise) with an empty database that DSN() points at. The server and its
// folder are removed when t ends; if t failed, the tail of the server log is logged first.
func StartPostgres(t testing.TB, opts ...PGOption) *Postgres {
	t.Helper()
	p, err := NewPostgres(opts...)
	if err != nil {
		t.Fatalf("testenv: start PostgreSQL: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: tail of the PostgreSQL log (%s):\n%s", p.Addr(), p.LogTail(40))
		}
		if err := p.Close(); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	return p
}

// NewPostgres starts a PostgreSQL server outside any test, for TestMain; the caller must Close
// it. Tests should prefer StartPostgres.
func NewPostgres(opts ...PGOption) (*Postgres, error) {
	cfg := pgConfig{database: defaultPGDatabase}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.noFsync && strings.TrimSpace(cfg.noFsyncReason) == "" {
		return nil, errors.New("testenv: WithoutFsync needs a reason saying why durability does not matter to the test")
	}
	if err := validDatabaseName(cfg.database); err != nil {
		return nil, err
	}
	binDir, err := findPGBin()
	if err != nil {
		return nil, err
	}
	cred, err := pgCredential()
	if err != nil {
		return nil, err
	}
	dir, err := newInstanceDir()
	if err != nil {
		return nil, err
	}
	p := &Postgres{
		binDir:  binDir,
		version: binaryVersion(filepath.Join(binDir, "postgres")),
		dir:     dir,
		dataDir: filepath.Join(dir, "pgdata"),
		sockDir: filepath.Join(dir, "run"),
		cred:    cred,
		cfg:     cfg,
	}
	if err := p.setUp(); err != nil {
		_ = p.Close() // stops a server that started but could not be prepared, removes dir
		return nil, err
	}
	return p, nil
}

// setUp runs initdb, writes the configuration, starts the server on a free port (retrying on a
// port clash) and creates the default database.
func (p *Postgres) setUp() error {
	if p.cred != nil {
		if err := traversableByOthers(p.dir); err != nil {
			return err
		}
	}
	for _, d := range []string{p.dataDir, p.sockDir} {
		if err := p.mkdirOwned(d); err != nil {
			return err
		}
	}
	if err := p.makeCluster(); err != nil {
		return err
	}
	if err := p.writeConfig(); err != nil {
		return err
	}
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return err
		}
		p.port = port
		lastErr = p.start()
		if lastErr == nil {
			break
		}
		if !portClash(tailFile(p.logPath(), 20)) {
			return lastErr
		}
	}
	if lastErr != nil {
		return lastErr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.createDatabase(ctx, p.cfg.database); err != nil {
		return err
	}
	return nil
}

// initdb creates a new cluster in p.dataDir with initdbArgs.
func (p *Postgres) initdb() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(p.binDir, "initdb"), append([]string{"--pgdata=" + p.dataDir}, initdbArgs...)...)
	cmd.Dir = p.dir
	cmd.Env = childEnv()
	cmd.SysProcAttr = sysProcAttr(p.cred)
	out, err := cmd.CombinedOutput()
	_ = os.WriteFile(filepath.Join(p.dir, "initdb.log"), out, 0o644)
	if err != nil {
		return fmt.Errorf("testenv: initdb: %w\n%s", err, lastLines(string(out), 20))
	}
	return nil
}

// writeConfig appends this package's settings, then the caller's, to postgresql.conf.
func (p *Postgres) writeConfig() error {
	settings := [][2]string{
		{"listen_addresses", "127.0.0.1"},
		{"unix_socket_directories", p.sockDir},
		{"fsync", "on"},
		{"synchronous_commit", "on"},
		{"full_page_writes", "on"},
		{"logging_collector", "off"},
		{"log_min_messages", "warning"},
		{"log_connections", "off"},
		{"max_connections", "200"},
		{"shared_buffers", "64MB"},
	}
	if p.cfg.noFsync {
		settings = append(settings,
			[2]string{"fsync", "off"},
			[2]string{"synchronous_commit", "off"},
			[2]string{"full_page_writes", "off"})
	}
	settings = append(settings, p.cfg.settings...)
	var b strings.Builder
	b.WriteString("\n# Written by internal/testenv.\n")
	if p.cfg.noFsync {
		fmt.Fprintf(&b, "# fsync off: %s\n", strings.ReplaceAll(p.cfg.noFsyncReason, "\n", " "))
	}
	for _, kv := range settings {
		fmt.Fprintf(&b, "%s = '%s'\n", kv[0], strings.ReplaceAll(kv[1], "'", "''"))
	}
	f, err := os.OpenFile(filepath.Join(p.dataDir, "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("testenv: open postgresql.conf: %w", err)
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return fmt.Errorf("testenv: write postgresql.conf: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("testenv: write postgresql.conf: %w", err)
	}
	return nil
}

// start launches the postmaster on p.port and waits until it accepts connections.
func (p *Postgres) start() error {
	proc, err := startProcess(procSpec{
		name:    "postgres",
		path:    filepath.Join(p.binDir, "postgres"),
		args:    []string{"-D", p.dataDir, "-p", strconv.Itoa(p.port)},
		dir:     p.dataDir,
		env:     childEnv(),
		logPath: p.logPath(),
		cred:    p.cred,
	})
	if err != nil {
		return err
	}
	if err := p.waitReady(proc); err != nil {
		_ = proc.kill()
		killProcessesUnder(p.dataDir)
		return err
	}
	p.proc = proc
	return nil
}

// waitReady polls with real connections until the server answers a query, the process exits,
// or pgReadyTimeout passes.
func (p *Postgres) waitReady(proc *process) error {
	deadline := time.Now().Add(pgReadyTimeout)
	// Each refused attempt writes a FATAL line to the server log; back off to keep it readable.
	pause := 20 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, p.dsnFor("postgres"))
		if err == nil {
			err = conn.Ping(ctx)
			_ = conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if proc.exited() {
			return fmt.Errorf("testenv: postgres on %s exited during start-up: %w\n%s", p.Addr(), proc.exitErr(), proc.logTail(20))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testenv: postgres on %s not ready after %s: %w\n%s", p.Addr(), pgReadyTimeout, err, proc.logTail(20))
		}
		time.Sleep(pause)
		pause = min(2*pause, 250*time.Millisecond)
	}
}

// DSN returns the pgx-style URL of the server's default database (sslmode=disable).
func (p *Postgres) DSN() string { return p.dsnFor(p.cfg.database) }

func (p *Postgres) dsnFor(database string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(pgSuperuser),
		Host:     p.Addr(),
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Addr returns the server's host:port on 127.0.0.1.
func (p *Postgres) Addr() string { return loopbackAddr(p.port) }

// Port returns the server's TCP port; it stays the same across Stop/Crash and Start.
func (p *Postgres) Port() int { return p.port }

// Version returns the server's version, e.g. "15.20".
func (p *Postgres) Version() string { return p.version }

// String describes the server for test logs, e.g. "postgres 15.20 on 127.0.0.1:41234".
func (p *Postgres) String() string { return fmt.Sprintf("postgres %s on %s", p.version, p.Addr()) }

// LogTail returns the last n lines of the server's log.
func (p *Postgres) LogTail(n int) string { return tailFile(p.logPath(), n) }

func (p *Postgres) logPath() string { return filepath.Join(p.dir, "postgres.log") }

// NewDatabase creates a fresh, empty database on this server and returns its DSN; it is dropped
// when t ends (if the server still runs). An empty name derives one from t.Name(), so that tests
// sharing one server (started in TestMain) each get their own database.
func (p *Postgres) NewDatabase(t testing.TB, name string) string {
	t.Helper()
	if name == "" {
		name = databaseNameFor(t.Name())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.createDatabase(ctx, name); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		if !p.running() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.dropDatabase(ctx, name); err != nil {
			t.Logf("testenv: %v", err)
		}
	})
	return p.dsnFor(name)
}

// CreateDatabase creates a fresh, empty database and returns its DSN; for use outside a test
// (NewDatabase is the in-test form).
func (p *Postgres) CreateDatabase(ctx context.Context, name string) (string, error) {
	if err := p.createDatabase(ctx, name); err != nil {
		return "", err
	}
	return p.dsnFor(name), nil
}

func (p *Postgres) createDatabase(ctx context.Context, name string) error {
	if err := validDatabaseName(name); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, p.dsnFor("postgres"))
	if err != nil {
		return fmt.Errorf("testenv: create database %q: connect: %w", name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("testenv: create database %q: %w", name, err)
	}
	return nil
}

func (p *Postgres) dropDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, p.dsnFor("postgres"))
	if err != nil {
		return fmt.Errorf("testenv: drop database %q: connect: %w", name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("testenv: drop database %q: %w", name, err)
	}
	return nil
}

var unsafeDBChars = regexp.MustCompile(`[^a-z0-9_]+`)

// databaseNameFor turns a test name into a unique, valid database name.
func databaseNameFor(testName string) string {
	base := strings.Trim(unsafeDBChars.ReplaceAllString(strings.ToLower(testName), "_"), "_")
	suffix := fmt.Sprintf("_%d", instanceSeq.Add(1))
	const prefix, maxLen = "t_", 63 // NAMEDATALEN - 1
	if room := maxLen - len(prefix) - len(suffix); len(base) > room {
		base = base[:room]
	}
	return prefix + base + suffix
}

// validDatabaseName rejects names PostgreSQL would truncate or that are empty.
func validDatabaseName(name string) error {
	if name == "" || len(name) > 63 || strings.ContainsRune(name, 0) {
		return fmt.Errorf("testenv: invalid database name %q (1 to 63 bytes)", name)
	}
	return nil
}

func (p *Postgres) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.proc != nil && !p.proc.exited()
}

// Stop shuts the server down cleanly (what pg_ctl stop -m fast does: SIGINT to the postmaster,
// which rolls back open transactions, checkpoints and exits). Start brings it back.
func (p *Postgres) Stop(t testing.TB) {
	t.Helper()
	if err := p.shutdown(syscall.SIGINT, "fast"); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

// Crash stops the server the way a power cut looks to its clients (what pg_ctl stop -m
// immediate does: SIGQUIT, no checkpoint); the next Start runs crash recovery from the WAL.
func (p *Postgres) Crash(t testing.TB) {
	t.Helper()
	if err := p.shutdown(syscall.SIGQUIT, "immediate"); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

// Kill SIGKILLs the postmaster and every backend at once, with no chance to write anything
// more: the harshest crash a process can suffer (the operating system's page cache survives, as
// it would when only the database process dies). The next Start runs crash recovery.
func (p *Postgres) Kill(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc == nil {
		t.Fatalf("testenv: postgres on %s: kill: not running", p.Addr())
	}
	killProcessesUnder(p.dataDir) // postmaster and backends all work in the data folder
	err := p.proc.kill()
	p.proc = nil
	if err != nil {
		t.Fatalf("testenv: postgres on %s: kill: %v", p.Addr(), err)
	}
}

func (p *Postgres) shutdown(sig syscall.Signal, mode string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc == nil {
		return fmt.Errorf("postgres on %s: stop -m %s: not running", p.Addr(), mode)
	}
	err := p.proc.stop(sig, 60*time.Second)
	p.proc = nil
	// Backends exit on their own once the postmaster is gone; make sure none lingers on the
	// data folder before a restart.
	killProcessesUnder(p.dataDir)
	if err != nil {
		return fmt.Errorf("postgres on %s: stop -m %s: %w", p.Addr(), mode, err)
	}
	return nil
}

// Start starts a stopped or crashed server again on the same data and the same port, and waits
// until it accepts connections (after crash recovery, if any).
func (p *Postgres) Start(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		t.Fatalf("testenv: postgres on %s: start: already closed", p.Addr())
	}
	if p.proc != nil {
		t.Fatalf("testenv: postgres on %s: start: already running", p.Addr())
	}
	if err := p.start(); err != nil {
		t.Fatalf("testenv: postgres restart: %v", err)
	}
}

// Close stops the server (immediately: its data is thrown away) and removes its folder. It is
// safe to call more than once.
func (p *Postgres) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var stopErr error
	if p.proc != nil {
		stopErr = p.proc.stop(syscall.SIGQUIT, 30*time.Second)
		p.proc = nil
	}
	if err := removeInstanceDir(p.dir); err != nil {
		return errors.Join(stopErr, err)
	}
	if stopErr != nil {
		return fmt.Errorf("postgres on %s: close: %w", p.Addr(), stopErr)
	}
	return nil
}

// traversableByOthers checks that an unprivileged server user can reach dir: every ancestor
// must be searchable by others (a TMPDIR under /root would not be).
func traversableByOthers(dir string) error {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("testenv: stat %s: %w", d, err)
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("testenv: %s is not searchable by other users, so PostgreSQL (running as an unprivileged user) cannot reach its data under it; set TMPDIR to a folder such as /tmp", d)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
