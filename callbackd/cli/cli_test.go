package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestVersion(t *testing.T) {
	old := Version
	t.Cleanup(func() { Version = old })

	Version = "v9.9.9-test"
	code, out, _ := run(t, "version")
	if code != ExitOK || out != "callbackd v9.9.9-test\n" {
		t.Fatalf("version with -ldflags: expected exit 0 and \"callbackd v9.9.9-test\", got %d %q", code, out)
	}
	Version = ""
	if code, out, _ := run(t, "version"); code != ExitOK || !strings.HasPrefix(out, "callbackd ") || len(out) <= len("callbackd \n") {
		t.Fatalf("version from build info: expected exit 0 and a version, got %d %q", code, out)
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	cases := [][]string{
		{},
		{"frobnicate"},
		{"serve"},
		{"serve", "--no-such-flag"},
		{"serve", "--config", "a.yaml", "extra"},
		{"migrate"},
		{"migrate", "--config", "a.yaml", "--dsn", "postgres://x"},
		{"serve", "--config", "a.yaml", "--log-level", "loud"},
	}
	t.Setenv("CALLBACKD_DATABASE_DSN", "")
	for _, args := range cases {
		code, _, stderr := run(t, args...)
		if code != ExitUsage {
			t.Errorf("callbackd %s: expected exit %d, got %d (stderr %q)", strings.Join(args, " "), ExitUsage, code, stderr)
		}
	}
}

func TestConfigErrorsNameTheFieldAndHideSecrets(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "callbackd.yaml")
	const secretDSN = "postgres://callbackd:hunter2-secret@127.0.0.1:1/db"
	doc := `
database:
  dsn: "` + secretDSN + `"
channels:
  - name: webhooks
    provider: standardwebhooks
    merchant:
      merchantID: acct_1
    ttls:
      lock: 2s
    keys:
      webhookSecretFiles: [` + filepath.Join(dir, "whsec") + `]
`
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"serve", "migrate"} {
		code, _, stderr := run(t, cmd, "--config", cfg)
		if code != ExitError {
			t.Fatalf("%s with an invalid config: expected exit %d, got %d (%q)", cmd, ExitError, code, stderr)
		}
		if !strings.Contains(stderr, "server.requestTimeout: must be shorter than the shortest channel lock TTL (2s)") {
			t.Fatalf("%s: expected the error to name server.requestTimeout, got %q", cmd, stderr)
		}
		if strings.Contains(stderr, "hunter2") {
			t.Fatalf("%s: the error output carries the database password: %q", cmd, stderr)
		}
		if n := strings.Count(strings.TrimSpace(stderr), "\n"); n != 0 {
			t.Fatalf("%s: expected the error on one line, got %d lines: %q", cmd, n+1, stderr)
		}
	}
}

func TestMigrateUnreachableDatabaseHidesTheDSN(t *testing.T) {
	code, _, stderr := run(t, "migrate", "--dsn", "postgres://callbackd:hunter2-secret@127.0.0.1:1/db?connect_timeout=2", "--timeout", "5s")
	if code != ExitError {
		t.Fatalf("migrate against a closed port: expected exit %d, got %d (%q)", ExitError, code, stderr)
	}
	if strings.Contains(stderr, "hunter2") {
		t.Fatalf("the error output carries the database password: %q", stderr)
	}
}
