package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/fakeprovider"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/keyset"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/storm"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// options are the demo's flags.
type options struct {
	callbackd                       string
	orders, duplicates, concurrency int
	replicas, lost                  int
	shuffle, json                   bool
	timeout                         time.Duration
	workDir, reportJSON             string
}

// channelSpec is one demo channel.
type channelSpec struct {
	name     string
	label    string // for people
	provider callbackdv1alpha1.Provider
	merchant callbackdv1alpha1.MerchantIdentity
}

// The demo's two channels, with made-up test merchant identities.
var demoChannels = []channelSpec{
	{name: "wechat", label: "WeChat Pay", provider: callbackdv1alpha1.ProviderWeChatPay,
		merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "1900000109", AppID: "wxd678efh567hg6787"}},
	{name: "alipay", label: "Alipay", provider: callbackdv1alpha1.ProviderAlipay,
		merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "2021000000000001", SellerID: "2088102146225135"}},
}

// demo holds what the run started, so that stopAll can stop it whatever happened.
type demo struct {
	opts options
	log  io.Writer

	dir        string
	removeDir  bool
	pg         *testenv.Postgres
	redis      *testenv.RedisGroup
	fake       *http.Server
	callbackd  []*process
	pids       Processes
	bases      []string // http://127.0.0.1:port of each callbackd replica
	apiToken   string
	httpClient *http.Client
}

// Processes are the process ids the demo started, reported so that a test can check that none
// is left once the demo has exited.
type Processes struct {
	Callbackd []int `json:"callbackd"`
	Postgres  int   `json:"postgres"`
	Redis     []int `json:"redis"`
}

func (d *demo) step(format string, args ...any) {
	fmt.Fprintf(d.log, "demo: "+format+"\n", args...)
}

// run starts everything, storms each channel and returns the report.
func (d *demo) run(ctx context.Context) (*Report, error) {
	if err := d.prepareDir(); err != nil {
		return nil, err
	}
	bin, err := d.callbackdBinary(ctx)
	if err != nil {
		return nil, err
	}

	d.step("starting PostgreSQL and Redis (1 master, 1 replica, 3 Sentinels) on loopback")
	if d.pg, err = testenv.NewPostgres(testenv.WithSetting("max_connections", "100")); err != nil {
		return nil, fmt.Errorf("start PostgreSQL: %w (run hack/deps.sh)", err)
	}
	d.pids.Postgres = d.pg.PID()
	if d.redis, err = testenv.NewRedis(testenv.RedisOptions{Replicas: 1, Sentinels: 3}); err != nil {
		return nil, fmt.Errorf("start Redis Sentinel: %w (run hack/deps.sh)", err)
	}
	d.pids.Redis = d.redis.PIDs()
	dsn, err := d.pg.CreateDatabase(ctx, "callbackd_demo")
	if err != nil {
		return nil, fmt.Errorf("create the database: %w", err)
	}
	d.step("%s; redis %s", d.pg, d.redis)

	d.step("generating test keys for %d channels", len(demoChannels))
	sets, err := d.generateKeys()
	if err != nil {
		return nil, err
	}
	fakeURL, fake, err := d.startFakeProvider(ctx, sets)
	if err != nil {
		return nil, err
	}
	token, err := randomToken()
	if err != nil {
		return nil, err
	}
	d.apiToken = token
	tokenFile := filepath.Join(d.dir, "api-tokens")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("write the API token file: %w", err)
	}

	cfg := config.File{
		Database:      config.Database{DSN: dsn, MaxConns: 16},
		Redis:         &config.Redis{SentinelAddrs: d.redis.SentinelAddrs(), MasterName: d.redis.MasterName},
		APITokensFile: tokenFile,
	}
	for _, set := range sets {
		ch := set.Channel(callbackdv1alpha1.ChannelSettings{
			// Point the active query path at the fake provider: nothing leaves loopback.
			Reconciliation: callbackdv1alpha1.Reconciliation{QueryBaseURL: fakeURL},
		})
		cfg.Channels = append(cfg.Channels, ch)
	}

	d.step("migrating the database (callbackd migrate)")
	if err := d.migrate(ctx, bin, cfg); err != nil {
		return nil, err
	}
	d.httpClient = storm.NewClient(d.opts.concurrency, storm.DefaultTimeout)
	for i := range d.opts.replicas {
		d.step("starting callbackd serve (replica %d of %d)", i+1, d.opts.replicas)
		if err := d.startCallbackd(ctx, bin, cfg, i); err != nil {
			return nil, err
		}
		d.step("callbackd replica %d (pid %d) is ready on %s", i+1, d.pids.Callbackd[i], d.bases[i])
	}

	rep := &Report{Orders: d.opts.orders, Duplicates: d.opts.duplicates, Concurrency: d.opts.concurrency, Shuffle: d.opts.shuffle, Replicas: d.opts.replicas}
	for i, set := range sets {
		cr, err := d.stormChannel(ctx, demoChannels[i], set, fake)
		if err != nil {
			return nil, err
		}
		rep.Channels = append(rep.Channels, cr)
	}

	gates := map[string]map[string]int64{}
	for _, base := range d.bases {
		replica, err := scrapeDuplicates(ctx, d.httpClient, base+"/metrics")
		if err != nil {
			return nil, err
		}
		for ch, byGate := range replica {
			if gates[ch] == nil {
				gates[ch] = map[string]int64{}
			}
			for g, n := range byGate {
				gates[ch][g] += n
			}
		}
	}
	books, err := readBooks(ctx, dsn)
	if err != nil {
		return nil, err
	}
	for i := range rep.Channels {
		c := &rep.Channels[i]
		c.DuplicatesStopped = gates[c.Name]
		c.Books = books[c.Name]
	}
	rep.finish()
	return rep, nil
}

