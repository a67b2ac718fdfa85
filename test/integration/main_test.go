// Package integration_test holds the end-to-end acceptance tests of the exactly-once callback
// pipeline (issue 3): real callbackd processes, built once per test run from cmd/callbackd, against
// real PostgreSQL and Redis Sentinel servers started by internal/testenv on loopback ports.
// Callbacks are Standard Webhooks requests signed by a signer written here from the
// specification; every count is read straight from PostgreSQL, never through callbackd.
package integration_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// callbackdBin is the callbackd binary built for this test run.
var callbackdBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "callbackd-integration-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: create build folder: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)

	callbackdBin = filepath.Join(dir, "callbackd")
	build := exec.Command(goTool(), "build", "-o", callbackdBin, "github.com/seed-1cff2221/callback-platform/cmd/callbackd")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "integration: build cmd/callbackd: %v\n", err)
		return 1
	}
	code := m.Run()
	if sharedPG != nil {
		if err := sharedPG.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "integration: stop the shared PostgreSQL: %v\n", err)
			code = 1
		}
	}
	return code
}

// sharedPG is the PostgreSQL server the tests share (each test gets its own database on it);
// a test that stops or crashes PostgreSQL starts its own server instead.
var (
	sharedPG     *testenv.Postgres
	sharedPGErr  error
	sharedPGOnce sync.Once
)

// sharedPostgres starts the shared server on first use.
func sharedPostgres(t testing.TB) *testenv.Postgres {
	t.Helper()
	sharedPGOnce.Do(func() {
		sharedPG, sharedPGErr = testenv.NewPostgres(testenv.WithSetting("max_connections", "200"))
	})
	if sharedPGErr != nil {
		t.Fatalf("start the shared PostgreSQL: %v", sharedPGErr)
	}
	return sharedPG
}

// goTool is the go command: the one of the toolchain that `go test` runs under when GOROOT is
// set (go test sets it for the tests it runs), otherwise the one on PATH.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "go"
}
