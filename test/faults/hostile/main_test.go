// Package hostile holds the hostile-input tests of issue 9: a real callbackd binary (built once
// per run from cmd/callbackd) serving a WeChat Pay and an Alipay channel, against real PostgreSQL
// and a Redis master with a replica and three Sentinels started by internal/testenv on loopback,
// attacked with notifications signed by paysim (the provider simulator) with the channel's real
// test keys, and with raw bytes where an HTTP client would refuse to send them.
//
// Every test asserts the answer and that nothing changed in the database where nothing should
// (row counts and a fingerprint of every table, read straight from PostgreSQL), and prints what
// was sent and the evidence (counts, metric deltas, timings, memory), never a secret.
//
// The tests share one callbackd process and run one after another (none is parallel), so a
// before/after comparison of the whole database belongs to the test that made it.
// HOSTILE_DEBUG=1 also prints callbackd's last log lines after each refused request.
package hostile

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// suite is the environment every test uses; built by TestMain.
var suite *env

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "callbackd-hostile-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "hostile: create work folder: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)

	bin := filepath.Join(dir, "callbackd")
	build := exec.Command(goTool(), "build", "-o", bin, "github.com/seed-1cff2221/callback-platform/cmd/callbackd")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "hostile: build cmd/callbackd: %v\n", err)
		return 1
	}

	e, err := newEnv(dir, bin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "hostile: set up PostgreSQL, Redis Sentinel and callbackd: %v\n"+
			"(server binaries missing? run `make deps`)\n", err)
		if e != nil {
			e.close()
		}
		return 1
	}
	suite = e
	code := m.Run()
	// After all the hostile traffic, callbackd's log must not carry a secret or personal data.
	if found, err := e.secretsInLog(); err != nil || len(found) > 0 {
		fmt.Fprintf(os.Stderr, "hostile: callbackd's log after the suite: expected no secret, found %v (%v)\n", found, err)
		code = 1
	} else if code == 0 {
		fmt.Println("hostile: callbackd's log after the suite carries no secret (APIv3 key, API token, private keys, payer openid)")
	}
	if err := e.close(); err != nil {
		fmt.Fprintf(os.Stderr, "hostile: tear down: %v\n", err)
		code = 1
	}
	return code
}

// goTool is the go command of the toolchain `go test` runs under (GOROOT is set for tests),
// otherwise the one on PATH.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "go"
}
