// Package keystest imitates a mounted Kubernetes Secret volume for tests: files live in a
// timestamped directory, reached through a "..data" symlink that an update swaps atomically,
// exactly as the kubelet's atomic writer does. Tests of key reloading use it to prove that a
// rotation is picked up without a restart.
package keystest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Volume is a Secret-volume-like directory.
type Volume struct {
	// Dir is the mount point; files are at Dir/<name>.
	Dir string
	gen int
	top map[string]bool
}

// NewVolume creates a volume holding files (names may contain one or more "/" for
// subdirectories) under a fresh temporary directory removed with the test.
func NewVolume(t testing.TB, files map[string][]byte) *Volume {
	t.Helper()
	v := &Volume{Dir: t.TempDir(), top: map[string]bool{}}
	v.Update(t, files)
	return v
}

// Path returns the path of a file of the volume as a container sees it.
func (v *Volume) Path(name string) string { return filepath.Join(v.Dir, name) }

// Update replaces the whole content of the volume atomically: a new timestamped directory, a
// "..data_tmp" symlink to it renamed over "..data", top-level symlinks for new names, and the
// removal of the previous directory and of names no longer present.
func (v *Volume) Update(t testing.TB, files map[string][]byte) {
	t.Helper()
	v.gen++
	tsDir := fmt.Sprintf("..2026_01_01_00_00_%02d.%d", v.gen%60, v.gen)
	for name, content := range files {
		full := filepath.Join(v.Dir, tsDir, name)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatalf("keystest: create directory: %v", err)
		}
		if err := os.WriteFile(full, content, 0o600); err != nil {
			t.Fatalf("keystest: write file: %v", err)
		}
	}
	old, _ := os.Readlink(filepath.Join(v.Dir, "..data"))
	tmp := filepath.Join(v.Dir, "..data_tmp")
	if err := os.Symlink(tsDir, tmp); err != nil {
		t.Fatalf("keystest: symlink ..data_tmp: %v", err)
	}
	if err := os.Rename(tmp, filepath.Join(v.Dir, "..data")); err != nil {
		t.Fatalf("keystest: swap ..data: %v", err)
	}
	top := map[string]bool{}
	for name := range files {
		first, _, _ := strings.Cut(name, "/")
		top[first] = true
		if !v.top[first] {
			if err := os.Symlink(filepath.Join("..data", first), filepath.Join(v.Dir, first)); err != nil && !os.IsExist(err) {
				t.Fatalf("keystest: symlink %s: %v", first, err)
			}
		}
	}
	for first := range v.top {
		if !top[first] {
			if err := os.Remove(filepath.Join(v.Dir, first)); err != nil {
				t.Fatalf("keystest: remove %s: %v", first, err)
			}
		}
	}
	v.top = top
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.Dir, old)); err != nil {
			t.Fatalf("keystest: remove previous data: %v", err)
		}
	}
}
