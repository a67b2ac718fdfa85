package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binaries built once for the tests that run the demo as a user does.
var demoBin, callbackdBin string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "demo-test-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo test: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	demoBin, callbackdBin = filepath.Join(dir, "demo"), filepath.Join(dir, "callbackd")
	for bin, pkg := range map[string]string{demoBin: "./", callbackdBin: "../callbackd"} {
		cmd := exec.Command(goTool(), "build", "-o", bin, pkg)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "demo test: build %s: %v\n", pkg, err)
			return 1
		}
	}
	return m.Run()
}

// stoppedLine is the demo's last progress line, naming every process it started.
var stoppedLine = regexp.MustCompile(`demo: stopped callbackd \(pids ([\d ]*)\), PostgreSQL \(pid (\d+)\), Redis \(pids ([\d ]*)\)`)

// startedPIDs parses the stopped line from the demo's stderr.
func startedPIDs(t *testing.T, stderr string) []int {
	t.Helper()
	m := stoppedLine.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("expected the demo to name the processes it stopped; stderr:\n%s", stderr)
	}
	var pids []int
	fields := append(append(strings.Fields(m[1]), m[2]), strings.Fields(m[3])...)
	if len(fields) < 3 {
		t.Fatalf("expected callbackd, PostgreSQL and Redis pids in %q", m[0])
	}
	for _, f := range fields {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			t.Fatalf("bad pid %q in %q", f, m[0])
		}
		pids = append(pids, pid)
	}
	return pids
}

// expectGone fails for every pid that still exists (a zombie counts: nobody reaped it).
func expectGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d started by the demo: expected it gone, kill(pid, 0) = %v", pid, err)
		}
	}
}

// TestDemoBalancesTheBooks runs the demo as `make demo` does, shortened, and checks its report
// (text for people, JSON for this test), its exit status, and that it leaves no process behind.
func TestDemoBalancesTheBooks(t *testing.T) {
	reportPath := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command(demoBin, "--callbackd", callbackdBin, "--orders", "25", "--lost", "3", "--duplicates", "4", "--concurrency", "16", "--report-json", reportPath)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo: expected exit status 0, got %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	expectGone(t, startedPIDs(t, stderr.String()))

	text := stdout.String()
	for _, want := range []string{
		"notifications sent", "duplicates stopped at", "Redis claim", "PostgreSQL receipt",
		"notifications lost (never sent)", `found paid by "check payment" (provider query)`,
		"ledger entries (from PostgreSQL)", "time taken:",
		"books balance: 50 orders paid, 50 ledger entries, one per paid order, none twice.",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("expected the text report to contain %q; got:\n%s", want, text)
		}
	}

	raw, err := os.ReadFile(reportPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("decode the JSON report: %v\n%s", err, raw)
	}
	if !rep.Balanced || len(rep.Channels) != 2 {
		t.Fatalf("expected a balanced report of 2 channels, got balanced=%v with %d channels", rep.Balanced, len(rep.Channels))
	}
	for _, c := range rep.Channels {
		want := Books{OrdersRegistered: 25, OrdersPaid: 25, LedgerEntries: 25}
		got := c.Books
		got.PaidAmount = 0
		if got != want {
			t.Errorf("%s books: expected %+v, got %+v", c.Name, want, c.Books)
		}
		if c.Storm.Sent != 88 || c.Storm.Orders != 22 {
			t.Errorf("%s storm: expected 88 notifications for the 22 orders not lost, got %d for %d", c.Name, c.Storm.Sent, c.Storm.Orders)
		}
		if c.Lost != 3 || c.FoundByQuery != 3 {
			t.Errorf("%s: expected the 3 lost notifications' orders found paid by the provider query, got %d of %d", c.Name, c.FoundByQuery, c.Lost)
		}
		// Every acknowledged delivery either booked its order's payment or was a duplicate that
		// a gate stopped (the lost orders were booked by the query path, not by a delivery): the
		// counters of callbackd and the answers paysim saw must agree.
		var stopped int64
		for _, n := range c.DuplicatesStopped {
			stopped += n
		}
		success := int64(c.answers().Success)
		bookedByCallback := c.Books.OrdersPaid - int64(c.FoundByQuery)
		if stopped != success-bookedByCallback {
			t.Errorf("%s: %d success answers for %d orders booked by a callback, so expected %d duplicates stopped, /metrics says %d (%v)",
				c.Name, success, bookedByCallback, success-bookedByCallback, stopped, c.DuplicatesStopped)
		}
		if c.answers().Reject != 0 || c.answers().TransportError != 0 {
			t.Errorf("%s: expected no rejections and no transport errors, got %+v", c.Name, c.answers())
		}
	}
	if len(rep.Processes.Callbackd) != 2 || rep.Processes.Postgres == 0 || len(rep.Processes.Redis) != 5 {
		t.Errorf("expected the report to name 2 callbackd replicas, PostgreSQL and 5 Redis processes, got %+v", rep.Processes)
	}
}

