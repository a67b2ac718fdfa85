package outbox_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/outbox"
)

// buildCallbackd compiles cmd/callbackd into a temporary directory.
func buildCallbackd(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin := filepath.Join(t.TempDir(), "callbackd")
	build := exec.Command("go", "build", "-o", bin, "./cmd/callbackd")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/callbackd: %v\n%s", err, out)
	}
	return bin
}

// TestServeKilledMidDeliveryLosesNothing is acceptance 2 with the real daemon: `callbackd serve`
// delivers 1,000 committed events to a channel's endpoint, is killed with SIGKILL while 8
// deliveries are in flight, and after a restart every event has been delivered, each with a
// signature the reference library accepts, none twice at once.
func TestServeKilledMidDeliveryLosesNothing(t *testing.T) {
	db := newTestDB(t)
	bin := buildCallbackd(t)
	dir := t.TempDir()
	_, whsec := newSecret(t)
	_, inboundWhsec := newSecret(t)
	secretDir := filepath.Join(dir, "delivery")
	if err := os.Mkdir(secretDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secretDir, "crm"), []byte(whsec+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "inbound"), []byte(inboundWhsec+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newOverlapSink(t, 2*time.Millisecond)
	ids := db.seedEvents(t, "webhooks", 1000)

	cfg := config.File{
		Listen:   "127.0.0.1:0",
		Database: config.Database{DSN: db.dsn},
		Channels: []config.Channel{{Name: "webhooks", Keys: config.KeyFiles{
			WebhookSecretFiles: []string{filepath.Join(dir, "inbound")},
			DeliverySecretDir:  secretDir,
		}}},
	}
	ch := &cfg.Channels[0]
	ch.Provider = callbackdv1alpha1.ProviderStandardWebhooks
	ch.Merchant.MerchantID = "acct_1"
	ch.Delivery.Endpoints = []callbackdv1alpha1.DeliveryEndpoint{{Name: "crm", URL: s.srv.URL, MaxConcurrency: 8}}
	// The lease is the timeout plus 30s: the restarted daemon takes the killed one's claims
	// over about 31s after they were made.
	ch.Delivery.Timeout = metav1.Duration{Duration: time.Second}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config: %v", err)
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "callbackd.json")
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	start := func() *exec.Cmd {
		t.Helper()
		cmd := exec.Command(bin, "serve", "--config", cfgPath, "--log-level", "warn")
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = childProcAttr()
		if err := cmd.Start(); err != nil {
			t.Fatalf("start callbackd serve: %v", err)
		}
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		})
		return cmd
	}

	first := start()
	waitFor(t, time.Minute, "300 deliveries answered", func() bool {
		completed, _, _ := s.snapshot()
		return len(completed) >= 300
	})
	s.setHold(true)
	waitFor(t, 30*time.Second, "8 deliveries held in flight", func() bool {
		_, _, held := s.snapshot()
		return held >= 8
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	_ = first.Wait()
	s.setHold(false)
	close(s.release)

	second := start()
	waitFor(t, 90*time.Second, "all 1,000 deliveries delivered after the restart", func() bool {
		return db.countDeliveries(t, outbox.StatusDelivered) == len(ids)
	})
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	if err := second.Wait(); err != nil {
		t.Errorf("restarted callbackd did not stop cleanly on SIGTERM: %v", err)
	}

	completed, overlaps, _ := s.snapshot()
	for _, id := range ids {
		if completed[outbox.WebhookID(id, "crm")] < 1 {
			t.Fatalf("event %s never delivered; want every one delivered at least once", id)
		}
	}
	if len(overlaps) > 0 {
		t.Errorf("%d deliveries were in progress twice at once (first: %s); want none", len(overlaps), overlaps[0])
	}
	verifier, err := standardwebhooks.NewWebhook(whsec)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range s.got() {
		if err := verifier.Verify(r.body, r.header); err != nil {
			t.Fatalf("delivery %s: reference library rejects the signature: %v", r.webhookID, err)
		}
	}
}
