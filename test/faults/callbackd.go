package faults

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/internal/promtext"
)

// Environment switches of the faultinject build of callbackd (see callbackd/store/faultinject.go
// and callbackd/gate/faultinject.go); they do not exist in the normal binary.
const (
	EnvRedisAddrMap     = "CALLBACKD_FAULTINJECT_REDIS_ADDR_MAP"
	EnvUnguardedUpdate  = "CALLBACKD_FAULTINJECT_UNGUARDED_UPDATE"
	EnvAfterOrderRead   = "CALLBACKD_FAULTINJECT_AFTER_ORDER_READ"
	EnvAsyncCommit      = "CALLBACKD_FAULTINJECT_ASYNC_COMMIT"
	defaultRedisTimeout = 100 * time.Millisecond
)

// CallbackdOptions shape one callbackd process.
type CallbackdOptions struct {
	// Env holds extra environment variables, e.g. EnvUnguardedUpdate+"=1" for a negative control.
	Env []string
	// NoRedis runs this process without Redis even when the Env has it.
	NoRedis bool
	// RedisTimeout is callbackd's per-operation Redis budget (default 100ms).
	RedisTimeout time.Duration
}

// Links are one callbackd process's network links to the stores, each through its own proxy.
type Links struct {
	// PG is the link to PostgreSQL.
	PG *Proxy
	// Redis are the links to the data nodes, by node index (Env.Redis.Nodes() order).
	Redis []*Proxy
	// Sentinels are the links to the Sentinels, in Env.Redis.Sentinels() order.
	Sentinels []*Proxy
}

// All returns every link.
func (l *Links) All() []*Proxy {
	out := []*Proxy{l.PG}
	out = append(out, l.Redis...)
	return append(out, l.Sentinels...)
}

// RedisSide returns the Redis data-node and Sentinel links.
func (l *Links) RedisSide() []*Proxy {
	return append(append([]*Proxy(nil), l.Redis...), l.Sentinels...)
}

// SetMode sets the mode of every given link.
func SetMode(m LinkMode, links ...*Proxy) {
	for _, p := range links {
		p.SetMode(m)
	}
}

// Callbackd is one running `callbackd serve` process of the faultinject build.
type Callbackd struct {
	Name  string
	Base  string // http://127.0.0.1:port
	Links *Links

	env     *Env
	cfgPath string
	logPath string
	extra   []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
}

// StartCallbackd starts a callbackd process whose PostgreSQL, Redis and Sentinel connections
// go through fresh proxies (its Links), and waits until /readyz answers 200. It is stopped when
// the test ends; if the test failed, the tail of its log is printed (secrets redacted).
func (e *Env) StartCallbackd(name string, opts CallbackdOptions) *Callbackd {
	e.T.Helper()
	return e.startCallbackd(name, "postgres", e.PG.Addr(), opts)
}

// startCallbackd is StartCallbackd with the PostgreSQL link's upstream given: PostgreSQL itself,
// or a wire-aware proxy in front of it (StartCallbackdPG). what names the link in proxy names.
func (e *Env) startCallbackd(name, what, pgUpstream string, opts CallbackdOptions) *Callbackd {
	t := e.T
	t.Helper()
	links := &Links{}
	newProxy := func(what, upstream string) *Proxy {
		p, err := NewProxy(name+"→"+what, upstream)
		if err != nil {
			t.Fatalf("%v", err)
		}
		t.Cleanup(func() { _ = p.Close() })
		return p
	}
	links.PG = newProxy(what, pgUpstream)
	var r *config.Redis
	var extra []string
	if e.Redis != nil && !opts.NoRedis {
		var mapping []string
		for i, n := range e.Redis.Nodes() {
			p := newProxy(fmt.Sprintf("redis-%d", i), n.Addr)
			links.Redis = append(links.Redis, p)
			mapping = append(mapping, e.announced(i)+"="+p.Addr())
		}
		var sentinels []string
		for i, s := range e.Redis.Sentinels() {
			p := newProxy(fmt.Sprintf("sentinel-%d", i), s.Addr)
			links.Sentinels = append(links.Sentinels, p)
			sentinels = append(sentinels, p.Addr())
		}
		timeout := opts.RedisTimeout
		if timeout <= 0 {
			timeout = defaultRedisTimeout
		}
		r = &config.Redis{SentinelAddrs: sentinels, MasterName: e.Redis.MasterName}
		r.Timeout.Duration = timeout
		extra = append(extra, EnvRedisAddrMap+"="+strings.Join(mapping, ","))
	}
	extra = append(extra, opts.Env...)

	c := &Callbackd{Name: name, Links: links, env: e, extra: extra}
	var lastErr error
	for attempt := range 3 { // a free port can be taken before callbackd binds it
		port := freePort(t)
		listen := fmt.Sprintf("127.0.0.1:%d", port)
		c.Base = "http://" + listen
		c.cfgPath = e.writeConfig(t, fmt.Sprintf("%s-%d", name, attempt), listen, proxiedDSN(t, e.DSN, links.PG.Addr()), r)
		c.logPath = filepath.Join(e.dir, fmt.Sprintf("%s-%d.log", name, attempt))
		if lastErr = c.start(); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("start callbackd %s: %v", name, lastErr)
	}
	t.Cleanup(func() {
		c.Stop(t)
		if t.Failed() {
			t.Logf("callbackd %s log (tail):\n%s", name, e.Redact(tailString(c.Log(), 30)))
		}
	})
	e.mu.Lock()
	e.instances = append(e.instances, c)
	e.mu.Unlock()
	return c
}

