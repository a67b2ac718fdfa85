package testenv

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

func TestReapRemovesOnlyFoldersOfDeadTestBinaries(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	self := strconv.Itoa(os.Getpid())
	selfStart, ok := processStartTime(os.Getpid())
	if !ok {
		t.Fatalf("processStartTime(self): expected a start time from /proc, got none")
	}
	dead := deadPid(t)

	cases := []struct {
		name      string
		folder    string
		owner     string // owner file content; "" writes none
		wantReap  bool
		withChild bool // a server-like process works in the folder
	}{
		{name: "dead owner, server still running", folder: dead + "-1", owner: dead + " 1", wantReap: true, withChild: true},
		{name: "dead owner, no owner file", folder: dead + "-2", wantReap: true},
		{name: "live owner", folder: self + "-1", owner: self + " " + selfStart, wantReap: false, withChild: true},
		{name: "live pid still writing its owner file", folder: self + "-2", wantReap: false},
		{name: "pid reused by another process", folder: self + "-3", owner: self + " 1", wantReap: true, withChild: true},
		{name: "not a testenv folder", folder: "notes", wantReap: false},
	}
	children := map[string]*exec.Cmd{}
	for _, c := range cases {
		dir := filepath.Join(root, c.folder)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if c.owner != "" {
			if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(c.owner+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if c.withChild {
			cmd := exec.Command("sleep", "300")
			cmd.Dir = dir
			cmd.SysProcAttr = sysProcAttr(nil)
			if err := cmd.Start(); err != nil {
				t.Fatalf("start sleep: %v", err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
			children[c.folder] = cmd
		}
	}

	reaped := map[string]bool{}
	for _, dir := range reapDead(root) {
		reaped[filepath.Base(dir)] = true
	}

	for _, c := range cases {
		_, statErr := os.Stat(filepath.Join(root, c.folder))
		exists := statErr == nil
		if reaped[c.folder] != c.wantReap || exists == c.wantReap {
			t.Errorf("%s: expected reaped=%v, got reaped=%v (folder still exists: %v)", c.name, c.wantReap, reaped[c.folder], exists)
		}
		cmd := children[c.folder]
		if cmd == nil {
			continue
		}
		if c.wantReap {
			err := cmd.Wait()
			var exitErr *exec.ExitError
			if !errors.As(err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Errorf("%s: expected the process in the folder killed by SIGKILL, got wait result %v", c.name, err)
			}
		} else if err := syscall.Kill(cmd.Process.Pid, 0); err != nil {
			t.Errorf("%s: expected the process in a kept folder to keep running, got %v", c.name, err)
		}
	}
}

// deadPid returns the pid of a process that has exited.
func deadPid(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatalf("run true: %v", err)
	}
	pid := cmd.Process.Pid
	if pidAlive(pid) {
		t.Fatalf("pid %d of an exited process: expected it gone, got alive", pid)
	}
	return strconv.Itoa(pid)
}

func TestUnderDir(t *testing.T) {
	t.Parallel()
	cases := []struct {
		path, dir string
		want      bool
	}{
		{"/tmp/r/1-1", "/tmp/r/1-1", true},
		{"/tmp/r/1-1/pgdata", "/tmp/r/1-1", true},
		{"/tmp/r/1-1/pgdata (deleted)", "/tmp/r/1-1", true},
		{"/tmp/r/1-10", "/tmp/r/1-1", false},
		{"/tmp/r", "/tmp/r/1-1", false},
	}
	for _, c := range cases {
		if got := underDir(c.path, c.dir); got != c.want {
			t.Errorf("underDir(%q, %q): expected %v, got %v", c.path, c.dir, c.want, got)
		}
	}
}

func TestCloseLeavesNoProcessAndNoFolder(t *testing.T) {
	t.Parallel()
	pg, err := NewPostgres()
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewRedis(RedisOptions{Replicas: 1, Sentinels: 1})
	if err != nil {
		_ = pg.Close()
		t.Fatal(err)
	}
	dirs := []string{pg.dir, g.dir}
	for _, dir := range dirs {
		if n := len(ProcessesUnder(dir)); n == 0 {
			t.Errorf("before Close: expected server processes under %s, got none", dir)
		}
	}
	if err := pg.Close(); err != nil {
		t.Errorf("postgres Close: %v", err)
	}
	if err := g.Close(); err != nil {
		t.Errorf("redis Close: %v", err)
	}
	for _, dir := range dirs {
		if pids := ProcessesUnder(dir); len(pids) != 0 {
			t.Errorf("after Close: expected no process under %s, got pids %v", dir, pids)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after Close: expected %s removed, got stat error %v", dir, err)
		}
	}
	if err := pg.Close(); err != nil {
		t.Errorf("second Close: expected no error, got %v", err)
	}
}

func TestDatabaseNameForTestNames(t *testing.T) {
	t.Parallel()
	cases := []string{
		"TestX",
		"TestOrders/duplicate_callback#01",
		"TestAVeryLongNameThatGoesOnAndOnAndOnAndOnAndOnAndOnAndOnAndOnAndOnForever/sub",
	}
	seen := map[string]bool{}
	for _, name := range cases {
		got := databaseNameFor(name)
		if err := validDatabaseName(got); err != nil {
			t.Errorf("databaseNameFor(%q) = %q: expected a valid name, got %v", name, got, err)
		}
		if unsafeDBChars.MatchString(got) {
			t.Errorf("databaseNameFor(%q) = %q: expected only [a-z0-9_]", name, got)
		}
		if seen[got] {
			t.Errorf("databaseNameFor(%q) = %q: expected a unique name, got a repeat", name, got)
		}
		seen[got] = true
	}
}

func TestQuoteRedis(t *testing.T) {
	cases := map[string]string{
		"/tmp/callback-platform-testenv/1-1/redis-0": `"/tmp/callback-platform-testenv/1-1/redis-0"`,
		`/tmp/with space/and"quote\`:                 `"/tmp/with space/and\"quote\\"`,
		"/tmp/caf\u00e9\n":                           `"/tmp/caf\xc3\xa9\x0a"`,
	}
	for in, want := range cases {
		if got := quoteRedis(in); got != want {
			t.Errorf("quoteRedis(%q): expected %s, got %s", in, want, got)
		}
	}
}
