// Package keys keeps a channel's key material current while callbackd runs.
//
// Keys live in files (a mounted Kubernetes Secret, or plain files in development). A Set parses
// them once at start-up, then re-reads them whenever the files change and, as a fallback, on a
// fixed interval. Kubernetes updates a Secret volume by writing a new timestamped directory and
// atomically swapping the "..data" symlink, so the watcher follows directories rather than file
// inodes, and treats every event in a watched directory as "maybe changed": it compares a
// fingerprint of the files and re-parses only when they differ.
//
// The parsed keys are published through an atomic pointer. A request that already holds the
// previous keys finishes with them; the next request sees the new ones. A failed re-read (a
// half-written file, a malformed PEM) keeps the keys in use and is logged and counted, so a bad
// rotation never takes a channel down.
package keys

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Default timings of a Set.
const (
	// DefaultInterval is the periodic re-read that catches changes the file watcher missed
	// (watch limits exhausted, network file systems).
	DefaultInterval = 30 * time.Second
	// DefaultDebounce lets a burst of file events (a Secret update is several) settle before the
	// files are read.
	DefaultDebounce = 100 * time.Millisecond
)

// Options configure a Set.
type Options struct {
	// Name identifies the key set in logs (e.g. "channel wx-main: wechatpay public keys").
	Name string
	// Paths are the files and directories the loader reads. Each file's directory and each
	// directory itself are watched.
	Paths []string
	// Interval of the periodic re-read; DefaultInterval when zero, disabled when negative.
	Interval time.Duration
	// Debounce before re-reading after a file event; DefaultDebounce when zero.
	Debounce time.Duration
	// PollOnly skips the file watcher and relies on the periodic re-read alone (file systems
	// without change notification).
	PollOnly bool
	// Logger receives reload and failure messages (never key material); none when nil.
	Logger *slog.Logger
	// OnReload is called after every re-read that changed the keys (err == nil) or failed to
	// parse them (err != nil), for metrics.
	OnReload func(err error)
}

// A Set is the current, parsed key material of type T. It is safe for concurrent use.
type Set[T any] struct {
	load func() (*T, error)
	opts Options
	cur  atomic.Pointer[T]

	mu          sync.Mutex // serializes reloads
	fingerprint [sha256.Size]byte
}

// Load parses the key material once with load, publishes it, and keeps it current until ctx is
// done. The first parse must succeed: a channel without usable keys must not start. load must
// read the files named in opts.Paths and must not put key material in its errors.
func Load[T any](ctx context.Context, load func() (*T, error), opts Options) (*Set[T], error) {
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Set[T]{load: load, opts: opts}
	// Watch before the first read, so that a change right after it is not missed.
	var w *fsnotify.Watcher
	if !opts.PollOnly {
		var err error
		if w, err = fsnotify.NewWatcher(); err != nil {
			opts.Logger.Warn("cannot watch key files; relying on periodic re-reads", "keys", opts.Name, "error", err)
			w = nil
		} else {
			s.addWatches(w)
		}
	}
	fp, fpErr := fingerprint(opts.Paths)
	v, err := load()
	if err == nil && v == nil {
		err = errors.New("loader returned no keys")
	}
	if err != nil {
		if w != nil {
			_ = w.Close()
		}
		return nil, fmt.Errorf("keys: load %s: %w", opts.Name, err)
	}
	s.cur.Store(v)
	if fpErr == nil {
		s.fingerprint = fp
	}
	go s.watch(ctx, w)
	return s, nil
}

// Static returns a Set that always holds v and never re-reads anything (tests, tools).
func Static[T any](v *T) *Set[T] {
	s := &Set[T]{load: func() (*T, error) { return v, nil }}
	s.cur.Store(v)
	return s
}

// Current returns the keys in use. The returned value must be treated as read-only; callers
// keep using it for the whole request even if a reload happens meanwhile.
func (s *Set[T]) Current() *T { return s.cur.Load() }

