package kwokenv

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

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

var (
	folderSeq atomic.Int64
	reapOnce  sync.Once
)

// newFolder creates <testenv root>/<pid>-kwok-<n> with testenv's owner file, so that testenv's
// reaper and hack/check-leftovers.sh treat it (and every process naming it) like any other
// server folder of this test binary. The first call reaps what dead test binaries left.
func newFolder() (string, error) {
	root := testenv.RootDir()
	reapOnce.Do(func() { testenv.Reap() })
	dir := filepath.Join(root, fmt.Sprintf("%d-kwok-%d", os.Getpid(), folderSeq.Add(1)))
	var err error
	for range 5 { // another test binary may remove the empty root between the two calls
		if err = os.MkdirAll(root, 0o755); err != nil {
			return "", fmt.Errorf("kwokenv: create %s: %w", root, err)
		}
		if err = os.Mkdir(dir, 0o755); err == nil || !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	if err != nil {
		return "", fmt.Errorf("kwokenv: create cluster folder: %w", err)
	}
	owner := strconv.Itoa(os.Getpid())
	if st, ok := processStartTime(os.Getpid()); ok {
		owner += " " + st
	}
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(owner+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("kwokenv: write owner file: %w", err)
	}
	return dir, nil
}

// removeFolder kills every process still naming dir, removes dir, and removes the testenv root
// when it became empty.
func removeFolder(dir string) error {
	if left := killProcessesUnder(dir, 10*time.Second); len(left) > 0 {
		return fmt.Errorf("kwokenv: processes %v still use %s after SIGKILL", left, dir)
	}
	err := os.RemoveAll(dir)
	_ = os.Remove(filepath.Dir(dir)) // fails, as intended, while other servers live there
	if err != nil {
		return fmt.Errorf("kwokenv: remove %s: %w", dir, err)
	}
	return nil
}

// processStartTime returns field 22 of /proc/<pid>/stat (start time in clock ticks since boot).
func processStartTime(pid int) (string, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces
	if i < 0 {
		return "", false
	}
	fields := strings.Fields(s[i+1:])
	const startTimeIndex = 22 - 3
	if len(fields) <= startTimeIndex {
		return "", false
	}
	return fields[startTimeIndex], true
}

// ProcessesUnder lists the pids of processes whose working directory or command line names dir
// or a path inside it (every component kwokctl starts names its work folder).
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

func processIn(pid int, dir string) bool {
	if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err == nil && underDir(cwd, dir) {
		return true
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(cmdline) == 0 {
		return false // gone, or a zombie waiting for its parent
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

func underDir(path, dir string) bool {
	path = strings.TrimSuffix(path, " (deleted)")
	return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
}

// killProcessesUnder SIGKILLs every process naming dir until none is left or timeout passes, and
// returns those still there.
func killProcessesUnder(dir string, timeout time.Duration) []int {
	deadline := time.Now().Add(timeout)
	for {
		pids := ProcessesUnder(dir)
		if len(pids) == 0 || time.Now().After(deadline) {
			return pids
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGCONT)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
