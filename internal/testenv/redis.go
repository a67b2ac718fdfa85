package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisReadyTimeout bounds how long a Redis group may take to come up (replication linked,
// Sentinels aware of every replica and of each other).
const redisReadyTimeout = 60 * time.Second

// DefaultMasterName is the name Sentinels monitor the master under unless RedisOptions says
// otherwise.
const DefaultMasterName = "testenv-master"

// RedisOptions shapes a Redis group. The zero value is one plain Redis server.
type RedisOptions struct {
	// Replicas is the number of replicas of the master (replicaof).
	Replicas int
	// Sentinels is the number of Sentinels monitoring the master (3 is typical; the quorum is a
	// majority of them).
	Sentinels int
	// MasterName is the name the Sentinels monitor the master under (default DefaultMasterName).
	MasterName string
	// DownAfter is Sentinel's down-after-milliseconds (default 1 s), so that a failover in a
	// test completes in a few seconds.
	DownAfter time.Duration
	// FailoverTimeout is Sentinel's failover-timeout (default 3 s).
	FailoverTimeout time.Duration
	// Persistence turns on the append-only file (appendfsync everysec); by default nothing is
	// written to disk (save "", appendonly no).
	Persistence bool
	// Config holds extra redis.conf lines for the data nodes, e.g. "maxmemory 64mb".
	Config []string
}

// RedisGroup is a throwaway Redis master with optional replicas and Sentinels on 127.0.0.1.
type RedisGroup struct {
	// MasterName is the name the Sentinels monitor the master under.
	MasterName string

	opts      RedisOptions
	version   string
	bin       string
	dir       string
	nodes     []*RedisNode
	sentinels []*RedisNode
	closeOnce sync.Once
	closeErr  error
}

// RedisNode is one redis-server process of a group: a data node (master or replica) or a
// Sentinel. It keeps its port and configuration file across Stop/Kill and Restart.
type RedisNode struct {
	// Addr is the node's host:port on 127.0.0.1.
	Addr string

	name     string // "redis-0", "sentinel-1", ...
	sentinel bool
	bin      string
	dir      string
	confPath string
	logPath  string

	mu   sync.Mutex
	proc *process // nil while stopped
}

// StartRedis starts a Redis group for t: a master, opts.Replicas replicas replicating from it,
// and opts.Sentinels Sentinels monitoring it, and waits until replication is linked and every
// Sentinel knows every replica and every other Sentinel (so a failover can start at once). It is
// removed when t ends; if t failed, the tail of each node's log is logged first.
func StartRedis(t testing.TB, opts RedisOptions) *RedisGroup {
	t.Helper()
	g, err := NewRedis(opts)
	if err != nil {
		t.Fatalf("testenv: start Redis: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range g.allNodes() {
				t.Logf("testenv: tail of the %s log (%s):\n%s", n.name, n.Addr, n.LogTail(20))
			}
		}
		if err := g.Close(); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	return g
}

// NewRedis starts a Redis group outside any test, for TestMain; the caller must Close it.
func NewRedis(opts RedisOptions) (*RedisGroup, error) {
	if opts.Replicas < 0 || opts.Sentinels < 0 {
		return nil, fmt.Errorf("testenv: Redis: negative replicas (%d) or sentinels (%d)", opts.Replicas, opts.Sentinels)
	}
	if opts.MasterName == "" {
		opts.MasterName = DefaultMasterName
	}
	if opts.DownAfter <= 0 {
		opts.DownAfter = time.Second
	}
	if opts.FailoverTimeout <= 0 {
		opts.FailoverTimeout = 3 * time.Second
	}
	bin, err := findRedisServer()
	if err != nil {
		return nil, err
	}
	dir, err := newInstanceDir()
	if err != nil {
		return nil, err
	}
	g := &RedisGroup{MasterName: opts.MasterName, opts: opts, version: binaryVersion(bin), bin: bin, dir: dir}
	if err := g.setUp(); err != nil {
		_ = g.Close()
		return nil, err
	}
	return g, nil
}

func (g *RedisGroup) setUp() error {
	ctx, cancel := context.WithTimeout(context.Background(), redisReadyTimeout)
	defer cancel()
	master, err := g.startNode(ctx, "redis-0", false, func(port int) []string { return g.dataConfig(port, "") })
	if err != nil {
		return err
	}
	g.nodes = append(g.nodes, master)
	for i := 1; i <= g.opts.Replicas; i++ {
		replicaOf := "127.0.0.1 " + strconv.Itoa(master.port())
		n, err := g.startNode(ctx, fmt.Sprintf("redis-%d", i), false, func(port int) []string { return g.dataConfig(port, replicaOf) })
		if err != nil {
			return err
		}
		g.nodes = append(g.nodes, n)
	}
	for _, n := range g.nodes[1:] {
		if err := waitReplicaLinked(ctx, n.Addr); err != nil {
			return fmt.Errorf("testenv: %s: %w\n%s", n.name, err, n.LogTail(20))
		}
	}
	for i := range g.opts.Sentinels {
		n, err := g.startNode(ctx, fmt.Sprintf("sentinel-%d", i), true, func(port int) []string { return g.sentinelConfig(port, master.port()) })
		if err != nil {
			return err
		}
		g.sentinels = append(g.sentinels, n)
	}
	for _, s := range g.sentinels {
		if err := g.waitSentinelAware(ctx, s); err != nil {
			return fmt.Errorf("testenv: %s: %w\n%s", s.name, err, s.LogTail(20))
		}
	}
	return nil
}

// dataConfig returns redis.conf lines for a data node.
func (g *RedisGroup) dataConfig(port int, replicaOf string) []string {
	// A master waits repl-diskless-sync-delay (5 s by default) for more replicas before a full
	// sync; tests attach replicas one by one and should not wait.
	lines := append(g.commonConfig(port), "repl-diskless-sync-delay 0")
	if g.opts.Persistence {
		lines = append(lines, "appendonly yes", "appendfsync everysec", `save ""`)
	} else {
		lines = append(lines, "appendonly no", `save ""`)
	}
	if replicaOf != "" {
		lines = append(lines, "replicaof "+replicaOf)
	}
	return append(lines, g.opts.Config...)
}

// sentinelConfig returns sentinel.conf lines monitoring the master on masterPort.
func (g *RedisGroup) sentinelConfig(port, masterPort int) []string {
	name := g.MasterName
	quorum := g.opts.Sentinels/2 + 1
	return append(g.commonConfig(port),
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", name, masterPort, quorum),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", name, g.opts.DownAfter.Milliseconds()),
		fmt.Sprintf("sentinel failover-timeout %s %d", name, g.opts.FailoverTimeout.Milliseconds()),
		fmt.Sprintf("sentinel parallel-syncs %s 1", name),
	)
}

