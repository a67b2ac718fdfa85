package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is one running server binary: its own process group, SIGKILL when the test binary
// dies, stdout and stderr appended to a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited and been waited for
	waitErr error         // valid after done is closed
}

// procSpec says how to start a process.
type procSpec struct {
	name    string // for messages, e.g. "postgres"
	path    string
	args    []string
	dir     string // working directory
	env     []string
	logPath string
	cred    *syscall.Credential // nil: run as the current user
}

// startProcess starts spec's binary. It returns once the process is running; readiness is the
// caller's business.
func startProcess(spec procSpec) (*process, error) {
	logFile, err := os.OpenFile(spec.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testenv: open %s log: %w", spec.name, err)
	}
	defer logFile.Close() // the child holds its own copy of the descriptor

	// The server's life is managed by stop/kill, not by a context.
	cmd := exec.CommandContext(context.Background(), spec.path, spec.args...)
	cmd.Dir = spec.dir
	cmd.Env = spec.env
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr(spec.cred)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testenv: start %s: %w", spec.name, err)
	}
	p := &process{name: spec.name, cmd: cmd, logPath: spec.logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exitErr describes how an exited process ended (never nil, so that it can be wrapped).
func (p *process) exitErr() error {
	if p.waitErr != nil {
		return p.waitErr
	}
	return errors.New("exit status 0")
}

// pid returns the process id.
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process; a process that has already exited is not an error.
func (p *process) signal(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("testenv: signal %s %v: %w", p.name, sig, err)
	}
	return nil
}

// wait waits up to timeout for the process to exit.
func (p *process) wait(timeout time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// stop sends sig, waits up to grace for the process to exit, then kills it (and, for a process
// that ignored its signal, its whole process group).
func (p *process) stop(sig syscall.Signal, grace time.Duration) error {
	if err := p.signal(sig); err != nil {
		return err
	}
	if p.wait(grace) {
		return nil
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	_ = p.signal(syscall.SIGKILL)
	if !p.wait(10 * time.Second) {
		return fmt.Errorf("testenv: %s (pid %d) did not exit after SIGKILL", p.name, p.pid())
	}
	return nil
}

// kill sends SIGKILL (resuming a paused process first is unnecessary: SIGKILL always lands)
// and waits for the exit.
func (p *process) kill() error {
	return p.stop(syscall.SIGKILL, 10*time.Second)
}

// logTail returns the last n lines of the process's log.
func (p *process) logTail(n int) string {
	return tailFile(p.logPath, n)
}

// tailFile returns the last n lines of the file at path ("" when it cannot be read).
func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const maxRead = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > maxRead {
		_, _ = f.Seek(st.Size()-maxRead, io.SeekStart)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// freePort returns a TCP port on 127.0.0.1 that nothing listened on a moment ago. Another
// process may still take it before the server binds, so starters retry on a clash.
func freePort() (int, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("testenv: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// loopbackAddr formats 127.0.0.1:port.
func loopbackAddr(port int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// portClash reports whether a server log says that the port was taken.
func portClash(log string) bool {
	return strings.Contains(log, "Address already in use") ||
		strings.Contains(log, "could not bind")
}

// childEnv returns the environment for server processes: ours without variables that would
// redirect a server or its tools (PG*, REDIS*), and a neutral locale.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "REDIS") ||
			strings.HasPrefix(k, "LC_") || k == "LANG" || k == "LANGUAGE" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "LC_ALL=C", "LANG=C")
	return append(env, extra...)
}