// TestDemoStopsEverythingOnInterrupt interrupts the demo in the middle of its first storm, as
// Ctrl-C does: it must stop what it started and exit with the "could not run" status.
func TestDemoStopsEverythingOnInterrupt(t *testing.T) {
	cmd := exec.Command(demoBin, "--callbackd", callbackdBin, "--orders", "400", "--duplicates", "10", "--concurrency", "4")
	var stdout bytes.Buffer
	var stderr lockedBuffer
	cmd.Stdout = &stdout
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	storming := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(io.TeeReader(pipe, &stderr))
		signalled := false
		for sc.Scan() {
			if !signalled && strings.Contains(sc.Text(), ": storm of ") {
				signalled = true
				close(storming)
			}
		}
	}()
	select {
	case <-storming:
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the demo never reached its storm; stderr:\n%s", stderr.String())
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("the demo did not exit within 90s of the interrupt; stderr:\n%s", stderr.String())
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitFailed {
		t.Errorf("interrupted demo: expected exit status %d, got %v", exitFailed, err)
	}
	if strings.Contains(stdout.String(), "books balance") {
		t.Errorf("an interrupted demo must not claim balanced books; stdout:\n%s", stdout.String())
	}
	expectGone(t, startedPIDs(t, stderr.String()))
}

// lockedBuffer is a bytes.Buffer safe for one writer goroutine and a reader.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestParseDuplicates(t *testing.T) {
	text := `# HELP callbackd_duplicates_stopped_total Duplicate callbacks acknowledged without effect.
# TYPE callbackd_duplicates_stopped_total counter
callbackd_duplicates_stopped_total{channel="wechat",gate="window"} 799
callbackd_duplicates_stopped_total{channel="wechat",gate="database"} 1
callbackd_duplicates_stopped_total{gate="redis",channel="alipay"} 3e+00
callbackd_duplicates_stopped_total_created{channel="wechat",gate="window"} 1.7e+09
callbackd_callbacks_total{channel="wechat",outcome="applied",provider="wechatpay"} 200
`
	got, err := parseDuplicates(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]int64{"wechat": {"window": 799, "database": 1}, "alipay": {"redis": 3}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("expected %v, got %v", want, got)
	}
	if _, err := parseDuplicates(strings.NewReader(`callbackd_duplicates_stopped_total{channel="x",gate="window"} many` + "\n")); err == nil {
		t.Error("expected an error for a non-numeric value")
	}
}

func TestBooksBalance(t *testing.T) {
	cases := []struct {
		name string
		b    Books
		want bool
	}{
		{"one entry per paid order", Books{OrdersRegistered: 3, OrdersPaid: 3, LedgerEntries: 3}, true},
		{"an entry missing", Books{OrdersRegistered: 3, OrdersPaid: 3, LedgerEntries: 2}, false},
		{"an order booked twice", Books{OrdersRegistered: 3, OrdersPaid: 3, LedgerEntries: 4, OrdersPaidTwice: 1}, false},
		{"a payment never booked", Books{OrdersRegistered: 3, OrdersPaid: 2, LedgerEntries: 2}, false},
	}
	for _, tc := range cases {
		if got := tc.b.balanced(); got != tc.want {
			t.Errorf("%s (%+v): expected balanced=%v, got %v", tc.name, tc.b, tc.want, got)
		}
	}
	r := &Report{Channels: []ChannelReport{{Books: cases[0].b}, {Books: cases[1].b}}}
	r.finish()
	if r.Balanced {
		t.Error("a report with one unbalanced channel must not balance")
	}
}
