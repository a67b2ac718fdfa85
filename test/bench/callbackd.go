package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/metrics"
)

// replica is one running `callbackd serve`.
type replica struct {
	name      string
	proc      *process
	base      string // http://127.0.0.1:port
	pprofAddr string // 127.0.0.1:port of the profiling listener
}

// notifyURL is the benchmark channel's provider-facing URL on this replica.
func (r *replica) notifyURL() string { return r.base + "/notify/" + channelName }

// benchConfig is callbackd's configuration for the benchmark: the normal one (PostgreSQL, Redis
// through Sentinel, default limits and TTLs), with the reconciler's provider queries switched off
// and pointed at a closed loopback port, so nothing ever leaves the machine.
func benchConfig(dsn string, sentinels []string, master string, channel config.Channel, maxConns int32) config.File {
	off := false
	channel.Reconciliation = callbackdv1alpha1.Reconciliation{Enabled: &off, QueryBaseURL: "http://127.0.0.1:9"}
	cfg := config.File{
		Database: config.Database{DSN: dsn, MaxConns: maxConns},
		Channels: []config.Channel{channel},
	}
	if len(sentinels) > 0 {
		cfg.Redis = &config.Redis{SentinelAddrs: sentinels, MasterName: master}
	}
	return cfg
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: encode %s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	return nil
}

// migrate runs `callbackd migrate` with cfg.
func migrate(ctx context.Context, bin, dir string, cfg config.File) error {
	cfg.Listen = "127.0.0.1:0"
	path := filepath.Join(dir, "migrate.json")
	if err := writeJSON(path, cfg); err != nil {
		return err
	}
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := execCommand(mctx, bin, "migrate", "--config", path)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("bench: callbackd migrate: %w\n%s", err, tail(string(out), 20))
	}
	return nil
}

// startReplica starts `callbackd serve` on free loopback ports and waits for /readyz.
func startReplica(ctx context.Context, bin, dir, name string, cfg config.File) (*replica, error) {
	var lastErr error
	for attempt := range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		pport, err := freePort()
		if err != nil {
			return nil, err
		}
		cfg.Listen = fmt.Sprintf("127.0.0.1:%d", port)
		path := filepath.Join(dir, fmt.Sprintf("%s-%d.json", name, attempt))
		if err := writeJSON(path, cfg); err != nil {
			return nil, err
		}
		r := &replica{name: name, base: "http://" + cfg.Listen, pprofAddr: fmt.Sprintf("127.0.0.1:%d", pport)}
		env := append(cleanEnv(), "CALLBENCH_PPROF_ADDR="+r.pprofAddr)
		p, err := startProcess(name, bin, []string{"serve", "--config", path, "--log-level", "warn"}, env,
			filepath.Join(dir, fmt.Sprintf("%s-%d.log", name, attempt)))
		if err != nil {
			return nil, err
		}
		r.proc = p
		if lastErr = waitHTTP(ctx, p, r.base+"/readyz", 60*time.Second); lastErr == nil {
			return r, nil
		}
		_ = p.stop(10 * time.Second)
	}
	return nil, lastErr
}

// gateCounts are callbackd_duplicates_stopped_total by gate (window, redis, database), summed
// over channels.
type gateCounts map[string]int64

// sub returns c - before, gate by gate.
func (c gateCounts) sub(before gateCounts) gateCounts {
	out := gateCounts{}
	for g, n := range c {
		out[g] = n - before[g]
	}
	return out
}

func (c gateCounts) total() int64 {
	return c["window"] + c["redis"] + c["database"]
}

// contentionKey holds callbackd_lock_contention_total in a gateCounts: callbacks that found their
// key claimed by another request in flight (not a gate; not part of total).
const contentionKey = "lock_contention"

var gateLabel = regexp.MustCompile(`gate="([^"]*)"`)

