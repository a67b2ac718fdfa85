package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// localProcess is a binary of ours (the operator, callbackd) run beside the cluster, with its
// output in a log file.
type localProcess struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
}

// startLocal starts bin with args and env in its own process group and stops it (SIGTERM, then
// SIGKILL to the group) when t ends; on failure the tail of its log is printed through redact.
func startLocal(t testing.TB, name, bin string, args, env []string, logPath string, redact func(string) string) *localProcess {
	t.Helper()
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("create %s log: %v", name, err)
	}
	// The process's life is managed by stop, not by a context.
	cmd := exec.CommandContext(context.Background(), bin, args...)
	cmd.Env = env
	cmd.Dir = filepath.Dir(logPath) // never the repository
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &localProcess{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		if err := p.stop(20 * time.Second); err != nil {
			t.Errorf("%v", err)
		}
		if t.Failed() {
			t.Logf("tail of the %s log:\n%s", name, redact(tailFile(logPath, 25)))
		}
	})
	return p
}

func (p *localProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL to the process group and waits for the exit.
func (p *localProcess) kill() error {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) survived SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// stop sends SIGTERM, waits up to grace, then kills the process group.
func (p *localProcess) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) survived SIGKILL", p.name, p.cmd.Process.Pid)
	}
	return errors.New(p.name + " did not stop within " + grace.String() + " of SIGTERM and was killed")
}
