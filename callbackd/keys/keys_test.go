package keys_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/callbackd/keys"
	"github.com/seed-1cff2221/callback-platform/callbackd/keys/keystest"
)

// loadTrimmed is a loader of one-line files: every file of the volume, joined.
func loadTrimmed(paths ...string) func() (*string, error) {
	return func() (*string, error) {
		var parts []string
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			s := strings.TrimSpace(string(b))
			if s == "" || s == "garbage" {
				return nil, errors.New("unparsable key file")
			}
			parts = append(parts, s)
		}
		joined := strings.Join(parts, ",")
		return &joined, nil
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("expected %s within 5s, it did not happen", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSecretVolumeUpdateIsPickedUpByTheWatcher(t *testing.T) {
	vol := keystest.NewVolume(t, map[string][]byte{"key": []byte("v1")})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var reloads, failures atomic.Int32
	set, err := keys.Load(ctx, loadTrimmed(vol.Path("key")), keys.Options{
		Name:     "test",
		Paths:    []string{vol.Path("key")},
		Interval: -1, // prove the watcher alone suffices
		OnReload: func(err error) {
			if err != nil {
				failures.Add(1)
			} else {
				reloads.Add(1)
			}
		},
	})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := *set.Current(); got != "v1" {
		t.Fatalf("expected initial keys v1, got %s", got)
	}
	held := set.Current() // an in-flight request holds the previous keys

	vol.Update(t, map[string][]byte{"key": []byte("v2")})
	eventually(t, "keys v2 after the Secret update", func() bool { return *set.Current() == "v2" })
	if *held != "v1" {
		t.Fatalf("expected the keys held by an in-flight request to stay v1, got %s", *held)
	}

	// A second update proves the watch survived the swap of the data directory.
	vol.Update(t, map[string][]byte{"key": []byte("v3")})
	eventually(t, "keys v3 after the second Secret update", func() bool { return *set.Current() == "v3" })

	// A broken update keeps the keys in use and is reported.
	vol.Update(t, map[string][]byte{"key": []byte("garbage")})
	eventually(t, "a reported reload failure", func() bool { return failures.Load() > 0 })
	if got := *set.Current(); got != "v3" {
		t.Fatalf("expected the keys in use (v3) to survive a broken update, got %s", got)
	}
	if reloads.Load() < 2 {
		t.Fatalf("expected at least 2 successful reloads reported, got %d", reloads.Load())
	}
}

func TestDirectoryOfKeysInASecretSubdirectory(t *testing.T) {
	vol := keystest.NewVolume(t, map[string][]byte{"pub/A.pem": []byte("a")})
	dir := vol.Path("pub")
	load := func() (*map[string][]byte, error) {
		m, err := keys.ReadDirFiles(dir, ".pem")
		return &m, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	set, err := keys.Load(ctx, load, keys.Options{Name: "dir", Paths: []string{dir}, Interval: -1})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := len(*set.Current()); got != 1 {
		t.Fatalf("expected 1 key, got %d", got)
	}
	vol.Update(t, map[string][]byte{"pub/A.pem": []byte("a"), "pub/B.pem": []byte("b")})
	eventually(t, "two keys after adding B.pem", func() bool { return len(*set.Current()) == 2 })
	vol.Update(t, map[string][]byte{"pub/B.pem": []byte("b")})
	eventually(t, "only B after removing A.pem", func() bool {
		m := *set.Current()
		_, hasA := m["A"]
		return len(m) == 1 && !hasA
	})
}

func TestPeriodicReReadWithoutEvents(t *testing.T) {
	// A plain file rewritten in place; with the watcher off, only the periodic re-read can notice.
	dir := t.TempDir()
	name := filepath.Join(dir, "key")
	if err := os.WriteFile(name, []byte("p1"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	set, err := keys.Load(ctx, loadTrimmed(name), keys.Options{Name: "periodic", Paths: []string{name}, PollOnly: true, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if err := os.WriteFile(name, []byte("p2"), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "keys p2 from the periodic re-read", func() bool { return *set.Current() == "p2" })
}

func TestLoadRefusesUnusableKeys(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "key")
	if err := os.WriteFile(name, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := keys.Load(context.Background(), loadTrimmed(name), keys.Options{Name: "bad", Paths: []string{name}})
	if err == nil {
		t.Fatal("expected Load to refuse unparsable key files, got nil")
	}
	if _, err := keys.Load(context.Background(), loadTrimmed(filepath.Join(dir, "missing")), keys.Options{Name: "missing"}); err == nil {
		t.Fatal("expected Load to refuse a missing key file, got nil")
	}
}

func TestReloadReportsNoChangeForIdenticalFiles(t *testing.T) {
	vol := keystest.NewVolume(t, map[string][]byte{"key": []byte("same")})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	set, err := keys.Load(ctx, loadTrimmed(vol.Path("key")), keys.Options{Name: "same", Paths: []string{vol.Path("key")}, Interval: -1})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	changed, err := set.Reload()
	if err != nil || changed {
		t.Fatalf("Reload of unchanged files: expected (false, nil), got (%v, %v)", changed, err)
	}
}