// scrapeGates reads the duplicate counters of the replicas and sums them.
func scrapeGates(ctx context.Context, replicas ...*replica) (gateCounts, error) {
	out := gateCounts{}
	client := &http.Client{Timeout: 5 * time.Second}
	for _, r := range replicas {
		if r == nil || r.proc.exited() {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+"/metrics", nil)
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("bench: scrape %s metrics: %w", r.name, err)
		}
		err = parseGates(resp.Body, out)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("bench: scrape %s metrics: %w", r.name, err)
		}
	}
	return out, nil
}

// parseGates adds the callbackd_duplicates_stopped_total samples of a Prometheus text exposition
// to out, by gate.
func parseGates(r io.Reader, out gateCounts) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	prefix := metrics.DuplicatesStoppedTotal + "{"
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, metrics.LockContentionTotal+"{"); ok {
			if end := strings.LastIndexByte(rest, '}'); end >= 0 {
				if f := strings.Fields(rest[end+1:]); len(f) > 0 {
					v, err := strconv.ParseFloat(f[0], 64)
					if err != nil {
						return fmt.Errorf("value of %q: %w", line, err)
					}
					out[contentionKey] += int64(v)
				}
			}
			continue
		}
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		m := gateLabel.FindStringSubmatch(line)
		fields := strings.Fields(line[end+1:])
		if end < 0 || m == nil || len(fields) == 0 {
			return fmt.Errorf("malformed sample %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return fmt.Errorf("value of %q: %w", line, err)
		}
		out[m[1]] += int64(v)
	}
	return sc.Err()
}

// cpuProfile takes a CPU profile of a replica for d (while a load runs) and saves it into dir as
// name.pprof, returning the path.
func cpuProfile(ctx context.Context, r *replica, dir, name string, d time.Duration) (string, error) {
	secs := max(1, int(d.Seconds()))
	client := &http.Client{Timeout: d + 30*time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", r.pprofAddr, secs), nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("bench: profile %s: %w", r.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("bench: profile %s: HTTP %d", r.name, resp.StatusCode)
	}
	path := filepath.Join(dir, name+".pprof")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return "", fmt.Errorf("bench: save profile: %w", err)
	}
	return path, f.Close()
}

// pprofTop returns the top entries of `go tool pprof -top` of a saved profile, headed by how busy
// callbackd was while the load ran (window: the part of the profile during which it ran).
func pprofTop(ctx context.Context, bin, path string, window time.Duration) (string, error) {
	if path == "" {
		return "", nil
	}
	out, err := execCommand(ctx, goTool(), "tool", "pprof", "-top", "-nodecount=15", bin, path).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("bench: go tool pprof -top: %w\n%s", err, tail(string(out), 10))
	}
	// Keep the summary and the table; drop the file and build-id lines.
	var keep []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(line, "File:") || strings.HasPrefix(line, "Build ID:") {
			continue
		}
		keep = append(keep, line)
	}
	top := strings.Join(keep, "\n")
	m := samplesLine.FindStringSubmatch(top)
	if m == nil || window <= 0 {
		return top, nil
	}
	samples, perr := time.ParseDuration(m[1])
	if perr != nil {
		// Without the sample total there is no busy share to add; the profile itself stands.
		return top, nil //nolint:nilerr // the verdict is optional decoration of a valid profile
	}
	busy := 100 * samples.Seconds() / window.Seconds()
	verdict := "it was off CPU most of the time, waiting for PostgreSQL, Redis, its clients, or a CPU of its own on a shared machine (see the load average above): the CPU entries below are not what limits it"
	if busy >= 100 {
		verdict = "it was computing: the entries below are where the time goes"
	}
	return fmt.Sprintf("During the load (%.1f s of the profile), callbackd was on CPU %.0f%% of the time (100%% = one core busy): %s.\n\n%s",
		window.Seconds(), busy, verdict, top), nil
}

var samplesLine = regexp.MustCompile(`Total samples = ([0-9.]+[a-z]+)`)
