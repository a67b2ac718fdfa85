package faults

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
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
	return m.Run()
}

// BuildCallbackd builds cmd/callbackd with -tags faultinject into dir and returns its path.
func BuildCallbackd(dir string) (string, error) {
	bin := filepath.Join(dir, "callbackd")
	build := exec.Command(goTool(), "build", "-tags", "faultinject", "-o", bin, "github.com/seed-1cff2221/callback-platform/cmd/callbackd")
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