// prepareDir creates the work folder (a temporary one unless --work-dir is given).
func (d *demo) prepareDir() error {
	if d.opts.workDir != "" {
		d.dir = d.opts.workDir
		return os.MkdirAll(d.dir, 0o700)
	}
	dir, err := os.MkdirTemp("", "callback-platform-demo-")
	if err != nil {
		return fmt.Errorf("create the work folder: %w", err)
	}
	d.dir, d.removeDir = dir, true
	return nil
}

// callbackdBinary returns --callbackd, or builds ./cmd/callbackd into the work folder.
func (d *demo) callbackdBinary(ctx context.Context) (string, error) {
	if d.opts.callbackd != "" {
		abs, err := filepath.Abs(d.opts.callbackd)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("--callbackd: %w (build it with `make build`)", err)
		}
		return abs, nil
	}
	d.step("building callbackd")
	bin := filepath.Join(d.dir, "callbackd")
	cmd := exec.CommandContext(ctx, goTool(), "build", "-o", bin, "github.com/seed-1cff2221/callback-platform/cmd/callbackd")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build callbackd: %w\n%s", err, out)
	}
	return bin, nil
}

// goTool is the go command of the running toolchain when GOROOT is set, otherwise the one on PATH.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	return "go"
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func (d *demo) generateKeys() ([]*keyset.Set, error) {
	var sets []*keyset.Set
	for _, c := range demoChannels {
		set, err := keyset.Generate(filepath.Join(d.dir, "keys", c.name), keyset.Spec{Channel: c.name, Provider: c.provider, Merchant: c.merchant})
		if err != nil {
			return nil, err
		}
		sets = append(sets, set)
	}
	return sets, nil
}

// startFakeProvider serves the fake query API in process on a loopback port.
func (d *demo) startFakeProvider(ctx context.Context, sets []*keyset.Set) (string, *fakeprovider.Server, error) {
	fake, err := fakeprovider.New(sets, fakeprovider.Options{})
	if err != nil {
		return "", nil, err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("listen for the fake provider: %w", err)
	}
	d.fake = &http.Server{Handler: fake, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = d.fake.Serve(ln) }()
	return "http://" + ln.Addr().String(), fake, nil
}

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate the API token: %w", err)
	}
	return "mapi_" + hex.EncodeToString(b), nil
}

