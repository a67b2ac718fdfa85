package kwokenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// Options shape a cluster. The zero value is a one-node cluster named after the test binary.
type Options struct {
	// Name is the kwokctl cluster name (default "kwokenv-<pid>-<n>").
	Name string
	// Nodes is the number of simulated nodes created once the control plane is up (default 1;
	// negative: none).
	Nodes int
	// BinDir holds the binaries (default: FindBinDir).
	BinDir string
	// Wait bounds `kwokctl create cluster` (default 3 minutes: a loaded 2-core machine is slow).
	Wait time.Duration
	// ExtraArgs are appended to `kwokctl create cluster`, e.g. "--enable-crds=Stage" or
	// "--enable-metrics-server", "--metrics-server-binary=PATH".
	ExtraArgs []string
	// Log receives kwokctl's own output and progress lines (default: discarded; Start uses t.Log).
	Log io.Writer
}

// Cluster is a running simulated cluster.
type Cluster struct {
	// Name is the kwokctl cluster name.
	Name string
	// Kubeconfig is the path of an administrator kubeconfig for the cluster.
	Kubeconfig string
	// Config connects to the API server as a cluster administrator.
	Config *rest.Config
	// Dir is the cluster's work folder (KWOK_WORKDIR); everything of the cluster lives in it.
	Dir string
	// BinDir is the folder the binaries came from.
	BinDir string
	// StartDuration is how long `kwokctl create cluster` plus the first nodes took.
	StartDuration time.Duration

	log       io.Writer
	closeOnce sync.Once
	closeErr  error
}

var nameSeq struct {
	sync.Mutex
	n int
}

// Start creates a cluster for t and deletes it when t ends (also when t fails). On failure the
// tails of the component logs are printed.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Log == nil {
		opts.Log = testWriter{t}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitOrDefault(opts.Wait)+2*time.Minute)
	defer cancel()
	c, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("kwokenv: start cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, comp := range []string{"kube-apiserver", "kube-controller-manager", "kwok-controller"} {
				t.Logf("kwokenv: tail of the %s log:\n%s", comp, c.LogTail(comp, 15))
			}
		}
		if err := c.Close(); err != nil {
			t.Errorf("kwokenv: %v", err)
		}
	})
	return c
}

func waitOrDefault(d time.Duration) time.Duration {
	if d <= 0 {
		return 3 * time.Minute
	}
	return d
}

// New creates a cluster outside any test (for TestMain); the caller must Close it. A cluster
// that fails to come up is deleted before New returns.
func New(ctx context.Context, opts Options) (*Cluster, error) {
	binDir := opts.BinDir
	if binDir == "" {
		var err error
		if binDir, err = FindBinDir(); err != nil {
			return nil, err
		}
	} else if err := hasBinaries(binDir); err != nil {
		return nil, fmt.Errorf("%w: %w; %s", ErrMissingBinary, err, BuildHint)
	}
	dir, err := newFolder()
	if err != nil {
		return nil, err
	}
	name := opts.Name
	if name == "" {
		nameSeq.Lock()
		nameSeq.n++
		name = fmt.Sprintf("kwokenv-%d-%d", os.Getpid(), nameSeq.n)
		nameSeq.Unlock()
	}
	c := &Cluster{
		Name:       name,
		Dir:        dir,
		BinDir:     binDir,
		Kubeconfig: filepath.Join(dir, "kubeconfig"),
		log:        opts.Log,
	}
	if c.log == nil {
		c.log = io.Discard
	}
	start := time.Now()
	if err := c.create(ctx, opts); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	nodes := opts.Nodes
	if nodes == 0 {
		nodes = 1
	}
	if nodes > 0 {
		if err := c.ScaleNodes(ctx, nodes); err != nil {
			return nil, errors.Join(err, c.Close())
		}
	}
	c.StartDuration = time.Since(start)
	c.logf("cluster %s up with %d node(s) in %v (work folder %s)", c.Name, max(nodes, 0), c.StartDuration.Round(time.Millisecond), c.Dir)
	return c, nil
}

func (c *Cluster) logf(format string, args ...any) {
	fmt.Fprintf(c.log, "kwokenv: "+format+"\n", args...)
}

// create runs `kwokctl create cluster` with the cached binaries and waits for the API server.
func (c *Cluster) create(ctx context.Context, opts Options) error {
	wait := waitOrDefault(opts.Wait)
	bin := func(name string) string { return filepath.Join(c.BinDir, name) }
	args := []string{
		"create", "cluster",
		"--runtime", "binary",
		"--etcd-binary", bin("etcd"),
		"--kube-apiserver-binary", bin("kube-apiserver"),
		"--kube-controller-manager-binary", bin("kube-controller-manager"),
		"--kube-scheduler-binary", bin("kube-scheduler"),
		"--kwok-controller-binary", bin("kwok"),
		"--kubeconfig", c.Kubeconfig,
		"--wait", wait.String(),
		"--timeout", wait.String(),
		"--quiet-pull",
	}
	args = append(args, opts.ExtraArgs...)
	if _, err := c.Kwokctl(ctx, args...); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kwokenv: read kubeconfig %s: %w", c.Kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	c.Config = cfg
	return c.waitServiceAccount(ctx, "default", "default")
}

