package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// k8sHint is appended to every "Kubernetes binaries missing" error.
const k8sHint = "run `make k8s-binaries` (hack/k8s-binaries.sh envtest) and export KUBEBUILDER_ASSETS=<printed folder>"

// Envtest is a throwaway kube-apiserver with its etcd on loopback ports.
type Envtest struct {
	// Config connects to the API server as a cluster administrator.
	Config *rest.Config

	env *envtest.Environment
	dir string
}

// StartEnvtest starts a real kube-apiserver and etcd (the binaries in $KUBEBUILDER_ASSETS, or
// the ones hack/k8s-binaries.sh cached) for t, installs the CRDs found in crdDirs (a missing
// folder is an error), and returns a configuration for talking to it. Everything is stopped and
// removed when t ends.
func StartEnvtest(t testing.TB, crdDirs ...string) *rest.Config {
	t.Helper()
	e, err := NewEnvtest(crdDirs...)
	if err != nil {
		t.Fatalf("testenv: start kube-apiserver: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: tail of the kube-apiserver log:\n%s", tailFile(filepath.Join(e.dir, "kube-apiserver.log"), 20))
			t.Logf("testenv: tail of the etcd log:\n%s", tailFile(filepath.Join(e.dir, "etcd.log"), 20))
		}
		if err := e.Close(); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	return e.Config
}

// NewEnvtest starts a kube-apiserver and etcd outside any test, for TestMain; the caller must
// Close it.
func NewEnvtest(crdDirs ...string) (*Envtest, error) {
	assets, err := findKubebuilderAssets()
	if err != nil {
		return nil, err
	}
	dir, err := newInstanceDir()
	if err != nil {
		return nil, err
	}
	e := &Envtest{dir: dir}
	if err := e.start(assets, crdDirs); err != nil {
		_ = removeInstanceDir(dir)
		return nil, err
	}
	return e, nil
}

func (e *Envtest) start(assets string, crdDirs []string) error {
	// Both servers keep their state and certificates in our instance folder and name it on
	// their command line, which lets the reaper find them if the test binary is killed (envtest
	// does not arm a parent-death signal).
	etcdDir := filepath.Join(e.dir, "etcd")
	certDir := filepath.Join(e.dir, "apiserver")
	for _, d := range []string{etcdDir, certDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return fmt.Errorf("testenv: create %s: %w", d, err)
		}
	}
	etcdLog, err := os.Create(filepath.Join(e.dir, "etcd.log"))
	if err != nil {
		return fmt.Errorf("testenv: create etcd log: %w", err)
	}
	defer etcdLog.Close()
	apiLog, err := os.Create(filepath.Join(e.dir, "kube-apiserver.log"))
	if err != nil {
		return fmt.Errorf("testenv: create kube-apiserver log: %w", err)
	}
	defer apiLog.Close()

	etcdPath, err := e.withParentDeathSignal(filepath.Join(assets, "etcd"))
	if err != nil {
		return err
	}
	apiPath, err := e.withParentDeathSignal(filepath.Join(assets, "kube-apiserver"))
	if err != nil {
		return err
	}
	e.env = &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     crdDirs,
		ErrorIfCRDPathMissing: true,
		// envtest's 20 s default is too short on a loaded 2-core CI machine (kube-apiserver
		// alone took longer there); a start that really hangs still fails.
		ControlPlaneStartTimeout: envtestTimeout("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT", 2*time.Minute),
		ControlPlaneStopTimeout:  envtestTimeout("KUBEBUILDER_CONTROLPLANE_STOP_TIMEOUT", time.Minute),
		ControlPlane: envtest.ControlPlane{
			Etcd:      &envtest.Etcd{Path: etcdPath, DataDir: etcdDir, Out: etcdLog, Err: etcdLog},
			APIServer: &envtest.APIServer{Path: apiPath, CertDir: certDir, Out: apiLog, Err: apiLog},
		},
	}
	cfg, err := e.env.Start()
	if err != nil {
		_ = e.env.Stop()
		return fmt.Errorf("testenv: envtest start (binaries from %s): %w\n%s", assets,
			err, tailFile(apiLog.Name(), 20))
	}
	e.Config = cfg
	return nil
}

// envtestTimeout returns the duration in the environment variable envtest itself honours, or
// def.
func envtestTimeout(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d > 0 {
		return d
	}
	return def
}

// withParentDeathSignal returns the path of a small wrapper that runs binary with a parent-death
// signal (util-linux's setpriv --pdeathsig KILL, then exec), because envtest starts its servers
// without one and they would outlive a killed test binary. Without setpriv it returns binary
// itself and the reaper of the next run cleans up instead.
func (e *Envtest) withParentDeathSignal(binary string) (string, error) {
	setpriv, ok := lookPath("setpriv")
	if !ok {
		return binary, nil
	}
	dir := filepath.Join(e.dir, "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("testenv: create wrapper folder: %w", err)
	}
	wrapper := filepath.Join(dir, filepath.Base(binary))
	script := fmt.Sprintf("#!/bin/sh\nexec %s --pdeathsig KILL -- %s \"$@\"\n", shellQuote(setpriv), shellQuote(binary))
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		return "", fmt.Errorf("testenv: write %s wrapper: %w", filepath.Base(binary), err)
	}
	return wrapper, nil
}

// lookPath finds an executable on PATH.
func lookPath(name string) (string, bool) {
	path, err := exec.LookPath(name)
	return path, err == nil
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Close stops the API server and etcd and removes their folder.
func (e *Envtest) Close() error {
	var errs []error
	if e.env != nil {
		if err := e.env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("testenv: envtest stop: %w", err))
		}
		e.env = nil
	}
	if err := removeInstanceDir(e.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// findKubebuilderAssets returns the folder holding kube-apiserver and etcd:
// $KUBEBUILDER_ASSETS when set, else the newest folder under
// <user cache>/callback-platform/k8s/ that hack/k8s-binaries.sh filled.
func findKubebuilderAssets() (string, error) {
	if dir, ok := os.LookupEnv(EnvKubebuilderAssets); ok {
		if dir == "" {
			return "", fmt.Errorf("%w: %s is empty; %s", errMissingBinary, EnvKubebuilderAssets, k8sHint)
		}
		if err := hasK8sBinaries(dir); err != nil {
			return "", fmt.Errorf("%w: %s=%s: %w; %s", errMissingBinary, EnvKubebuilderAssets, dir, err, k8sHint)
		}
		return dir, nil
	}
	for _, dir := range k8sCacheCandidates() {
		if hasK8sBinaries(dir) == nil {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w: %s is not set and no cached kube-apiserver and etcd were found; %s",
		errMissingBinary, EnvKubebuilderAssets, k8sHint)
}

// k8sCacheCandidates lists the folders hack/k8s-binaries.sh may have filled, newest name first
// (the script keys them by version).
func k8sCacheCandidates() []string {
	var roots []string
	if c := os.Getenv("CALLBACK_PLATFORM_CACHE"); c != "" {
		roots = append(roots, c)
	}
	if c := os.Getenv("XDG_CACHE_HOME"); c != "" {
		roots = append(roots, filepath.Join(c, "callback-platform"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		roots = append(roots, filepath.Join(home, ".cache", "callback-platform"))
	}
	var dirs []string
	for _, root := range roots {
		matches, _ := filepath.Glob(filepath.Join(root, "k8s", "*"))
		sort.Sort(sort.Reverse(sort.StringSlice(matches)))
		dirs = append(dirs, matches...)
	}
	return dirs
}

func hasK8sBinaries(dir string) error {
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if err := isExecutable(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}
