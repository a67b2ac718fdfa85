package outbox_test

import (
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/clock"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/outbox"
)

var t0 = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)

func newDispatcher(t *testing.T, db *testDB, channels []config.Channel, opts outbox.Options) *outbox.Dispatcher {
	t.Helper()
	d, err := outbox.NewDispatcher(db.pool(), channels, opts)
	if err != nil {
		t.Fatalf("NewDispatcher: %v", err)
	}
	return d
}

func runOnce(t *testing.T, d *outbox.Dispatcher) int {
	t.Helper()
	n, err := d.RunOnce(testContext(t))
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	return n
}

func delivery(t *testing.T, q *outbox.Queue, eventID, endpoint string) outbox.Delivery {
	t.Helper()
	ds, err := q.List(testContext(t), outbox.Filter{EventID: eventID, Endpoint: endpoint})
	if err != nil || len(ds) != 1 {
		t.Fatalf("List(event %s, endpoint %s) = %d deliveries, %v; want exactly 1", eventID, endpoint, len(ds), err)
	}
	return ds[0]
}

// within reports whether got lies in base·[0.9, 1.1] after from (the default ±10% jitter).
func within(got, from time.Time, base time.Duration) bool {
	lo := from.Add(time.Duration(float64(base) * 0.9))
	hi := from.Add(time.Duration(float64(base) * 1.1))
	return !got.Before(lo) && !got.After(hi)
}

