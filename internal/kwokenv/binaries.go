package kwokenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// EnvBinDir names the folder holding every binary a cluster needs.
const EnvBinDir = "KWOKENV_BIN_DIR"

// envKubebuilderAssets is the folder hack/k8s-binaries.sh prints; `cluster` fills it with
// everything kwokenv needs as well.
const envKubebuilderAssets = "KUBEBUILDER_ASSETS"

// BuildHint is appended to every "binaries missing" error.
const BuildHint = "run `hack/k8s-binaries.sh cluster` (or `make k8s-cluster-binaries`; ~30 min the first time, seconds afterwards) and export KWOKENV_BIN_DIR=<the folder it prints on its last line>"

// Binaries are the programs a kwokctl binary-runtime cluster runs.
var Binaries = []string{"kwokctl", "kwok", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// ErrMissingBinary marks errors about binaries that are not built.
var ErrMissingBinary = errors.New("kwokenv: cluster binaries not found")

// FindBinDir returns the folder holding every program of Binaries: $KWOKENV_BIN_DIR, else
// $KUBEBUILDER_ASSETS when it holds them all, else the newest complete folder under the cache of
// hack/k8s-binaries.sh.
func FindBinDir() (string, error) {
	if dir := os.Getenv(EnvBinDir); dir != "" {
		if err := hasBinaries(dir); err != nil {
			return "", fmt.Errorf("%w: %s=%s: %w; %s", ErrMissingBinary, EnvBinDir, dir, err, BuildHint)
		}
		return dir, nil
	}
	if dir := os.Getenv(envKubebuilderAssets); dir != "" && hasBinaries(dir) == nil {
		return dir, nil
	}
	root := cacheRoot()
	dirs, _ := filepath.Glob(filepath.Join(root, "k8s", "*"))
	type cand struct {
		dir string
		mod int64
	}
	var cands []cand
	for _, d := range dirs {
		if hasBinaries(d) != nil {
			continue
		}
		st, err := os.Stat(filepath.Join(d, "kwokctl"))
		if err != nil {
			continue
		}
		cands = append(cands, cand{d, st.ModTime().UnixNano()})
	}
	if len(cands) == 0 {
		return "", fmt.Errorf("%w: no folder under %s holds all of %v; %s", ErrMissingBinary, filepath.Join(root, "k8s"), Binaries, BuildHint)
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].mod > cands[j].mod })
	return cands[0].dir, nil
}

// cacheRoot is hack/k8s-binaries.sh's cache folder.
func cacheRoot() string {
	if dir := os.Getenv("CALLBACK_PLATFORM_CACHE"); dir != "" {
		return dir
	}
	if dir := os.Getenv("XDG_CACHE_HOME"); dir != "" {
		return filepath.Join(dir, "callback-platform")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "callback-platform-cache")
	}
	return filepath.Join(home, ".cache", "callback-platform")
}

// hasBinaries checks that dir holds every program of Binaries, executable.
func hasBinaries(dir string) error {
	var missing []string
	for _, name := range Binaries {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing or not executable in %s: %v", dir, missing)
	}
	return nil
}
