package outbox_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed-1cff2221/callback-platform/callbackd/outbox"
)

// TestSecretDirsReadsTheCurrentFile: the endpoint's file is read at each attempt, so a rotated
// Secret is used at once; errors name the file, never its content.
func TestSecretDirsReadsTheCurrentFile(t *testing.T) {
	dir := t.TempDir()
	src := outbox.SecretDirs{"wx": dir}
	path := filepath.Join(dir, "crm")

	first, firstWhsec := newSecret(t)
	if err := os.WriteFile(path, []byte(firstWhsec+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := src.Secret("wx", "crm"); err != nil || !bytes.Equal(got, first) {
		t.Fatalf("Secret(wx, crm) = %x, %v; want the file's key", got, err)
	}
	second, secondWhsec := newSecret(t)
	if err := os.WriteFile(path, []byte(secondWhsec), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := src.Secret("wx", "crm"); err != nil || !bytes.Equal(got, second) {
		t.Fatalf("after a rotation, Secret(wx, crm) = %x, %v; want the new key", got, err)
	}

	malformed := "whsec_not*base64*" + strings.Repeat("x", 20)
	if err := os.WriteFile(filepath.Join(dir, "erp"), []byte(malformed), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ channel, endpoint, want string }{
		{"wx", "missing", "no secret file"},
		{"wx", "erp", "not whsec_"},
		{"other", "crm", "no delivery secret directory"},
		{"wx", "../crm", "invalid endpoint name"},
	} {
		_, err := src.Secret(tc.channel, tc.endpoint)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Secret(%s, %s) error = %v, want one mentioning %q", tc.channel, tc.endpoint, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), malformed) {
			t.Errorf("Secret(%s, %s) error echoes the file's content", tc.channel, tc.endpoint)
		}
	}
}
