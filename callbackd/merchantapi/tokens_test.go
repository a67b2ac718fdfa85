package merchantapi

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFileTokensAcceptsExactlyTheListedTokens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, path, "# merchant API tokens\n tok_alpha \n\ntok_beta\n")
	ft, err := NewFileTokens(path, nil)
	if err != nil {
		t.Fatalf("NewFileTokens: %v", err)
	}
	cases := []struct {
		token string
		want  bool
	}{
		{"tok_alpha", true},
		{"tok_beta", true},
		{"", false},
		{"tok_alph", false},
		{"tok_alphaa", false},
		{"TOK_ALPHA", false},
		{"# merchant API tokens", false},
		{" tok_alpha ", false},
	}
	for _, tc := range cases {
		if got := ft.Valid(tc.token); got != tc.want {
			t.Errorf("Valid(%q): expected %v, got %v", tc.token, tc.want, got)
		}
	}
	if got := ft.Len(); got != 2 {
		t.Errorf("Len: expected 2 tokens, got %d", got)
	}
}

// A rotated Secret replaces the file (Kubernetes swaps a symlink); the new set takes effect at the
// next check without a restart, and a broken re-read keeps the last good set.
func TestFileTokensFollowsRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	writeTokens(t, path, "tok_old\n")
	var logs bytes.Buffer
	ft, err := NewFileTokens(path, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatalf("NewFileTokens: %v", err)
	}
	clock := time.Now()
	ft.now = func() time.Time { return clock }

	// Replace the file atomically, like a Secret volume update.
	tmp := filepath.Join(dir, "tokens.new")
	writeTokens(t, tmp, "tok_new\n")
	if err := os.Rename(tmp, path); err != nil {
		t.Fatalf("rename: %v", err)
	}
	if !ft.Valid("tok_old") {
		t.Errorf("before the recheck interval: expected the old token to stay valid")
	}
	clock = clock.Add(RecheckInterval)
	if ft.Valid("tok_old") {
		t.Errorf("after rotation: expected the old token to be refused")
	}
	if !ft.Valid("tok_new") {
		t.Errorf("after rotation: expected the new token to be accepted")
	}

	// The file disappears: the last good set stays in force.
	if err := os.Remove(path); err != nil {
		t.Fatalf("remove: %v", err)
	}
	clock = clock.Add(RecheckInterval)
	if !ft.Valid("tok_new") {
		t.Errorf("after the file vanished: expected the last good token to stay valid")
	}
	for _, secret := range []string{"tok_old", "tok_new"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("logs: expected no token material, found %q", secret)
		}
	}
}

func TestFileTokensRefusesUnreadableOrMalformedFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := NewFileTokens(filepath.Join(dir, "missing"), nil); err == nil {
		t.Errorf("missing file: expected an error, got none")
	}
	path := filepath.Join(dir, "tokens")
	writeTokens(t, path, "tok_a tok_b\n")
	_, err := NewFileTokens(path, nil)
	if err == nil {
		t.Fatalf("two tokens on one line: expected an error, got none")
	}
	if strings.Contains(err.Error(), "tok_a") {
		t.Errorf("error: expected no token material, got %q", err)
	}
}

func TestFileTokensEmptyFileRefusesEveryone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, path, "\n# nothing yet\n")
	ft, err := NewFileTokens(path, nil)
	if err != nil {
		t.Fatalf("NewFileTokens: %v", err)
	}
	if ft.Valid("anything") || ft.Valid("") {
		t.Errorf("empty token file: expected every token to be refused")
	}
}

func TestStaticTokens(t *testing.T) {
	s := NewStaticTokens("tok_1", "")
	if !s.Valid("tok_1") || s.Valid("") || s.Valid("tok_2") {
		t.Errorf("StaticTokens: expected only tok_1 to be valid")
	}
}

func writeTokens(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatalf("write token file: %v", err)
	}
}