// Reload re-reads the files now and reports whether the keys changed. On failure the keys in
// use are kept.
func (s *Set[T]) Reload() (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fp, err := fingerprint(s.opts.Paths)
	if err == nil && fp == s.fingerprint {
		return false, nil
	}
	v, loadErr := s.load()
	if loadErr == nil && v == nil {
		loadErr = errors.New("loader returned no keys")
	}
	if loadErr != nil {
		s.opts.Logger.Warn("key reload failed; keeping the keys in use", "keys", s.opts.Name, "error", loadErr)
		if s.opts.OnReload != nil {
			s.opts.OnReload(loadErr)
		}
		return false, fmt.Errorf("keys: reload %s: %w", s.opts.Name, loadErr)
	}
	s.cur.Store(v)
	if err == nil {
		s.fingerprint = fp
	}
	s.opts.Logger.Info("keys reloaded", "keys", s.opts.Name)
	if s.opts.OnReload != nil {
		s.opts.OnReload(nil)
	}
	return true, nil
}

// watch re-reads on file events of w (nil: none; debounced) and on the periodic tick until ctx
// is done, then closes w.
func (s *Set[T]) watch(ctx context.Context, w *fsnotify.Watcher) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		defer w.Close()
		events, errs = w.Events, w.Errors
	}

	var tick <-chan time.Time
	if s.opts.Interval > 0 {
		t := time.NewTicker(s.opts.Interval)
		defer t.Stop()
		tick = t.C
	}
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()

	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			debounce.Reset(s.opts.Debounce)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			s.opts.Logger.Warn("key file watch error", "keys", s.opts.Name, "error", err)
		case <-debounce.C:
			// A watched directory may have been replaced (a Secret's subdirectory lives inside
			// the swapped timestamped directory): watch the paths again, then read them, so a
			// change in between is not missed.
			if w != nil {
				s.addWatches(w)
			}
			_, _ = s.Reload()
		case <-tick:
			_, _ = s.Reload()
		}
	}
}

// addWatches watches every directory that holds or is one of the paths. Failures are logged:
// the periodic re-read still covers them.
func (s *Set[T]) addWatches(w *fsnotify.Watcher) {
	var dirs []string
	for _, p := range s.opts.Paths {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			dirs = append(dirs, p)
		}
		dirs = append(dirs, filepath.Dir(p))
	}
	slices.Sort(dirs)
	watched := w.WatchList()
	for _, d := range slices.Compact(dirs) {
		if slices.Contains(watched, d) {
			// Re-adding a path whose directory was swapped is how the new directory gets
			// watched; fsnotify keeps one watch per name, so remove the stale one first.
			_ = w.Remove(d)
		}
		if err := w.Add(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.opts.Logger.Warn("cannot watch key directory; relying on periodic re-reads", "keys", s.opts.Name, "dir", d, "error", err)
		}
	}
}

// fingerprint hashes the names and contents of the paths (following symlinks; for a directory,
// its regular files whose names do not start with a dot, which skips a Secret volume's "..data"
// bookkeeping). It never returns the contents.
func fingerprint(paths []string) ([sha256.Size]byte, error) {
	h := sha256.New()
	for _, p := range paths {
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			// An optional file (a rotation's "previous" secret) may be absent.
			fmt.Fprintf(h, "%d:%s\x00missing:", len(p), p)
			continue
		}
		if err != nil {
			return [sha256.Size]byte{}, err
		}
		if !fi.IsDir() {
			if err := hashFile(h, p); err != nil {
				return [sha256.Size]byte{}, err
			}
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return [sha256.Size]byte{}, err
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") {
				continue
			}
			name := filepath.Join(p, e.Name())
			if fi, err := os.Stat(name); err != nil || !fi.Mode().IsRegular() {
				continue
			}
			if err := hashFile(h, name); err != nil {
				return [sha256.Size]byte{}, err
			}
		}
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out, nil
}

func hashFile(h interface{ Write([]byte) (int, error) }, name string) error {
	b, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "%d:%s\x00%d:", len(name), name, len(b))
	_, _ = h.Write(b)
	return nil
}

// ReadDirFiles reads the regular files of dir whose names end in suffix, skipping names that
// start with a dot, and returns their contents by base name without the suffix. It is the usual
// first step of a directory loader (one PEM file per key id).
func ReadDirFiles(dir, suffix string) (map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("keys: read directory %s: %w", dir, err)
	}
	out := make(map[string][]byte, len(entries))
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, suffix) {
			continue
		}
		full := filepath.Join(dir, name)
		if fi, err := os.Stat(full); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		b, err := os.ReadFile(full)
		if err != nil {
			return nil, fmt.Errorf("keys: read %s: %w", full, err)
		}
		out[strings.TrimSuffix(name, suffix)] = b
	}
	return out, nil
}
