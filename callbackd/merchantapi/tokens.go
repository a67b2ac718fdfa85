package merchantapi

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// TokenSource decides whether a presented bearer token is one of the merchant API's tokens.
// Implementations must be safe for concurrent use, compare in constant time and never log or
// return token material.
type TokenSource interface {
	// Valid reports whether token authenticates a merchant API caller.
	Valid(token string) bool
}

// FileTokens is a TokenSource backed by a file holding one bearer token per line (blank lines and
// lines starting with '#' are ignored), as a mounted Kubernetes Secret provides it. The file is
// re-read when it changes, checked at most once per RecheckInterval, so a rotated Secret takes
// effect without a restart. When a re-read fails, the last good set stays in force.
type FileTokens struct {
	path    string
	logger  *slog.Logger
	now     func() time.Time
	recheck time.Duration

	mu        sync.Mutex
	digests   [][sha256.Size]byte // SHA-256 of each token: equal length for constant-time comparison
	stamp     fileStamp
	checkedAt time.Time
}

// RecheckInterval is how often FileTokens looks at its file for a change.
const RecheckInterval = time.Second

// fileStamp identifies one version of the token file. Kubernetes swaps a symlink on update, so
// the identity of the file behind the path is compared as well as its size and time.
type fileStamp struct {
	info    os.FileInfo
	size    int64
	modTime time.Time
}

func (s fileStamp) same(o fileStamp) bool {
	if s.info == nil || o.info == nil {
		return false
	}
	return os.SameFile(s.info, o.info) && s.size == o.size && s.modTime.Equal(o.modTime)
}

// NewFileTokens reads the token file at path. It fails when the file cannot be read; a file with
// no token is accepted (every request is then refused) and logged as a warning.
func NewFileTokens(path string, logger *slog.Logger) (*FileTokens, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ft := &FileTokens{path: path, logger: logger, now: time.Now, recheck: RecheckInterval}
	stamp, digests, err := readTokenFile(path)
	if err != nil {
		return nil, fmt.Errorf("merchantapi: load tokens: %w", err)
	}
	ft.stamp, ft.digests, ft.checkedAt = stamp, digests, ft.now()
	if len(digests) == 0 {
		logger.Warn("merchant API token file holds no token; every merchant API request will be refused", "path", path)
	}
	return ft, nil
}

// Valid reports whether token is one of the file's tokens. Every stored token is compared, in
// constant time, whatever the outcome, so the timing tells nothing about how close a guess was.
func (f *FileTokens) Valid(token string) bool {
	if token == "" {
		return false
	}
	presented := sha256.Sum256([]byte(token))
	digests := f.current()
	match := 0
	for i := range digests {
		match |= subtle.ConstantTimeCompare(presented[:], digests[i][:])
	}
	return match == 1
}

// Len returns how many tokens are in force (for start-up logs; never the tokens themselves).
func (f *FileTokens) Len() int { return len(f.current()) }

// current returns the token digests in force, re-reading the file when it changed.
func (f *FileTokens) current() [][sha256.Size]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if now.Sub(f.checkedAt) < f.recheck {
		return f.digests
	}
	f.checkedAt = now
	info, err := os.Stat(f.path)
	if err != nil {
		f.logger.Error("merchant API token file unreadable; keeping the tokens loaded before", "path", f.path, "error", err)
		return f.digests
	}
	if f.stamp.same(fileStamp{info: info, size: info.Size(), modTime: info.ModTime()}) {
		return f.digests
	}
	stamp, digests, err := readTokenFile(f.path)
	if err != nil {
		f.logger.Error("merchant API token file unreadable; keeping the tokens loaded before", "path", f.path, "error", err)
		return f.digests
	}
	f.stamp, f.digests = stamp, digests
	f.logger.Info("merchant API tokens reloaded", "path", f.path, "tokens", len(digests))
	return f.digests
}

// readTokenFile reads the tokens and the stamp of the version read. Errors name the file but
// never quote its content.
func readTokenFile(path string) (fileStamp, [][sha256.Size]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return fileStamp{}, nil, fmt.Errorf("open token file: %w", err)
	}
	defer fh.Close()
	info, err := fh.Stat()
	if err != nil {
		return fileStamp{}, nil, fmt.Errorf("stat token file %s: %w", path, err)
	}
	const maxTokenFile = 1 << 20
	if info.Size() > maxTokenFile {
		return fileStamp{}, nil, fmt.Errorf("token file %s: larger than %d bytes", path, maxTokenFile)
	}
	var digests [][sha256.Size]byte
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if strings.ContainsAny(string(line), " \t") {
			return fileStamp{}, nil, fmt.Errorf("token file %s: a line holds whitespace inside a token", path)
		}
		digests = append(digests, sha256.Sum256(line))
	}
	if err := sc.Err(); err != nil {
		return fileStamp{}, nil, fmt.Errorf("read token file %s: %w", path, err)
	}
	return fileStamp{info: info, size: info.Size(), modTime: info.ModTime()}, digests, nil
}

// StaticTokens is a fixed TokenSource, for tests and embedding.
type StaticTokens struct{ digests [][sha256.Size]byte }

// NewStaticTokens returns a TokenSource accepting exactly the given tokens.
func NewStaticTokens(tokens ...string) *StaticTokens {
	s := &StaticTokens{}
	for _, t := range tokens {
		if t != "" {
			s.digests = append(s.digests, sha256.Sum256([]byte(t)))
		}
	}
	return s
}

// Valid reports whether token is one of the static tokens, in constant time.
func (s *StaticTokens) Valid(token string) bool {
	if token == "" {
		return false
	}
	presented := sha256.Sum256([]byte(token))
	match := 0
	for i := range s.digests {
		match |= subtle.ConstantTimeCompare(presented[:], s.digests[i][:])
	}
	return match == 1
}
