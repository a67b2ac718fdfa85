package testenv

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// RootDirName is the name of the folder, directly under os.TempDir(), that holds every server's
// folder. hack/check-leftovers.sh looks for stray processes and folders under it.
const RootDirName = "callback-platform-testenv"

// ownerFile, inside each instance folder, records the process that created the folder as
// "<pid> <start time in clock ticks>", so that a reused pid is not mistaken for the owner.
const ownerFile = "owner"

var (
	instanceSeq atomic.Int64
	reapOnce    sync.Once
)

// RootDir returns the folder that holds every server folder of every test binary.
func RootDir() string {
	return filepath.Join(os.TempDir(), RootDirName)
}

// newInstanceDir creates a fresh folder <root>/<pid>-<n> owned by this process. The first call
// in a process reaps what dead test binaries left behind.
func newInstanceDir() (string, error) {
	root := RootDir()
	reapOnce.Do(func() { reapDead(root) })
	name := fmt.Sprintf("%d-%d", os.Getpid(), instanceSeq.Add(1))
	dir := filepath.Join(root, name)
	// Another test binary may remove the (empty) root between our MkdirAll and Mkdir; retry.
	var err error
	for range 5 {
		if err = os.MkdirAll(root, 0o755); err != nil {
			return "", fmt.Errorf("testenv: create root folder: %w", err)
		}
		// World-traversable, so that a server running as an unprivileged user (PostgreSQL when
		// the tests run as root) can reach its own sub-folder.
		_ = os.Chmod(root, 0o755)
		if err = os.Mkdir(dir, 0o755); err == nil || !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	if err != nil {
		return "", fmt.Errorf("testenv: create server folder: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", fmt.Errorf("testenv: chmod server folder: %w", err)
	}
	owner := strconv.Itoa(os.Getpid())
	if st, ok := processStartTime(os.Getpid()); ok {
		owner += " " + st
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(owner+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("testenv: write owner file: %w", err)
	}
	return dir, nil
}

// NewOwnedDir creates a fresh folder under RootDir owned by this process, for harnesses outside
// this package (a kwok cluster) whose processes must be reaped and checked like testenv's own:
// if this process dies, the next test binary kills every process naming the folder and removes
// it, and hack/check-leftovers.sh reports it. RemoveOwnedDir is its counterpart.
func NewOwnedDir() (string, error) { return newInstanceDir() }

// RemoveOwnedDir kills every process still naming dir, removes dir, and removes the root folder
// when it became empty. It fails when a process survives SIGKILL.
func RemoveOwnedDir(dir string) error { return removeInstanceDir(dir) }

// removeInstanceDir kills any process still working in dir, removes dir, and removes the root
// folder too when it became empty (so that a finished test run leaves nothing at all).
func removeInstanceDir(dir string) error {
	if left := killProcessesUnder(dir); len(left) > 0 {
		return fmt.Errorf("testenv: processes %v still use %s after SIGKILL", left, dir)
	}
	err := os.RemoveAll(dir)
	_ = os.Remove(filepath.Dir(dir)) // fails, as intended, while other servers still live there
	if err != nil {
		return fmt.Errorf("testenv: remove server folder: %w", err)
	}
	return nil
}

// reapDead removes the folders under root whose owning test binary is gone, after killing any
// server process still running in them. Folders of live test binaries are left alone.
func reapDead(root string) []string {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var reaped []string
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		if ownerAlive(dir, e.Name()) {
			continue
		}
		killProcessesUnder(dir)
		if err := os.RemoveAll(dir); err == nil {
			reaped = append(reaped, dir)
		}
	}
	_ = os.Remove(root)
	return reaped
}

// ownerAlive reports whether the test binary that created the folder dir (named "<pid>-<n>")
// is still running. When in doubt (a foreign name, an unreadable owner file of a live pid) it
// answers true, so that nothing of a running test is ever removed.
func ownerAlive(dir, name string) bool {
	pidText, _, ok := strings.Cut(name, "-")
	if !ok {
		return true // not ours
	}
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 {
		return true
	}
	if !pidAlive(pid) {
		return false
	}
	data, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil {
		// A live process is still creating the folder, or wrote no start time: keep it.
		return true
	}
	fields := strings.Fields(string(data))
	if len(fields) < 2 {
		return true
	}
	st, ok := processStartTime(pid)
	if !ok {
		return true
	}
	return st == fields[1] // a different start time means the pid was reused
}

// pidAlive reports whether a process with this pid exists (zombies included).
func pidAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// processStartTime returns field 22 of /proc/<pid>/stat (the start time since boot, in clock
// ticks), which together with the pid identifies a process uniquely.
func processStartTime(pid int) (string, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	// The command name (field 2) is in parentheses and may contain spaces; count from after it.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", false
	}
	fields := strings.Fields(s[i+1:])
	const startTimeIndex = 22 - 3 // fields after ")" start at field 3
	if len(fields) <= startTimeIndex {
		return "", false
	}
	return fields[startTimeIndex], true
}

// ProcessesUnder lists the pids of processes whose working directory or command line lies under
// dir: a postmaster and its backends run in their data folder, a Redis server in its folder, and
// etcd, kube-apiserver and every kwokctl component name their folders on the command line.
func ProcessesUnder(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if processIn(pid, dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// processIn reports whether process pid works in dir or names dir on its command line.
func processIn(pid int, dir string) bool {
	if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err == nil && underDir(cwd, dir) {
		return true
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	for _, arg := range strings.Split(string(cmdline), "\x00") {
		if _, value, ok := strings.Cut(arg, "="); ok && underDir(value, dir) {
			return true
		}
		if underDir(arg, dir) {
			return true
		}
	}
	return false
}

// underDir reports whether path is dir or lies inside it. A deleted working directory reads as
// "<path> (deleted)" in /proc and still counts.
func underDir(path, dir string) bool {
	path = strings.TrimSuffix(path, " (deleted)")
	return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
}

// killProcessesUnder sends SIGKILL to every process working under dir and waits (up to 10 s)
// until they are gone, so that the folder can be removed without a server writing into it. It
// returns the pids still there at the deadline.
func killProcessesUnder(dir string) []int {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := ProcessesUnder(dir)
		if len(pids) == 0 || time.Now().After(deadline) {
			return pids
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGCONT) // a paused process dies only once resumed
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Reap kills the server processes and removes the folders that test binaries which are no
// longer running left under RootDir (after a kill -9 or a crash), and returns the folders it
// removed. Folders of running test binaries are never touched. The package calls it on first
// use in every test binary; it is exported for tools and for tests of the reaper.
func Reap() []string {
	return reapDead(RootDir())
}

// RepoRoot returns the repository's top folder (the one holding go.mod), found by walking up
// from the working directory, which `go test` sets to the package's folder.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("testenv: working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testenv: no go.mod above the working directory")
		}
		dir = parent
	}
}