// Kwokctl runs kwokctl against this cluster (KWOK_WORKDIR and --name set) and returns its
// standard output; the error carries its standard error.
func (c *Cluster) Kwokctl(ctx context.Context, args ...string) (string, error) {
	full := append([]string{"--name", c.Name}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, "kwokctl"), full...)
	cmd.Env = c.env()
	cmd.Dir = c.Dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr // kwokctl logs a JSON line per step: shown only when it fails
	cmd.WaitDelay = 10 * time.Second
	started := time.Now()
	err := cmd.Run()
	c.logf("kwokctl %s (%v)", strings.Join(args[:min(2, len(args))], " "), time.Since(started).Round(time.Millisecond))
	if err != nil {
		return stdout.String(), fmt.Errorf("kwokenv: kwokctl %s: %w\n%s", strings.Join(args, " "), err, lastLines(stderr.String(), 30))
	}
	return stdout.String(), nil
}

// env is the environment of kwokctl: ours, with its work folder (and so its cache and config)
// inside the cluster folder and no kubeconfig of the user's in sight.
func (c *Cluster) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "KUBECONFIG" || strings.HasPrefix(k, "KWOK_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "KWOK_WORKDIR="+c.Dir, "KUBECONFIG="+c.Kubeconfig)
}

// Clientset returns a typed client for the cluster.
func (c *Cluster) Clientset() (*kubernetes.Clientset, error) {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return nil, fmt.Errorf("kwokenv: clientset: %w", err)
	}
	return cs, nil
}

// ScaleNodes sets the number of simulated nodes to n and waits until n nodes are Ready.
func (c *Cluster) ScaleNodes(ctx context.Context, n int) error {
	if _, err := c.Kwokctl(ctx, "scale", "node", "--replicas", strconv.Itoa(n)); err != nil {
		return err
	}
	return c.WaitNodesReady(ctx, n)
}

// WaitNodesReady waits until exactly n nodes exist and all are Ready.
func (c *Cluster) WaitNodesReady(ctx context.Context, n int) error {
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	var last string
	for {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err == nil {
			ready := 0
			for _, node := range nodes.Items {
				for _, cond := range node.Status.Conditions {
					if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
			if len(nodes.Items) == n && ready == n {
				return nil
			}
			last = fmt.Sprintf("%d nodes, %d ready", len(nodes.Items), ready)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kwokenv: waiting for %d ready nodes: %w (last: %s)", n, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitServiceAccount waits until the controller-manager created a namespace's ServiceAccount
// (pods are refused before that).
func (c *Cluster) waitServiceAccount(ctx context.Context, namespace, name string) error {
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	for {
		_, err := cs.CoreV1().ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kwokenv: waiting for ServiceAccount %s/%s: %w (last: %w)", namespace, name, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// LogTail returns the last n lines of a component's log ("kube-apiserver", "etcd",
// "kube-controller-manager", "kube-scheduler", "kwok-controller").
func (c *Cluster) LogTail(component string, n int) string {
	data, err := os.ReadFile(filepath.Join(c.clusterDir(), "logs", component+".log"))
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return lastLines(string(data), n)
}

// clusterDir is where kwokctl keeps this cluster's files.
func (c *Cluster) clusterDir() string { return filepath.Join(c.Dir, "clusters", c.Name) }

// PIDs returns the processes of the cluster that are running now.
func (c *Cluster) PIDs() []int { return testenv.ProcessesUnder(c.Dir) }

// Close deletes the cluster with `kwokctl delete cluster`, kills any process still naming its
// folder, and removes the folder. It is safe to call more than once.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var errs []error
		started := time.Now()
		if _, err := os.Stat(c.clusterDir()); err == nil {
			if _, err := c.Kwokctl(ctx, "delete", "cluster", "--kubeconfig", c.Kubeconfig); err != nil {
				errs = append(errs, err)
			}
		}
		if left := testenv.ProcessesUnder(c.Dir); len(left) > 0 {
			c.logf("processes %v outlived kwokctl delete cluster; killing them", left)
		}
		if err := removeFolder(c.Dir); err != nil {
			errs = append(errs, err)
		}
		c.logf("cluster %s deleted in %v", c.Name, time.Since(started).Round(time.Millisecond))
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// testWriter sends each write to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
