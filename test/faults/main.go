package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// CallbackdBin is the faultinject build of callbackd for this test binary, set by Main.
var CallbackdBin string

// Main builds cmd/callbackd once with the faultinject build tag (the negative-control switches
// and the Redis address map exist only in that build), runs the tests and removes the build.
// Call it from TestMain: os.Exit(faults.Main(m)).
func Main(m *testing.M) int {
	dir, err := os.MkdirTemp("", "callbackd-faults-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "faults: create build folder: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin, err := BuildCallbackd(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "faults: %v\n", err)
		return 1
	}
	CallbackdBin = bin
	code := m.Run()
	sharedPGMu.Lock()
	if sharedPG != nil {
		if err := sharedPG.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "faults: stop the shared PostgreSQL: %v\n", err)
			code = 1
		}
	}
	sharedPGMu.Unlock()
	return code
}

// The PostgreSQL server shared by the tests that do not stop or crash it (each gets its own
// database on it); started on first use, stopped by Main.
var (
	sharedPGMu sync.Mutex
	sharedPG   *testenv.Postgres
)

func sharedPostgres(t testing.TB) *testenv.Postgres {
	t.Helper()
	sharedPGMu.Lock()
	defer sharedPGMu.Unlock()
	if sharedPG == nil {
		pg, err := testenv.NewPostgres(testenv.WithSetting("max_connections", "300"))
		if err != nil {
			t.Fatalf("start the shared PostgreSQL: %v", err)
		}
		sharedPG = pg
	}
	return sharedPG
}

// SharedPostgres is the package's shared PostgreSQL server (for EnvOptions.Postgres), started on
// first use and stopped when Main returns. Tests that crash PostgreSQL need their own server.
func SharedPostgres(t testing.TB) *testenv.Postgres { return sharedPostgres(t) }

// BuildCallbackd builds cmd/callbackd with -tags faultinject into dir and returns its path.
func BuildCallbackd(dir string) (string, error) {
	bin := filepath.Join(dir, "callbackd")
	build := exec.CommandContext(context.Background(), goTool(), "build", "-tags", "faultinject", "-o", bin, "github.com/seed-1cff2221/callback-platform/cmd/callbackd")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("build cmd/callbackd -tags faultinject: %w", err)
	}
	return bin, nil
}

// goTool is the go command of the toolchain `go test` runs under (GOROOT), else the one on PATH.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "go"
}
