package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// process is a child server the benchmark started (callbackd, the limit handler, a design from
// the field), in its own process group, killed by the kernel if the benchmark dies, with its
// output in a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
}

// startProcess starts bin with args; env nil means this process's environment without
// CALLBACKD_ overrides, so that configuration files decide.
func startProcess(name, bin string, args, env []string, logPath string) (*process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("bench: create %s: %w", logPath, err)
	}
	defer logFile.Close()
	if env == nil {
		env = cleanEnv()
	}
	cmd := exec.CommandContext(context.Background(), bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CALLBACKD_") {
			env = append(env, kv)
		}
	}
	return env
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

func (p *process) logTail(lines int) string {
	b, _ := os.ReadFile(p.logPath)
	return tail(string(b), lines)
}

// stop sends SIGTERM, waits up to grace, then kills the process group.
func (p *process) stop(grace time.Duration) error {
	if p == nil || p.exited() {
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
	return fmt.Errorf("bench: %s (pid %d) did not stop within %v of SIGTERM and was killed", p.name, p.pid(), grace)
}

// waitHTTP polls url until it answers 200, the process exits, or the timeout passes.
func waitHTTP(ctx context.Context, p *process, url string, timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("bench: %s exited before it was ready:\n%s", p.name, p.logTail(20))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := client.Do(req); err == nil {
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
	return fmt.Errorf("bench: %s was not ready within %v:\n%s", p.name, timeout, p.logTail(20))
}

func freePort() (int, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("bench: find a free loopback port: %w", err)
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

// buildBinaries builds the benchmark's servers into dir: callbackd (with an opt-in pprof
// listener, see cmd/callbackd-pprof) and benchserver (the limit handler and the designs from the
// field). It returns their paths.
func buildBinaries(ctx context.Context, dir string) (callbackd, benchserver string, err error) {
	callbackd = filepath.Join(dir, "callbackd")
	benchserver = filepath.Join(dir, "benchserver")
	const mod = "github.com/seed-1cff2221/callback-platform/test/bench/cmd/"
	for _, b := range []struct{ out, pkg string }{{callbackd, mod + "callbackd-pprof"}, {benchserver, mod + "benchserver"}} {
		cmd := exec.CommandContext(ctx, goTool(), "build", "-o", b.out, b.pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("bench: build %s: %w\n%s", b.pkg, err, out)
		}
	}
	return callbackd, benchserver, nil
}

// peakRSS reads VmHWM (the resident set's high-water mark) of pid from /proc, in bytes.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("bench: read peak RSS: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err != nil {
				return 0, fmt.Errorf("bench: parse VmHWM %q: %w", line, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("bench: no VmHWM in /proc/%d/status", pid)
}

// execCommand is exec.CommandContext with the benchmark's environment (no CALLBACKD_ overrides).
func execCommand(ctx context.Context, bin string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = cleanEnv()
	return cmd
}