// TestRetryScheduleDeadLetterAndRedeliver is acceptance 1: a sink failing the first 3 attempts
// gets the event on the 4th, with one webhook-id, at the configured intervals; a sink that always
// fails ends dead after the last attempt with its last error; redeliver then delivers it once
// more with the same id, without re-applying the effect.
func TestRetryScheduleDeadLetterAndRedeliver(t *testing.T) {
	db := newTestDB(t)
	clk := clock.NewFake(t0)
	key, whsec := newSecret(t)
	verifier, err := standardwebhooks.NewWebhook(whsec)
	if err != nil {
		t.Fatalf("reference NewWebhook: %v", err)
	}

	flaky := newSink(t, func(_ string, n int) int {
		if n <= 3 {
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	})
	down := newSink(t, always(http.StatusServiceUnavailable))
	schedule := []time.Duration{time.Minute, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 6 * time.Hour}
	ch := channel("wx", schedule,
		callbackdv1alpha1.DeliveryEndpoint{Name: "flaky", URL: flaky.srv.URL},
		callbackdv1alpha1.DeliveryEndpoint{Name: "down", URL: down.srv.URL})
	d := newDispatcher(t, db, []config.Channel{ch}, outbox.Options{
		Clock:   clk,
		Secrets: outbox.StaticSecrets{"wx": {"flaky": key, "down": key}},
		// The breaker is not under test here; keep it out of the schedule's way.
		BreakerThreshold: 100,
	})
	q := d.Queue()
	eventID := db.payOrder(t, "wx", "order-1")

	// Drive the dispatcher through the schedule: at each step, check that nothing is attempted
	// a second before the earliest due delivery, then move the clock onto it.
	sentAt := map[string][]time.Time{} // endpoint → fake time of each attempt
	for pass := 0; pass < 20; pass++ {
		before := map[string]int{"flaky": len(flaky.got()), "down": len(down.got())}
		runOnce(t, d)
		for name, s := range map[string]*sink{"flaky": flaky, "down": down} {
			if len(s.got()) > before[name] {
				sentAt[name] = append(sentAt[name], clk.Now())
			}
		}
		var due []time.Time
		for _, name := range []string{"flaky", "down"} {
			if dl := delivery(t, q, eventID, name); dl.Status == outbox.StatusPending {
				due = append(due, dl.NextAttemptAt)
			}
		}
		if len(due) == 0 {
			break
		}
		next := slices.MinFunc(due, func(a, b time.Time) int { return a.Compare(b) })
		clk.Set(next.Add(-time.Second))
		if n := runOnce(t, d); n != 0 {
			t.Fatalf("a second before the next due time %s, RunOnce made %d attempts, want 0", next, n)
		}
		clk.Set(next)
	}

	// flaky: 4 attempts, one webhook-id, at t0, +1m, +5m, +30m (each ±10%).
	wantID := outbox.WebhookID(eventID, "flaky")
	reqs := flaky.got()
	if len(reqs) != 4 {
		t.Fatalf("flaky sink got %d requests, want 4 (3 failures, then the delivery)", len(reqs))
	}
	for i, r := range reqs {
		if r.webhookID != wantID {
			t.Errorf("flaky request %d webhook-id = %q, want %q on every attempt", i+1, r.webhookID, wantID)
		}
		if err := verifier.VerifyIgnoringTimestamp(r.body, r.header); err != nil {
			t.Errorf("flaky request %d: reference library rejects the signature: %v", i+1, err)
		}
		if r.timestamp != unixString(sentAt["flaky"][i]) {
			t.Errorf("flaky request %d webhook-timestamp = %s, want the clock's %s", i+1, r.timestamp, unixString(sentAt["flaky"][i]))
		}
	}
	if !sentAt["flaky"][0].Equal(t0) {
		t.Errorf("first attempt at %s, want at once (%s)", sentAt["flaky"][0], t0)
	}
	for i := 1; i < len(sentAt["flaky"]); i++ {
		if prev, got := sentAt["flaky"][i-1], sentAt["flaky"][i]; !within(got, prev, schedule[i-1]) {
			t.Errorf("flaky attempt %d at %s, want %s ±10%% after attempt %d at %s", i+1, got, schedule[i-1], i, prev)
		}
	}
	fl := delivery(t, q, eventID, "flaky")
	if fl.Status != outbox.StatusDelivered || fl.Attempts != 4 || fl.DeliveredAt == nil || fl.LastError != "" {
		t.Errorf("flaky delivery = %s after %d attempts (delivered_at %v, last error %q), want DELIVERED after 4 with no error",
			fl.Status, fl.Attempts, fl.DeliveredAt, fl.LastError)
	}

	// down: 1 + len(schedule) attempts, each interval respected, then dead with its last error.
	if got, want := len(down.got()), 1+len(schedule); got != want {
		t.Fatalf("always-failing sink got %d requests, want %d (the first attempt and one per retry interval)", got, want)
	}
	for i := 1; i < len(sentAt["down"]); i++ {
		if prev, got := sentAt["down"][i-1], sentAt["down"][i]; !within(got, prev, schedule[i-1]) {
			t.Errorf("down attempt %d at %s, want %s ±10%% after attempt %d at %s", i+1, got, schedule[i-1], i, prev)
		}
	}
	dead := delivery(t, q, eventID, "down")
	if dead.Status != outbox.StatusDead || dead.Attempts != 6 || dead.LastHTTPStatus != 503 ||
		dead.LastError != "endpoint answered HTTP 503" {
		t.Fatalf("down delivery = %s after %d attempts, last %d %q; want DEAD after 6, last 503 %q",
			dead.Status, dead.Attempts, dead.LastHTTPStatus, dead.LastError, "endpoint answered HTTP 503")
	}
	letters, err := q.DeadLetters(testContext(t), "wx", 10)
	if err != nil || len(letters) != 1 || letters[0].WebhookID != outbox.WebhookID(eventID, "down") {
		t.Fatalf("DeadLetters(wx) = %+v, %v; want exactly the down delivery", letters, err)
	}
	if st := eventStatus(t, db, eventID); st != "DEAD" {
		t.Errorf("event status roll-up = %s, want DEAD while one endpoint is dead", st)
	}

	// Redeliver after the endpoint is fixed: one more request, same id, no new effect.
	ledgerBefore := ledgerCount(t, db)
	down.setRespond(always(http.StatusOK))
	clk.Advance(24 * time.Hour)
	got, err := q.Redeliver(testContext(t), eventID, "down")
	if err != nil || len(got) != 1 || got[0].Status != outbox.StatusPending || got[0].Attempts != 0 ||
		got[0].Redeliveries != 1 || !got[0].NextAttemptAt.Equal(clk.Now()) {
		t.Fatalf("Redeliver = %+v, %v; want one PENDING delivery due now with a fresh cycle and 1 redelivery", got, err)
	}
	if n := runOnce(t, d); n != 1 {
		t.Fatalf("after Redeliver, RunOnce made %d attempts, want 1", n)
	}
	if n := runOnce(t, d); n != 0 {
		t.Fatalf("a second pass made %d attempts, want 0: a redelivery is sent once", n)
	}
	reqs = down.got()
	last := reqs[len(reqs)-1]
	if len(reqs) != 7 || last.webhookID != outbox.WebhookID(eventID, "down") || last.status != http.StatusOK {
		t.Fatalf("down sink got %d requests, last id %q answered %d; want 7, the same id %q, answered 200",
			len(reqs), last.webhookID, last.status, outbox.WebhookID(eventID, "down"))
	}
	if first := reqs[0].body; string(first) != string(last.body) {
		t.Errorf("redelivered body differs from the first attempt's:\nfirst %s\nlast  %s", first, last.body)
	}
	if dl := delivery(t, q, eventID, "down"); dl.Status != outbox.StatusDelivered {
		t.Errorf("after redelivery the delivery is %s, want DELIVERED", dl.Status)
	}
	if st := eventStatus(t, db, eventID); st != "DELIVERED" {
		t.Errorf("event status roll-up = %s, want DELIVERED once every endpoint has it", st)
	}
	if after := ledgerCount(t, db); after != ledgerBefore {
		t.Errorf("ledger entries went from %d to %d across a redelivery; a replay must never re-apply the effect", ledgerBefore, after)
	}
}

func eventStatus(t *testing.T, db *testDB, eventID string) string {
	t.Helper()
	var s string
	if err := db.pool().QueryRow(testContext(t), `SELECT status FROM outbox_events WHERE event_id = $1`, eventID).Scan(&s); err != nil {
		t.Fatalf("event status: %v", err)
	}
	return s
}

func ledgerCount(t *testing.T, db *testDB) int {
	t.Helper()
	var n int
	if err := db.pool().QueryRow(testContext(t), `SELECT count(*) FROM ledger_entries`).Scan(&n); err != nil {
		t.Fatalf("ledger count: %v", err)
	}
	return n
}

// TestSignaturesVerifyWithTheReferenceLibrary is acceptance 4: with the real clock, every
// delivery verifies with the Standard Webhooks reference implementation (timestamp tolerance
// included), and a verifier holding another secret refuses it (the check can fail).
func TestSignaturesVerifyWithTheReferenceLibrary(t *testing.T) {
	db := newTestDB(t)
	key, whsec := newSecret(t)
	_, otherWhsec := newSecret(t)
	right, err := standardwebhooks.NewWebhook(whsec)
	if err != nil {
		t.Fatalf("reference NewWebhook: %v", err)
	}
	wrong, err := standardwebhooks.NewWebhook(otherWhsec)
	if err != nil {
		t.Fatalf("reference NewWebhook: %v", err)
	}
	s := newSink(t, always(http.StatusOK))
	ch := channel("sw", nil, callbackdv1alpha1.DeliveryEndpoint{Name: "crm", URL: s.srv.URL})
	d := newDispatcher(t, db, []config.Channel{ch}, outbox.Options{Secrets: outbox.StaticSecrets{"sw": {"crm": key}}})
	var ids []string
	for i := range 5 {
		ids = append(ids, db.payOrder(t, "sw", "sig-"+string(rune('a'+i))))
	}
	if n := runOnce(t, d); n != len(ids) {
		t.Fatalf("RunOnce made %d attempts, want %d", n, len(ids))
	}
	reqs := s.got()
	if len(reqs) != len(ids) {
		t.Fatalf("sink got %d requests, want %d", len(reqs), len(ids))
	}
	for _, r := range reqs {
		if err := right.Verify(r.body, r.header); err != nil {
			t.Errorf("delivery %s: reference library rejects the signature: %v", r.webhookID, err)
		}
		if err := wrong.Verify(r.body, r.header); err == nil {
			t.Errorf("delivery %s verifies with an unrelated secret; the signature check is not discriminating", r.webhookID)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("delivery %s Content-Type = %q, want application/json", r.webhookID, ct)
		}
	}
}

// TestCircuitBreakerStopsClaimingAndProbes: after the threshold of consecutive failures an
// endpoint is left alone (its deliveries stay due, their schedules untouched) until the cooldown
// ends; then a single probe goes out, and its success resumes delivery.
func TestCircuitBreakerStopsClaimingAndProbes(t *testing.T) {
	db := newTestDB(t)
	clk := clock.NewFake(t0)
	key, _ := newSecret(t)
	s := newSink(t, always(http.StatusInternalServerError))
	ch := channel("wx", []time.Duration{time.Hour},
		callbackdv1alpha1.DeliveryEndpoint{Name: "crm", URL: s.srv.URL, MaxConcurrency: 1})
	reg := prometheus.NewRegistry()
	d := newDispatcher(t, db, []config.Channel{ch}, outbox.Options{
		Clock: clk, Secrets: outbox.StaticSecrets{"wx": {"crm": key}}, Registerer: reg,
		BreakerThreshold: 3, BreakerCooldown: 30 * time.Second,
	})
	for i := range 10 {
		db.payOrder(t, "wx", "cb-"+string(rune('a'+i)))
	}
	for pass := 1; pass <= 10; pass++ {
		want := 1 // MaxConcurrency 1: one attempt per pass
		if pass > 3 {
			want = 0 // open after 3 consecutive failures
		}
		if n := runOnce(t, d); n != want {
			t.Fatalf("pass %d made %d attempts, want %d", pass, n, want)
		}
	}
	if got := metricValue(t, reg, outbox.MetricCircuitOpen); got != 1 {
		t.Errorf("%s = %v while open, want 1", outbox.MetricCircuitOpen, got)
	}
	if pending := db.countDeliveries(t, outbox.StatusPending); pending != 10 {
		t.Fatalf("%d deliveries pending, want all 10 (3 failed once, 7 untouched)", pending)
	}

	s.setRespond(always(http.StatusOK))
	clk.Advance(29 * time.Second)
	if n := runOnce(t, d); n != 0 {
		t.Fatalf("1s before the cooldown ends, a pass made %d attempts, want 0", n)
	}
	clk.Advance(time.Second)
	if n := runOnce(t, d); n != 1 {
		t.Fatalf("half-open pass made %d attempts, want exactly 1 probe", n)
	}
	if got := metricValue(t, reg, outbox.MetricCircuitOpen); got != 0 {
		t.Errorf("%s = %v after a successful probe, want 0", outbox.MetricCircuitOpen, got)
	}
	for range 6 {
		runOnce(t, d)
	}
	// The 3 that failed before are due only after their hour; the 7 untouched ones all went out.
	if delivered := db.countDeliveries(t, outbox.StatusDelivered); delivered != 7 {
		t.Errorf("%d deliveries delivered, want the 7 that never failed", delivered)
	}
}

// metricValue sums the values of every series of the named gauge or counter.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return sum
}

