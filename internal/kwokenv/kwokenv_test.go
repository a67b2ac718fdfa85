package kwokenv

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// fakeBinDir writes executable stand-ins for the named binaries into a fresh folder.
func fakeBinDir(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestFindBinDir(t *testing.T) {
	complete := fakeBinDir(t, Binaries...)
	partial := fakeBinDir(t, "kwokctl", "kwok")
	emptyCache := t.TempDir()
	tests := []struct {
		name      string
		binDir    string
		assets    string
		want      string
		wantErrIn []string // substrings of the error; nil: no error
	}{
		{name: "KWOKENV_BIN_DIR complete", binDir: complete, want: complete},
		{name: "KWOKENV_BIN_DIR incomplete", binDir: partial,
			wantErrIn: []string{"kube-apiserver", "hack/k8s-binaries.sh cluster"}},
		{name: "KUBEBUILDER_ASSETS complete", assets: complete, want: complete},
		{name: "KUBEBUILDER_ASSETS incomplete falls back to an empty cache", assets: partial,
			wantErrIn: []string{"no folder under", "hack/k8s-binaries.sh cluster"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvBinDir, tc.binDir)
			t.Setenv(envKubebuilderAssets, tc.assets)
			t.Setenv("CALLBACK_PLATFORM_CACHE", emptyCache)
			got, err := FindBinDir()
			if tc.wantErrIn != nil {
				if err == nil {
					t.Fatalf("expected an error mentioning %q, got folder %s", tc.wantErrIn, got)
				}
				if !errors.Is(err, ErrMissingBinary) {
					t.Errorf("expected ErrMissingBinary, got %v", err)
				}
				for _, s := range tc.wantErrIn {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("expected the error to mention %q, got %v", s, err)
					}
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("expected %s, got %s (err %v)", tc.want, got, err)
			}
		})
	}
}

func TestFindBinDirPicksNewestCompleteCacheFolder(t *testing.T) {
	cache := t.TempDir()
	older := filepath.Join(cache, "k8s", "v1.36.0")
	newer := filepath.Join(cache, "k8s", "v1.37.2")
	incomplete := filepath.Join(cache, "k8s", "v1.38.0")
	for i, d := range []string{older, newer, incomplete} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		names := Binaries
		if d == incomplete {
			names = []string{"kwokctl"}
		}
		for _, n := range names {
			p := filepath.Join(d, n)
			if err := os.WriteFile(p, nil, 0o755); err != nil {
				t.Fatal(err)
			}
			mt := time.Now().Add(time.Duration(i-3) * time.Hour)
			if err := os.Chtimes(p, mt, mt); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Setenv(EnvBinDir, "")
	t.Setenv(envKubebuilderAssets, "")
	t.Setenv("CALLBACK_PLATFORM_CACHE", cache)
	got, err := FindBinDir()
	if err != nil || got != newer {
		t.Fatalf("expected the newest complete folder %s, got %s (err %v)", newer, got, err)
	}
}

// TestFolderFollowsTestenvConvention checks what the reapers rely on: the folder lies under
// testenv's root, is named <pid>-..., holds an owner file, and a process naming it is found and
// killed by removeFolder.
func TestFolderFollowsTestenvConvention(t *testing.T) {
	dir, err := newFolder()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(dir) != testenv.RootDir() {
		t.Errorf("expected the folder under %s, got %s", testenv.RootDir(), dir)
	}
	if ok, _ := regexp.MatchString(`^[0-9]+-[0-9]+$`, filepath.Base(dir)); !ok || !strings.HasPrefix(filepath.Base(dir), strconv.Itoa(os.Getpid())+"-") {
		t.Errorf("expected the folder named <our pid>-<n>, got %s", filepath.Base(dir))
	}
	owner, err := os.ReadFile(filepath.Join(dir, "owner"))
	if err != nil || len(strings.Fields(string(owner))) != 2 {
		t.Errorf("expected an owner file \"<pid> <start time>\", got %q (err %v)", owner, err)
	}

	// A stand-in for a cluster component that names the folder on its command line, in its own
	// session like kwokctl's components.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The shell blocks in its read builtin (no child process) until killed.
	cmd := exec.CommandContext(ctx, "sh", "-c", "read -r line", "component", "--data-dir="+filepath.Join(dir, "etcd"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Contains(testenv.ProcessesUnder(dir), cmd.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatalf("expected testenv.ProcessesUnder(%s) to list pid %d, got %v", dir, cmd.Process.Pid, testenv.ProcessesUnder(dir))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := removeFolder(dir); err != nil {
		t.Fatalf("removeFolder: %v", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("expected pid %d killed by removeFolder, still running", cmd.Process.Pid)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("expected %s removed, got stat error %v", dir, err)
	}
}