// start runs the process and waits for /readyz.
func (c *Callbackd) start() error {
	logFile, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open log file: %w", err)
	}
	// The process outlives any one request context: Kill, Pause and Stop manage its lifetime.
	cmd := exec.CommandContext(context.Background(), CallbackdBin, "serve", "--config", c.cfgPath)
	cmd.Env = callbackdEnv(c.extra)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("exec: %w", err)
	}
	exited := make(chan struct{})
	c.mu.Lock()
	c.cmd, c.exited = cmd, exited
	c.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logFile.Close()
		c.mu.Lock()
		c.waitErr = err
		c.mu.Unlock()
		close(exited)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("callbackd exited before ready (%w); log:\n%s", c.waitErr, c.env.Redact(tailString(c.Log(), 20)))
		default:
		}
		if code, err := c.Get("/readyz"); err == nil && code == http.StatusOK {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-exited
	return fmt.Errorf("callbackd not ready within 60s; log:\n%s", c.env.Redact(tailString(c.Log(), 20)))
}

// Running reports whether the process runs (a paused one counts as running).
func (c *Callbackd) Running() bool {
	c.mu.Lock()
	ch := c.exited
	c.mu.Unlock()
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

// Signal sends sig to the process.
func (c *Callbackd) Signal(sig syscall.Signal) error {
	c.mu.Lock()
	cmd := c.cmd
	c.mu.Unlock()
	if err := cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s to callbackd %s: %w", sig, c.Name, err)
	}
	return nil
}

// Kill SIGKILLs the process and waits for it to exit.
func (c *Callbackd) Kill(t testing.TB) {
	t.Helper()
	if !c.Running() {
		return
	}
	_ = c.Signal(syscall.SIGCONT) // a paused process dies as well, but do not leave it stopped
	if err := c.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("%v", err)
	}
	<-c.exited
}

// Pause freezes the process (SIGSTOP); Resume continues it.
func (c *Callbackd) Pause(t testing.TB) {
	t.Helper()
	if err := c.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("%v", err)
	}
}

// Resume continues a paused process (SIGCONT).
func (c *Callbackd) Resume(t testing.TB) {
	t.Helper()
	if err := c.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("%v", err)
	}
}

// Stop sends SIGTERM (after SIGCONT, in case it is paused) and waits for the graceful drain,
// then kills.
func (c *Callbackd) Stop(t testing.TB) {
	if !c.Running() {
		return
	}
	_ = c.Signal(syscall.SIGCONT)
	_ = c.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(20 * time.Second):
		t.Errorf("callbackd %s did not stop within 20s of SIGTERM; killing it", c.Name)
		_ = c.Signal(syscall.SIGKILL)
		<-c.exited
	}
}

// Restart starts the process again (same configuration, port and links) after it stopped or
// was killed, and waits until it is ready.
func (c *Callbackd) Restart(t testing.TB) {
	t.Helper()
	if c.Running() {
		t.Fatalf("restart callbackd %s: it is still running", c.Name)
	}
	if err := c.start(); err != nil {
		t.Fatalf("restart callbackd %s: %v", c.Name, err)
	}
}

// Log returns everything the process wrote so far.
func (c *Callbackd) Log() string {
	b, _ := os.ReadFile(c.logPath)
	return string(b)
}

// Get issues a GET of path and returns the status code.
func (c *Callbackd) Get(path string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// Metrics scrapes this process's /metrics; an unreachable process yields an error naming it.
func (c *Callbackd) Metrics() (promtext.Families, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := promtext.Scrape(ctx, httpClient, c.Base+"/metrics")
	if err != nil {
		return nil, fmt.Errorf("callbackd %s: %w", c.Name, err)
	}
	return m, nil
}

var httpClient = &http.Client{
	Timeout: 15 * time.Second,
	Transport: &http.Transport{
		Proxy:               nil, // loopback only, never through a proxy from the environment
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 128,
		IdleConnTimeout:     30 * time.Second,
	},
}

func freePort(t testing.TB) int {
	t.Helper()
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free loopback port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func tailString(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
