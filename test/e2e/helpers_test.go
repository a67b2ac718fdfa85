package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// Release coordinates of the chart under test.
const (
	releaseName      = "cbp"
	releaseNamespace = "callback-platform-system"
	helmVersion      = "v3.22.0"
)

// repoRoot is the folder holding go.mod.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := testenv.RepoRoot()
	if err != nil {
		t.Fatalf("e2e: find the repository root: %v", err)
	}
	return dir
}

func chartDir(t testing.TB) string { return filepath.Join(repoRoot(t), "charts", "callback-platform") }

// helmBinary returns ./bin/helm, installing it with `make helm` when missing; the test fails
// (never skips) when that is not possible.
func helmBinary(t testing.TB) string {
	t.Helper()
	root := repoRoot(t)
	p := filepath.Join(root, "bin", "helm")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "helm")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("e2e: helm is not installed and `make helm` (helm %s into ./bin) failed: %v\n%s", helmVersion, err, out)
	}
	return p
}

// helmRunner runs helm against one cluster with private cache/config/data folders, so that the
// user's repositories and kubeconfig are never read.
type helmRunner struct {
	bin        string
	kubeconfig string
	home       string
	dir        string
}

func newHelm(t testing.TB, kubeconfig string) *helmRunner {
	return &helmRunner{bin: helmBinary(t), kubeconfig: kubeconfig, home: t.TempDir(), dir: repoRoot(t)}
}

func (h *helmRunner) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, h.bin, args...)
	cmd.Dir = h.dir
	cmd.Env = append(filteredEnv("KUBECONFIG", "HELM_"),
		"KUBECONFIG="+h.kubeconfig,
		"HELM_CACHE_HOME="+filepath.Join(h.home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(h.home, "config"),
		"HELM_DATA_HOME="+filepath.Join(h.home, "data"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// filteredEnv is our environment without the variables whose names start with one of prefixes.
func filteredEnv(prefixes ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				drop = true
			}
		}
		if !drop {
			env = append(env, kv)
		}
	}
	return env
}

// buildBinaries builds the repository's commands into dir (one go build, sharing the cache).
func buildBinaries(ctx context.Context, root, dir string, pkgs ...string) error {
	args := append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)
	cmd := exec.CommandContext(ctx, goTool(), args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// goTool is the go command of the running toolchain when GOROOT names one, else "go" on PATH.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	return "go"
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// eventually polls cond every interval until it returns true or timeout passes; the test fails
// with what and the last reason cond gave.
func eventually(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	last := ""
	for {
		ok, why := cond(ctx)
		if ok {
			return
		}
		last = why
		select {
		case <-ctx.Done():
			t.Fatalf("expected %s within %v; last state: %s", what, timeout, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// timings records how long each phase took and prints them all at the end.
type timings struct {
	mu     sync.Mutex
	start  time.Time
	phases []phase
}

type phase struct {
	name string
	d    time.Duration
}

func newTimings() *timings { return &timings{start: time.Now()} }

// track returns a function that records the phase's duration when called.
func (tm *timings) track(name string) func() {
	started := time.Now()
	return func() {
		tm.mu.Lock()
		defer tm.mu.Unlock()
		tm.phases = append(tm.phases, phase{name, time.Since(started)})
	}
}

func (tm *timings) report(t testing.TB) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "e2e timings (%v in all):\n", time.Since(tm.start).Round(time.Millisecond))
	for _, p := range tm.phases {
		fmt.Fprintf(&b, "  %-58s %10v\n", p.name, p.d.Round(time.Millisecond))
	}
	t.Log(b.String())
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// tailFile returns the last n lines of a file ("" when unreadable).
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