// TestConcurrencyCapPerEndpoint: Run never has more than MaxConcurrency requests in flight to one
// endpoint, and does reach it.
func TestConcurrencyCapPerEndpoint(t *testing.T) {
	db := newTestDB(t)
	key, _ := newSecret(t)
	var inflight, peak atomic.Int32
	s := newSinkWith(t, always(http.StatusOK), func(*http.Request) func() {
		n := inflight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(20 * time.Millisecond)
		return func() { inflight.Add(-1) }
	})
	ch := channel("wx", nil, callbackdv1alpha1.DeliveryEndpoint{Name: "crm", URL: s.srv.URL, MaxConcurrency: 3})
	d := newDispatcher(t, db, []config.Channel{ch}, outbox.Options{
		Secrets: outbox.StaticSecrets{"wx": {"crm": key}}, PollInterval: 20 * time.Millisecond,
	})
	db.seedEvents(t, "wx", 30)
	ctx, cancel := contextWithCancel(t)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	waitFor(t, 30*time.Second, "all 30 deliveries delivered", func() bool {
		return db.countDeliveries(t, outbox.StatusDelivered) == 30
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v after cancellation, want nil", err)
	}
	if p := peak.Load(); p != 3 {
		t.Errorf("peak concurrent requests to the endpoint = %d, want exactly its MaxConcurrency 3", p)
	}
}

// TestMetricsReportBacklogOldestDueAndDeadLetters checks the gauges against a known queue.
func TestMetricsReportBacklogOldestDueAndDeadLetters(t *testing.T) {
	db := newTestDB(t)
	clk := clock.NewFake(time.Now().UTC().Truncate(time.Second))
	key, _ := newSecret(t)
	s := newSink(t, always(http.StatusBadGateway))
	ch := channel("wx", []time.Duration{time.Minute}, callbackdv1alpha1.DeliveryEndpoint{Name: "crm", URL: s.srv.URL})
	reg := prometheus.NewRegistry()
	d := newDispatcher(t, db, []config.Channel{ch}, outbox.Options{
		Clock: clk, Secrets: outbox.StaticSecrets{"wx": {"crm": key}}, Registerer: reg, Jitter: -1,
	})
	db.seedEvents(t, "wx", 2)
	refresh := func() {
		t.Helper()
		if err := d.RefreshMetrics(testContext(t)); err != nil {
			t.Fatalf("RefreshMetrics: %v", err)
		}
	}
	check := func(stage, name string, want float64, tolerance float64) {
		t.Helper()
		got := metricValue(t, reg, name)
		if got < want-tolerance || got > want+tolerance {
			t.Errorf("%s: %s = %v, want %v (±%v)", stage, name, got, want, tolerance)
		}
	}
	refresh()
	check("before fan-out", outbox.MetricBacklog, 2, 0)
	check("before fan-out", outbox.MetricDeadLetters, 0, 0)

	runOnce(t, d) // both fail; retry in exactly 1m (no jitter)
	refresh()
	check("after first failures", outbox.MetricBacklog, 2, 0)
	check("after first failures", outbox.MetricOldestDueSeconds, 0, 0)

	clk.Advance(3 * time.Minute) // due for 2 minutes
	refresh()
	check("2 minutes overdue", outbox.MetricOldestDueSeconds, 120, 0)

	runOnce(t, d) // the last attempts fail: dead
	refresh()
	check("after dead-lettering", outbox.MetricBacklog, 0, 0)
	check("after dead-lettering", outbox.MetricDeadLetters, 2, 0)
	check("after dead-lettering", outbox.MetricDeadLetteredTotal, 2, 0)
	if got := metricValue(t, reg, outbox.MetricAttemptsTotal); got != 4 {
		t.Errorf("%s = %v, want 4 (2 events × 2 attempts)", outbox.MetricAttemptsTotal, got)
	}
}

// TestExpiredLeaseIsTakenOverAndTheLateResultDropped: a claim whose lease has ended belongs to
// whoever claims the delivery next; the first claimant's late result is not recorded (and is
// counted), so a slow or partitioned replica can never overwrite the newer attempt's outcome.
func TestExpiredLeaseIsTakenOverAndTheLateResultDropped(t *testing.T) {
	db := newTestDB(t)
	clk := clock.NewFake(t0)
	key, _ := newSecret(t)
	arrived := make(chan struct{}, 2)
	release := make(chan struct{})
	var taken atomic.Bool
	s := newSinkWith(t, always(http.StatusNoContent), func(*http.Request) func() {
		slowOne := taken.CompareAndSwap(false, true) // only the first request (the slow replica's) waits
		arrived <- struct{}{}
		if slowOne {
			<-release
		}
		return func() {}
	})
	ch := channel("wx", nil, callbackdv1alpha1.DeliveryEndpoint{Name: "crm", URL: s.srv.URL})
	opts := func(reg *prometheus.Registry) outbox.Options {
		return outbox.Options{Clock: clk, Secrets: outbox.StaticSecrets{"wx": {"crm": key}},
			Registerer: reg, Lease: time.Minute}
	}
	slowReg, fastReg := prometheus.NewRegistry(), prometheus.NewRegistry()
	slow := newDispatcher(t, db, []config.Channel{ch}, opts(slowReg))
	fast, err := outbox.NewDispatcher(db.newPool(t), []config.Channel{ch}, opts(fastReg))
	if err != nil {
		t.Fatalf("NewDispatcher: %v", err)
	}
	eventID := db.payOrder(t, "wx", "order-lease")

	slowDone := make(chan int, 1)
	go func() { slowDone <- runOnce(t, slow) }()
	<-arrived // the slow replica's attempt is at the endpoint, unanswered
	if n := runOnce(t, fast); n != 0 {
		t.Fatalf("while the lease runs, another replica made %d attempts, want 0", n)
	}
	clk.Advance(time.Minute + time.Second)
	if n := runOnce(t, fast); n != 1 {
		t.Fatalf("after the lease ended, the other replica made %d attempts, want 1 (the takeover)", n)
	}
	close(release)
	<-slowDone

	d := delivery(t, fast.Queue(), eventID, "crm")
	if d.Status != outbox.StatusDelivered || d.Attempts != 2 || d.InFlight {
		t.Errorf("delivery = %s after %d attempts (in flight %v), want DELIVERED after 2, not in flight", d.Status, d.Attempts, d.InFlight)
	}
	if got := metricValue(t, slowReg, outbox.MetricLeasesLostTotal); got != 1 {
		t.Errorf("slow replica %s = %v, want 1", outbox.MetricLeasesLostTotal, got)
	}
	if got := metricValue(t, fastReg, outbox.MetricLeasesLostTotal); got != 0 {
		t.Errorf("fast replica %s = %v, want 0", outbox.MetricLeasesLostTotal, got)
	}
}

// TestNewDispatcherRefusesBadSettings: settings that would break delivery are refused at start,
// naming the field.
func TestNewDispatcherRefusesBadSettings(t *testing.T) {
	db := newTestDB(t)
	ep := func(name, url string) callbackdv1alpha1.DeliveryEndpoint {
		return callbackdv1alpha1.DeliveryEndpoint{Name: name, URL: url}
	}
	ok := ep("crm", "https://crm.example/hooks")
	cases := []struct {
		name     string
		channels []config.Channel
		opts     outbox.Options
		want     string
	}{
		{"no channels", nil, outbox.Options{}, "no channels"},
		{"endpoint name not a label", []config.Channel{channel("wx", nil, ep("CRM", "https://x"))}, outbox.Options{}, "endpoints[0].name"},
		{"endpoint used twice", []config.Channel{channel("wx", nil, ok, ok)}, outbox.Options{}, "endpoints[1].name"},
		{"relative URL", []config.Channel{channel("wx", nil, ep("crm", "/hooks"))}, outbox.Options{}, "endpoints[0].url"},
		{"non-HTTP URL", []config.Channel{channel("wx", nil, ep("crm", "ftp://x/y"))}, outbox.Options{}, "endpoints[0].url"},
		{"non-positive retry interval", []config.Channel{channel("wx", []time.Duration{time.Minute, 0}, ok)}, outbox.Options{}, "retrySchedule[1]"},
		{"channel twice", []config.Channel{channel("wx", nil, ok), channel("wx", nil, ok)}, outbox.Options{}, "configured twice"},
		{"lease not above the timeout", []config.Channel{channel("wx", nil, ok)}, outbox.Options{Lease: 2 * time.Second}, "lease"},
		{"jitter above half", []config.Channel{channel("wx", nil, ok)}, outbox.Options{Jitter: 0.6}, "jitter"},
		{"endpoints without a secret directory", []config.Channel{channel("wx", nil, ok)}, outbox.Options{}, "keys.deliverySecretDir"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			if tc.want != "keys.deliverySecretDir" {
				opts.Secrets = outbox.StaticSecrets{}
			}
			_, err := outbox.NewDispatcher(db.pool(), tc.channels, opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewDispatcher error = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}