// writeConfig writes cfg as JSON into the work folder.
func (d *demo) writeConfig(name string, cfg config.File) (string, error) {
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return "", fmt.Errorf("render the callbackd configuration: %w", err)
	}
	p := filepath.Join(d.dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		return "", fmt.Errorf("write the callbackd configuration: %w", err)
	}
	return p, nil
}

// callbackdEnv is this process's environment without CALLBACKD_ overrides, so that the
// configuration file decides.
func callbackdEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CALLBACKD_") {
			env = append(env, kv)
		}
	}
	return env
}

func (d *demo) migrate(ctx context.Context, bin string, cfg config.File) error {
	cfg.Listen = "127.0.0.1:0"
	path, err := d.writeConfig("migrate.json", cfg)
	if err != nil {
		return err
	}
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(mctx, bin, "migrate", "--config", path)
	cmd.Env = callbackdEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("callbackd migrate: %w\n%s", err, tail(string(out), 20))
	}
	return nil
}

// startCallbackd runs replica i of `callbackd serve` on a free loopback port and waits for
// /readyz. A port taken by someone else between choosing and binding it is retried.
func (d *demo) startCallbackd(ctx context.Context, bin string, cfg config.File, i int) error {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort(ctx)
		if err != nil {
			return err
		}
		cfg.Listen = fmt.Sprintf("127.0.0.1:%d", port)
		path, err := d.writeConfig(fmt.Sprintf("callbackd-%d-%d.json", i, attempt), cfg)
		if err != nil {
			return err
		}
		p, err := startProcess(ctx, bin, []string{"serve", "--config", path}, callbackdEnv(), filepath.Join(d.dir, fmt.Sprintf("callbackd-%d-%d.log", i, attempt)))
		if err != nil {
			return err
		}
		d.callbackd = append(d.callbackd, p)
		base := "http://" + cfg.Listen
		if lastErr = d.waitReady(ctx, p, base); lastErr == nil {
			d.bases = append(d.bases, base)
			d.pids.Callbackd = append(d.pids.Callbackd, p.pid())
			return nil
		}
		if stopErr := p.stop(15 * time.Second); stopErr != nil {
			return errors.Join(lastErr, stopErr)
		}
	}
	return lastErr
}

func (d *demo) waitReady(ctx context.Context, p *process, base string) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("callbackd exited before it was ready:\n%s", tail(p.log(), 20))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if resp, err := d.httpClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("callbackd was not ready within 60s:\n%s", tail(p.log(), 20))
}