func (g *RedisGroup) commonConfig(port int) []string {
	return []string{
		"bind 127.0.0.1",
		"port " + strconv.Itoa(port),
		"protected-mode no",
		"daemonize no",
		`logfile ""`,
		"loglevel notice",
	}
}

// startNode writes the node's configuration for a free port and starts it, retrying on a port
// clash.
func (g *RedisGroup) startNode(ctx context.Context, name string, sentinel bool, config func(port int) []string) (*RedisNode, error) {
	nodeDir := filepath.Join(g.dir, name)
	if err := os.Mkdir(nodeDir, 0o755); err != nil {
		return nil, fmt.Errorf("testenv: create %s folder: %w", name, err)
	}
	n := &RedisNode{
		name:     name,
		sentinel: sentinel,
		bin:      g.bin,
		dir:      nodeDir,
		confPath: filepath.Join(nodeDir, "redis.conf"),
		logPath:  filepath.Join(nodeDir, "redis.log"),
	}
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		n.Addr = loopbackAddr(port)
		conf := append(config(port), "dir "+quoteRedis(nodeDir))
		if err := os.WriteFile(n.confPath, []byte(strings.Join(conf, "\n")+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("testenv: write %s config: %w", name, err)
		}
		lastErr = n.start(ctx)
		if lastErr == nil {
			return n, nil
		}
		if !portClash(n.LogTail(20)) {
			break
		}
	}
	return nil, lastErr
}

