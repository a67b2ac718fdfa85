package outbox_test

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/outbox"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/standardwebhooks"
)

// overlapSink records, per webhook-id, every request and every time two requests for one id
// were in progress at once.
type overlapSink struct {
	*sink
	mu         sync.Mutex
	inProgress map[string]int
	overlaps   []string
	completed  map[string]int // answered 2xx by a handler that returned normally
	// hold, while set, keeps newly arriving requests waiting (unanswered) until release closes.
	hold    bool
	held    int
	release chan struct{}
}

func newOverlapSink(t *testing.T, work time.Duration) *overlapSink {
	t.Helper()
	o := &overlapSink{inProgress: map[string]int{}, completed: map[string]int{}, release: make(chan struct{})}
	o.sink = newSinkWith(t, always(http.StatusNoContent), func(r *http.Request) func() {
		id := r.Header.Get("webhook-id")
		o.mu.Lock()
		o.inProgress[id]++
		if o.inProgress[id] > 1 {
			o.overlaps = append(o.overlaps, id)
		}
		holding := o.hold
		if holding {
			o.held++
		}
		o.mu.Unlock()
		if holding {
			<-o.release
		} else {
			time.Sleep(work)
		}
		return func() {
			o.mu.Lock()
			o.inProgress[id]--
			if !holding {
				o.completed[id]++
			}
			o.mu.Unlock()
		}
	})
	return o
}

func (o *overlapSink) snapshot() (completed map[string]int, overlaps []string, held int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	completed = make(map[string]int, len(o.completed))
	for k, v := range o.completed {
		completed[k] = v
	}
	return completed, append([]string(nil), o.overlaps...), o.held
}

func (o *overlapSink) setHold(on bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.hold = on
}

// TestTwoDispatchersShareWorkWithoutConcurrentDelivery is acceptance 2, first half: two
// dispatchers (two pools, as two replicas) deliver 1,000 events; each is delivered at least once,
// both take part, and no event is ever in delivery by both at once.
func TestTwoDispatchersShareWorkWithoutConcurrentDelivery(t *testing.T) {
	db := newTestDB(t)
	key, _ := newSecret(t)
	s := newOverlapSink(t, time.Millisecond)
	ch := channel("wx", nil, callbackdv1alpha1.DeliveryEndpoint{Name: "crm", URL: s.srv.URL, MaxConcurrency: 8})
	ids := db.seedEvents(t, "wx", 1000)

	ctx, cancel := contextWithCancel(t)
	var wg sync.WaitGroup
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	for i, reg := range regs {
		d, err := outbox.NewDispatcher(db.newPool(t), []config.Channel{ch}, outbox.Options{
			Secrets: outbox.StaticSecrets{"wx": {"crm": key}}, Registerer: reg,
			PollInterval: 20 * time.Millisecond, ExpandBatch: 50,
		})
		if err != nil {
			t.Fatalf("NewDispatcher %d: %v", i, err)
		}
		wg.Go(func() {
			if err := d.Run(ctx); err != nil {
				t.Errorf("dispatcher %d Run: %v", i, err)
			}
		})
	}
	waitFor(t, time.Minute, "1,000 deliveries delivered", func() bool {
		return db.countDeliveries(t, outbox.StatusDelivered) == len(ids)
	})
	cancel()
	wg.Wait()

	completed, overlaps, _ := s.snapshot()
	if len(overlaps) > 0 {
		t.Errorf("%d deliveries were in progress twice at once (first: %s); want none", len(overlaps), overlaps[0])
	}
	for _, id := range ids {
		if completed[outbox.WebhookID(id, "crm")] < 1 {
			t.Errorf("event %s was never delivered", id)
		}
	}
	var total float64
	for i, reg := range regs {
		n := metricValue(t, reg, outbox.MetricAttemptsTotal)
		if n == 0 {
			t.Errorf("dispatcher %d made no attempt; the two replicas did not share the work", i)
		}
		total += n
	}
	t.Logf("1,000 events: %v attempts in all (redeliveries: %v)", total, total-float64(len(ids)))
}

// Environment of the child dispatcher process.
const (
	childEnv       = "OUTBOX_TEST_CHILD_DISPATCHER"
	childDSNEnv    = "OUTBOX_TEST_CHILD_DSN"
	childSinkEnv   = "OUTBOX_TEST_CHILD_SINK"
	childSecretEnv = "OUTBOX_TEST_CHILD_SECRET"
	childLease     = 2 * time.Second
)

