package testenv_test

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// orphanHelperEnv makes the test binary act as a test that starts servers and then hangs until
// it is killed (see TestServersDieWithTheirTestBinaryAndAreReaped).
const orphanHelperEnv = "TESTENV_ORPHAN_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(orphanHelperEnv) == "1" {
		os.Exit(runOrphanHelper())
	}
	os.Exit(m.Run())
}

// runOrphanHelper starts a PostgreSQL server, a Redis group and envtest, prints their addresses on one
// line, and waits to be killed.
func runOrphanHelper() int {
	pg, err := testenv.NewPostgres()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	g, err := testenv.NewRedis(testenv.RedisOptions{Replicas: 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kube, err := testenv.NewEnvtest()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	u, err := url.Parse(kube.Config.Host)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("READY %s %s %s %s\n", pg.Addr(), g.Nodes()[0].Addr, g.Nodes()[1].Addr, u.Host)
	select {}
}

func TestServersDieWithTheirTestBinaryAndAreReaped(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), orphanHelperEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper test binary: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		testenv.Reap() // even when the test fails half-way, leave nothing behind
	})

	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- line
	}()
	var addrs []string
	select {
	case line := <-ready:
		fields := strings.Fields(line)
		if len(fields) != 5 || fields[0] != "READY" {
			t.Fatalf("helper: expected %q, got %q", "READY <postgres> <redis> <replica> <kube-apiserver>", line)
		}
		addrs = fields[1:]
	case <-time.After(3 * time.Minute):
		t.Fatalf("helper: expected READY within 3 minutes, got nothing")
	}
	for _, addr := range addrs {
		if !listening(addr) {
			t.Fatalf("server %s of the helper: expected it listening, got no answer", addr)
		}
	}
	folders, _ := filepath.Glob(filepath.Join(testenv.RootDir(), strconv.Itoa(cmd.Process.Pid)+"-*"))
	if len(folders) != 3 {
		t.Fatalf("folders of the helper: expected 3 (postgres, redis, envtest), got %v", folders)
	}

	// kill -9 of the test binary: no cleanup code runs in it.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	deadline := time.Now().Add(10 * time.Second)
	for _, addr := range addrs {
		for listening(addr) {
			if time.Now().After(deadline) {
				t.Fatalf("server %s after its test binary was killed: expected it gone (parent-death signal), got it still listening", addr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	reaped := testenv.Reap()
	for _, f := range folders {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("folder %s of the killed helper: expected Reap to remove it, got stat error %v (reaped %v)", f, err, reaped)
		}
	}
}

// listening reports whether something accepts TCP connections on addr.
func listening(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}