// quoteRedis quotes a redis.conf argument the way redis.conf parses it (sdssplitargs): in double
// quotes, a backslash or a quote is escaped with a backslash and every byte outside printable
// ASCII is written as \xHH.
func quoteRedis(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "\\x%02x", c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// start launches the node from its configuration file and waits until it answers PING.
func (n *RedisNode) start(ctx context.Context) error {
	args := []string{n.confPath}
	if n.sentinel {
		args = append(args, "--sentinel")
	}
	proc, err := startProcess(procSpec{
		name:    n.name,
		path:    n.bin,
		args:    args,
		dir:     n.dir,
		env:     childEnv(),
		logPath: n.logPath,
	})
	if err != nil {
		return err
	}
	if err := waitPing(ctx, n.Addr, proc); err != nil {
		_ = proc.kill()
		return fmt.Errorf("testenv: %s on %s: %w\n%s", n.name, n.Addr, err, proc.logTail(20))
	}
	n.proc = proc
	return nil
}

// waitPing polls addr with PING until it answers, the process exits or ctx ends.
func waitPing(ctx context.Context, addr string, proc *process) error {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, MaxRetries: -1, PoolSize: 1})
	defer c.Close()
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		if proc.exited() {
			return fmt.Errorf("exited during start-up: %w", proc.exitErr())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not answering PING: %w", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitReplicaLinked waits until the replica at addr reports master_link_status:up.
func waitReplicaLinked(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1})
	defer c.Close()
	for {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && infoField(info, "master_link_status") == "up" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replication link not up (master_link_status %q): %w", infoField(info, "master_link_status"), errors.Join(ctx.Err(), err))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitSentinelAware waits until Sentinel s lists every replica and every other Sentinel.
func (g *RedisGroup) waitSentinelAware(ctx context.Context, s *RedisNode) error {
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, PoolSize: 1})
	defer c.Close()
	wantReplicas, wantSentinels := len(g.nodes)-1, len(g.sentinels)-1
	var gotReplicas, gotSentinels int
	for {
		if r, err := c.Replicas(ctx, g.MasterName).Result(); err == nil {
			gotReplicas = len(r)
		}
		if r, err := c.Sentinels(ctx, g.MasterName).Result(); err == nil {
			gotSentinels = len(r)
		}
		if gotReplicas >= wantReplicas && gotSentinels >= wantSentinels {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sentinel knows %d of %d replicas and %d of %d other sentinels: %w",
				gotReplicas, wantReplicas, gotSentinels, wantSentinels, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// infoField returns a field of an INFO reply ("" when absent).
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// Nodes returns the data nodes: the initial master first, then the replicas. Roles change on
// failover; ask MasterAddr for the current master.
func (g *RedisGroup) Nodes() []*RedisNode { return append([]*RedisNode(nil), g.nodes...) }

// Sentinels returns the Sentinel nodes.
func (g *RedisGroup) Sentinels() []*RedisNode { return append([]*RedisNode(nil), g.sentinels...) }

// SentinelAddrs returns the Sentinels' host:port addresses (empty without Sentinels).
func (g *RedisGroup) SentinelAddrs() []string {
	addrs := make([]string, len(g.sentinels))
	for i, s := range g.sentinels {
		addrs[i] = s.Addr
	}
	return addrs
}

// Version returns the redis-server version, e.g. "7.0.15".
func (g *RedisGroup) Version() string { return g.version }

// String describes the group for test logs, e.g.
// "redis 7.0.15: master 127.0.0.1:1, 1 replica, 3 sentinels (master name testenv-master)".
func (g *RedisGroup) String() string {
	return fmt.Sprintf("redis %s: master %s, %d replica(s), %d sentinel(s) (master name %s)",
		g.version, g.nodes[0].Addr, len(g.nodes)-1, len(g.sentinels), g.MasterName)
}

// MasterAddr returns the current master's address as the first answering Sentinel reports it
// (SENTINEL get-master-addr-by-name), or the initial master's address in a group without
// Sentinels. It returns "" when no Sentinel answers.
func (g *RedisGroup) MasterAddr() string {
	if len(g.sentinels) == 0 {
		return g.nodes[0].Addr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range g.sentinels {
		if addr, err := sentinelMaster(ctx, s.Addr, g.MasterName); err == nil {
			return addr
		}
	}
	return ""
}

func sentinelMaster(ctx context.Context, sentinelAddr, name string) (string, error) {
	c := redis.NewSentinelClient(&redis.Options{Addr: sentinelAddr, DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1, PoolSize: 1})
	defer c.Close()
	hp, err := c.GetMasterAddrByName(ctx, name).Result()
	if err != nil {
		return "", fmt.Errorf("sentinel %s: get-master-addr-by-name %s: %w", sentinelAddr, name, err)
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("sentinel %s: get-master-addr-by-name %s: unexpected reply %q", sentinelAddr, name, hp)
	}
	return hp[0] + ":" + hp[1], nil
}

// WaitForMaster waits until a majority of the Sentinels name a master other than notAddr and
// that node itself reports role:master, then returns its address. It fails t after timeout.
// Use it after stopping or killing the master to wait for the failover.
func (g *RedisGroup) WaitForMaster(t testing.TB, notAddr string, timeout time.Duration) string {
	t.Helper()
	addr, err := g.waitForMaster(notAddr, timeout)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return addr
}

func (g *RedisGroup) waitForMaster(notAddr string, timeout time.Duration) (string, error) {
	if len(g.sentinels) == 0 {
		return "", errors.New("wait for master: the group has no Sentinels")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	majority := len(g.sentinels)/2 + 1
	var last map[string]int
	for {
		votes := map[string]int{}
		for _, s := range g.sentinels {
			if addr, err := sentinelMaster(ctx, s.Addr, g.MasterName); err == nil {
				votes[addr]++
			}
		}
		last = votes
		for addr, n := range votes {
			if addr != notAddr && n >= majority && isMaster(ctx, addr) {
				return addr, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("wait for a master other than %s: none after %s (sentinel answers: %v)", notAddr, timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// isMaster reports whether the node at addr answers INFO replication with role:master.
func isMaster(ctx context.Context, addr string) bool {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1, PoolSize: 1})
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	return err == nil && infoField(info, "role") == "master"
}

// Close kills every node and removes the group's folder. It is safe to call more than once.
func (g *RedisGroup) Close() error {
	g.closeOnce.Do(func() {
		var errs []error
		// Sentinels first, so that they do not start a failover while the data nodes go.
		for _, n := range append(g.Sentinels(), g.nodes...) {
			if err := n.halt(); err != nil {
				errs = append(errs, err)
			}
		}
		if err := removeInstanceDir(g.dir); err != nil {
			errs = append(errs, err)
		}
		g.closeErr = errors.Join(errs...)
	})
	return g.closeErr
}

func (g *RedisGroup) allNodes() []*RedisNode { return append(g.Nodes(), g.sentinels...) }

// port returns the node's TCP port.
func (n *RedisNode) port() int {
	_, p, _ := strings.Cut(n.Addr, ":")
	v, _ := strconv.Atoi(p)
	return v
}

// String describes the node, e.g. "redis-1 on 127.0.0.1:40001".
func (n *RedisNode) String() string { return n.name + " on " + n.Addr }

// LogTail returns the last lines of the node's log.
func (n *RedisNode) LogTail(lines int) string { return tailFile(n.logPath, lines) }

// Running reports whether the node's process is running (a paused one counts as running).
func (n *RedisNode) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc != nil && !n.proc.exited()
}

// Stop shuts the node down cleanly (SIGTERM: no snapshot unless persistence is on) and waits
// for it to exit.
func (n *RedisNode) Stop(t testing.TB) {
	t.Helper()
	if err := n.terminate(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

// Kill kills the node with SIGKILL, as a crashed machine would look, and waits for the exit.
func (n *RedisNode) Kill(t testing.TB) {
	t.Helper()
	if err := n.terminate(syscall.SIGKILL, 10*time.Second); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

// Pause freezes the node with SIGSTOP: its port stays open but nothing answers, like a node
// stuck in a long GC or a network partition. Resume undoes it.
func (n *RedisNode) Pause(t testing.TB) {
	t.Helper()
	if err := n.sendSignal(syscall.SIGSTOP); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

// Resume continues a paused node (SIGCONT).
func (n *RedisNode) Resume(t testing.TB) {
	t.Helper()
	if err := n.sendSignal(syscall.SIGCONT); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

// Restart stops the node if it runs, then starts it again on the same port from its
// configuration file, which Redis and Sentinel rewrite as roles change (a master demoted by a
// failover comes back as a replica). It waits until the node answers PING.
func (n *RedisNode) Restart(t testing.TB) {
	t.Helper()
	if err := n.terminate(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), redisReadyTimeout)
	defer cancel()
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.start(ctx); err != nil {
		t.Fatalf("testenv: restart: %v", err)
	}
}

func (n *RedisNode) sendSignal(sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil || n.proc.exited() {
		return fmt.Errorf("%s: signal %v: not running", n, sig)
	}
	return n.proc.signal(sig)
}

// terminate sends sig (after SIGCONT, so that a paused node can act on it) and waits up to
// grace before killing. A node that is not running is left as it is.
func (n *RedisNode) terminate(sig syscall.Signal, grace time.Duration) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return nil
	}
	_ = n.proc.signal(syscall.SIGCONT)
	err := n.proc.stop(sig, grace)
	n.proc = nil
	if err != nil {
		return fmt.Errorf("%s: %w", n, err)
	}
	return nil
}

// halt kills the node for good (cleanup: its data is thrown away).
func (n *RedisNode) halt() error {
	return n.terminate(syscall.SIGKILL, 10*time.Second)
}