// runChildDispatcher is the test binary re-executed as a dispatcher process: it delivers the
// channel "wx" to the sink until it is killed (or gets SIGTERM).
func runChildDispatcher() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pool, err := pgxpool.New(ctx, os.Getenv(childDSNEnv))
	if err != nil {
		logger.Error("child: pool", "error", err)
		return 2
	}
	defer pool.Close()
	key, err := standardwebhooks.ParseSecret(os.Getenv(childSecretEnv))
	if err != nil {
		logger.Error("child: secret", "error", err)
		return 2
	}
	ch := channel("wx", nil, callbackdv1alpha1.DeliveryEndpoint{Name: "crm", URL: os.Getenv(childSinkEnv), MaxConcurrency: 8})
	ch.Delivery.Timeout = metav1.Duration{Duration: time.Second}
	d, err := outbox.NewDispatcher(pool, []config.Channel{ch}, outbox.Options{
		Secrets: outbox.StaticSecrets{"wx": {"crm": key}}, Logger: logger,
		PollInterval: 50 * time.Millisecond, Lease: childLease,
	})
	if err != nil {
		logger.Error("child: dispatcher", "error", err)
		return 2
	}
	if err := d.Run(ctx); err != nil {
		logger.Error("child: run", "error", err)
		return 1
	}
	return 0
}

// startChild starts the test binary as a dispatcher process.
func startChild(t *testing.T, dsn, sinkURL, whsec string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("os.Executable: %v", err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", childDSNEnv+"="+dsn, childSinkEnv+"="+sinkURL, childSecretEnv+"="+whsec)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child dispatcher: %v", err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}

// TestDispatcherKilledMidDeliveryLosesNothing is acceptance 2, second half: a dispatcher process
// is killed with SIGKILL while deliveries are in flight (the sink holds them unanswered); after a
// restart every one of the 1,000 events is delivered, the interrupted ones again with the same
// webhook-id once their lease ends.
func TestDispatcherKilledMidDeliveryLosesNothing(t *testing.T) {
	db := newTestDB(t)
	_, whsec := newSecret(t)
	s := newOverlapSink(t, 2*time.Millisecond)
	ids := db.seedEvents(t, "wx", 1000)

	first := startChild(t, db.dsn, s.srv.URL, whsec)
	waitFor(t, time.Minute, "300 deliveries answered", func() bool {
		completed, _, _ := s.snapshot()
		return len(completed) >= 300
	})
	// Hold whatever arrives from now on, and kill the process once its 8 slots are all held.
	s.setHold(true)
	waitFor(t, 30*time.Second, "8 deliveries held in flight", func() bool {
		_, _, held := s.snapshot()
		return held >= 8
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	if err := first.Wait(); err == nil {
		t.Fatalf("killed dispatcher exited cleanly; want it killed by SIGKILL")
	}
	completedAtKill, _, held := s.snapshot()
	s.setHold(false)
	close(s.release) // the held handlers return; their connections are gone
	if pending := db.countDeliveries(t, outbox.StatusPending); pending == 0 {
		t.Fatalf("no delivery pending after the kill; the test did not interrupt any work")
	}
	t.Logf("killed with %d deliveries answered and %d held in flight", len(completedAtKill), held)

	restart := time.Now()
	second := startChild(t, db.dsn, s.srv.URL, whsec)
	waitFor(t, time.Minute, "all 1,000 deliveries delivered after the restart", func() bool {
		return db.countDeliveries(t, outbox.StatusDelivered) == len(ids)
	})
	t.Logf("all delivered %s after the restart (lease %s)", time.Since(restart).Round(10*time.Millisecond), childLease)
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	if err := second.Wait(); err != nil {
		t.Errorf("restarted dispatcher did not stop cleanly on SIGTERM: %v", err)
	}

	completed, overlaps, _ := s.snapshot()
	var missing []string
	for _, id := range ids {
		if completed[outbox.WebhookID(id, "crm")] < 1 {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%d events never answered by the sink (first: %s); want every one delivered at least once", len(missing), missing[0])
	}
	if len(overlaps) > 0 {
		t.Errorf("%d deliveries were in progress twice at once (first: %s); want none", len(overlaps), overlaps[0])
	}
	if n := db.countDeliveries(t, outbox.StatusDead); n != 0 {
		t.Errorf("%d deliveries dead; want none", n)
	}
}