// stormChannel registers the channel's orders, tells the fake provider they are paid, storms the
// channel, and lets the provider resend (on its schedule, compressed) the orders none of whose
// deliveries was acknowledged, as a real provider would. The notifications of --lost orders are
// never sent: the merchant's "check payment" (the active query path) must find them paid.
func (d *demo) stormChannel(ctx context.Context, c channelSpec, set *keyset.Set, fake *fakeprovider.Server) (ChannelReport, error) {
	cr := ChannelReport{Name: c.name, Label: c.label, Provider: c.provider}
	trades := storm.NewTrades("DEMO-"+strings.ToUpper(c.name), d.opts.orders, "CNY", time.Now())
	d.step("%s: registering %d orders through the merchant API", c.label, len(trades))
	merchant := storm.Merchant{BaseURL: d.bases[0], Token: d.apiToken, Client: d.httpClient}
	spec := storm.OrderSpec{Channel: c.name, MerchantID: c.merchant.MerchantID, SubMerchantID: c.merchant.SubMerchantID}
	if err := merchant.Register(ctx, spec, trades, 8); err != nil {
		return cr, err
	}
	for _, t := range trades {
		fake.Put(fakeprovider.Trade{Provider: c.provider, MerchantID: c.merchant.MerchantID, OutTradeNo: t.OrderNo,
			TransactionID: t.TransactionID, Amount: t.Amount, Currency: t.Currency, PaidAt: t.PaidAt})
	}
	// The first --lost orders are paid at the provider, but their notifications never arrive.
	lost := trades[:min(d.opts.lost, len(trades))]
	trades = trades[len(lost):]
	notifier, err := storm.NewNotifier(set)
	if err != nil {
		return cr, err
	}
	var targets []string
	for _, base := range d.bases {
		targets = append(targets, base+"/notify/"+c.name)
	}
	sender, err := storm.NewBalancedSender(notifier, targets, d.httpClient)
	if err != nil {
		return cr, err
	}
	d.step("%s: storm of %d notifications (%d orders × %d) at concurrency %d", c.label, len(trades)*d.opts.duplicates, len(trades), d.opts.duplicates, d.opts.concurrency)
	if cr.Storm, err = sender.Storm(ctx, storm.Config{Trades: trades, Duplicates: d.opts.duplicates, Concurrency: d.opts.concurrency, Shuffle: d.opts.shuffle}); err != nil {
		return cr, err
	}
	if len(cr.Storm.Unacknowledged) > 0 {
		var again []storm.Trade
		pending := map[string]bool{}
		for _, no := range cr.Storm.Unacknowledged {
			pending[no] = true
		}
		for _, t := range trades {
			if pending[t.OrderNo] {
				again = append(again, t)
			}
		}
		d.step("%s: the provider resends %d unacknowledged notifications on its schedule (time compressed 1000×)", c.label, len(again))
		schedule := config.WeChatPayRetrySchedule()
		if c.provider == callbackdv1alpha1.ProviderAlipay {
			schedule = config.AlipayRetrySchedule()
		}
		waits := make([]time.Duration, len(schedule))
		for i, s := range schedule {
			waits[i] = s.Duration
		}
		res, err := sender.Replay(ctx, storm.ReplayConfig{Trades: again, Schedule: waits, Compress: 1000, Concurrency: d.opts.concurrency})
		if err != nil {
			return cr, err
		}
		cr.Resends = &res.Summary
	}
	if len(lost) > 0 {
		d.step("%s: %d notifications were lost; the merchant presses \"check payment\" (POST /v1/orders/{order_no}/sync) for those orders", c.label, len(lost))
		cr.Lost = len(lost)
		for _, t := range lost {
			res, err := merchant.Sync(ctx, t.OrderNo)
			if err != nil {
				return cr, err
			}
			if res.Status == "PAID" && res.Action == "paid" {
				cr.FoundByQuery++
			}
		}
	}
	return cr, nil
}

// stopAll stops everything the demo started, in reverse order, and removes the work folder.
// It is safe to call whatever run got to.
func (d *demo) stopAll() error {
	var errs []error
	for _, p := range d.callbackd {
		d.step("stopping callbackd (pid %d)", p.pid())
		if err := p.stop(20 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if d.fake != nil {
		_ = d.fake.Close()
	}
	if d.redis != nil {
		d.step("stopping Redis")
		if err := d.redis.Close(); err != nil {
			errs = append(errs, fmt.Errorf("stop Redis: %w", err))
		}
	}
	if d.pg != nil {
		d.step("stopping PostgreSQL")
		if err := d.pg.Close(); err != nil {
			errs = append(errs, fmt.Errorf("stop PostgreSQL: %w", err))
		}
	}
	d.step("stopped callbackd (pids %s), PostgreSQL (pid %d), Redis (pids %s)", joinInts(d.pids.Callbackd), d.pids.Postgres, joinInts(d.pids.Redis))
	if d.removeDir && d.dir != "" {
		if err := os.RemoveAll(d.dir); err != nil {
			errs = append(errs, fmt.Errorf("remove the work folder: %w", err))
		}
	}
	return errors.Join(errs...)
}

func joinInts(vs []int) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, " ")
}

func freePort(ctx context.Context) (int, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// process is a child process with its output in a log file.
type process struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
}

// startProcess starts bin. When ctx ends (Ctrl-C, the demo's timeout) the process gets SIGTERM
// at once, the start of its graceful drain; stop then waits for it.
func startProcess(ctx context.Context, bin string, args, env []string, logPath string) (*process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", logPath, err)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", filepath.Base(bin), err)
	}
	p := &process{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// stop sends SIGTERM, waits up to grace for the drain, then kills the process group.
func (p *process) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	<-p.done
	return fmt.Errorf("callbackd did not stop within %v of SIGTERM and was killed", grace)
}
