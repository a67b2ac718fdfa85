package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seed-1cff2221/callback-platform/callbackd/gate"
	"github.com/seed-1cff2221/callback-platform/callbackd/metrics"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/store"
)

const channel = "wx"

// fakeAdapter parses a body naming the test notification: "ok", "ignored", "refund", "panic", or
// "err:<reason>".
type fakeAdapter struct{ txn string }

func (fakeAdapter) Provider() string { return "fake" }

func (a fakeAdapter) Parse(_ context.Context, _ *http.Request, body []byte) (notify.Notification, error) {
	b := string(body)
	n := notify.Notification{
		Provider: "fake", MerchantID: "1900000001", OutTradeNo: "ORDER-1", Kind: notify.KindPayment,
		Status: notify.StatusSucceeded, Amount: 100, Currency: "CNY", ProviderTxnID: "txn-1",
		NotifyID: "n-1", BodyDigest: notify.Digest(body),
	}
	if a.txn != "" {
		n.ProviderTxnID = a.txn
	}
	switch {
	case b == "ok":
	case b == "ignored":
		n.Status = notify.StatusIgnored
	case b == "panic":
		panic("adapter bug")
	case strings.HasPrefix(b, "err:"):
		return notify.Notification{}, notify.Errorf(notify.Reason(strings.TrimPrefix(b, "err:")), "refused by the fake")
	default:
		return notify.Notification{}, notify.Errorf(notify.ReasonMalformed, "unknown test body")
	}
	return n, nil
}

func (fakeAdapter) Respond(w http.ResponseWriter, v notify.Verdict, msg string) {
	http.Error(w, msg, map[notify.Verdict]int{notify.Success: 200, notify.Retry: 500, notify.Reject: 400}[v])
}

// fakeLedger returns programmed answers and counts calls.
type fakeLedger struct {
	result      store.Result
	err         error
	committed   bool
	lookupErr   error
	applies     int
	lookups     int
	lastApplied notify.Notification
}

func (l *fakeLedger) Apply(_ context.Context, n notify.Notification) (store.Result, error) {
	l.applies++
	l.lastApplied = n
	return l.result, l.err
}

func (l *fakeLedger) NotificationCommitted(context.Context, notify.Notification) (bool, error) {
	l.lookups++
	return l.committed, l.lookupErr
}

// fakeClaims answers claims with the programmed outcomes in then (one per claim), then outcome
// for good, and records releases and marks.
type fakeClaims struct {
	then     []gate.Outcome
	outcome  gate.Outcome
	err      error
	markErr  error
	claims   int
	releases int
	marks    int
}

func (c *fakeClaims) Claim(context.Context, string, gate.Key, time.Duration) gate.Claim {
	c.claims++
	if len(c.then) > 0 {
		o := c.then[0]
		c.then = c.then[1:]
		return gate.Claim{Outcome: o}
	}
	return gate.Claim{Outcome: c.outcome, Err: c.err}
}

func (c *fakeClaims) Release(_ context.Context, cl gate.Claim) (bool, error) {
	if cl.Held() {
		c.releases++
	}
	return cl.Held(), nil
}

func (c *fakeClaims) MarkSuccess(context.Context, gate.Claim, time.Duration) (bool, error) {
	c.marks++
	return c.markErr == nil, c.markErr
}

type rig struct {
	p       *Pipeline
	ledger  *fakeLedger
	claims  *fakeClaims
	window  *gate.Window
	metrics *metrics.Metrics
	logs    *bytes.Buffer
}

func newRig(t *testing.T, ledger *fakeLedger, claims *fakeClaims) *rig {
	return newRigWait(t, ledger, claims, -1)
}

func newRigWait(t *testing.T, ledger *fakeLedger, claims *fakeClaims, contentionWait time.Duration) *rig {
	t.Helper()
	w, err := gate.NewWindow(gate.WindowOptions{MaxEntries: 100})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	logs := &bytes.Buffer{}
	opts := Options{
		Channels: []Channel{{Name: channel, Adapter: fakeAdapter{}, LockTTL: 10 * time.Second,
			SuccessTTL: 48 * time.Hour, WindowTTL: time.Minute}},
		Ledger: ledger, Window: w, Metrics: m,
		Logger:         slog.New(slog.NewJSONHandler(logs, nil)),
		ContentionWait: contentionWait,
	}
	if claims != nil {
		opts.Claims = claims
	}
	p, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &rig{p: p, ledger: ledger, claims: claims, window: w, metrics: m, logs: logs}
}

func (r *rig) process(body string) (notify.Verdict, string) {
	req := httptest.NewRequest(http.MethodPost, "/notify/"+channel, strings.NewReader(body))
	return r.p.Process(context.Background(), channel, req, []byte(body))
}

func (r *rig) counter(name string, labels ...string) float64 {
	m := r.metrics
	switch name {
	case "callbacks":
		return testutil.ToFloat64(m.Callbacks.WithLabelValues(append([]string{channel, "fake"}, labels...)...))
	case "dup":
		return testutil.ToFloat64(m.DuplicatesStopped.WithLabelValues(channel, labels[0]))
	case "anomaly":
		return testutil.ToFloat64(m.Anomalies.WithLabelValues(channel, labels[0]))
	case "degraded":
		return testutil.ToFloat64(m.RedisDegraded.WithLabelValues(channel, labels[0]))
	case "contention":
		return testutil.ToFloat64(m.LockContention.WithLabelValues(channel))
	}
	panic("unknown counter " + name)
}

func TestPipelineBranches(t *testing.T) {
	dbDown := errors.New("store: apply: dial tcp 127.0.0.1:5432: connection refused")
	type want struct {
		verdict  notify.Verdict
		outcome  string
		applies  int
		lookups  int
		releases int
		marks    int
		counters map[string]float64 // "dup:window", "anomaly:bad_signature", "degraded:claim_error", "contention"
		inWindow bool
	}
	cases := []struct {
		name   string
		body   string
		ledger fakeLedger
		claims *fakeClaims // nil: no Redis configured
		want   want
	}{
		{"forged signature is refused and counted", "err:bad_signature", fakeLedger{}, &fakeClaims{outcome: gate.Claimed},
			want{verdict: notify.Reject, outcome: metrics.OutcomeRejected, counters: map[string]float64{"anomaly:bad_signature": 1}}},
		{"signature probe is refused but is no anomaly", "err:signature_probe", fakeLedger{}, &fakeClaims{outcome: gate.Claimed},
			want{verdict: notify.Reject, outcome: metrics.OutcomeRejected, counters: map[string]float64{"anomaly:signature_probe": 0, "anomaly:bad_signature": 0}}},
		{"adapter panic is a malformed refusal", "panic", fakeLedger{}, &fakeClaims{outcome: gate.Claimed},
			want{verdict: notify.Reject, outcome: metrics.OutcomeRejected, counters: map[string]float64{"anomaly:malformed": 1}}},
		{"ignored status is acknowledged and not recorded", "ignored", fakeLedger{}, &fakeClaims{outcome: gate.Claimed},
			want{verdict: notify.Success, outcome: metrics.OutcomeIgnored}},
		{"claimed and applied: mark and remember", "ok", fakeLedger{result: store.Result{Outcome: store.Applied}}, &fakeClaims{outcome: gate.Claimed},
			want{verdict: notify.Success, outcome: metrics.OutcomeApplied, applies: 1, marks: 1, inWindow: true}},
		{"success mark in Redis is a duplicate stopped at redis", "ok", fakeLedger{}, &fakeClaims{outcome: gate.AlreadySucceeded},
			want{verdict: notify.Success, outcome: metrics.OutcomeDuplicate, counters: map[string]float64{"dup:redis": 1}, inWindow: true}},
		{"held by another, committed in the database", "ok", fakeLedger{committed: true}, &fakeClaims{outcome: gate.HeldByOther},
			want{verdict: notify.Success, outcome: metrics.OutcomeDuplicate, lookups: 1, counters: map[string]float64{"dup:database": 1, "contention": 1}, inWindow: true}},
		{"held by another, not committed: retry, never success", "ok", fakeLedger{committed: false}, &fakeClaims{outcome: gate.HeldByOther},
			want{verdict: notify.Retry, outcome: metrics.OutcomeRetry, lookups: 1, counters: map[string]float64{"contention": 1}}},
		{"held by another, database down: retry", "ok", fakeLedger{lookupErr: dbDown}, &fakeClaims{outcome: gate.HeldByOther},
			want{verdict: notify.Retry, outcome: metrics.OutcomeRetry, lookups: 1}},
		{"redis unavailable: the database decides", "ok", fakeLedger{result: store.Result{Outcome: store.Applied}},
			&fakeClaims{outcome: gate.Unavailable, err: errors.New("dial tcp: connection refused")},
			want{verdict: notify.Success, outcome: metrics.OutcomeApplied, applies: 1, marks: 1, counters: map[string]float64{"degraded:claim_error": 1}, inWindow: true}},
		{"redis timeout is counted apart", "ok", fakeLedger{result: store.Result{Outcome: store.Applied}},
			&fakeClaims{outcome: gate.Unavailable, err: context.DeadlineExceeded},
			want{verdict: notify.Success, outcome: metrics.OutcomeApplied, applies: 1, marks: 1, counters: map[string]float64{"degraded:claim_timeout": 1}, inWindow: true}},
		{"no redis configured", "ok", fakeLedger{result: store.Result{Outcome: store.Applied}}, nil,
			want{verdict: notify.Success, outcome: metrics.OutcomeApplied, applies: 1, inWindow: true}},
		{"duplicate found by the receipt", "ok", fakeLedger{result: store.Result{Outcome: store.Duplicate}}, &fakeClaims{outcome: gate.Claimed},
			want{verdict: notify.Success, outcome: metrics.OutcomeDuplicate, applies: 1, marks: 1, counters: map[string]float64{"dup:database": 1}, inWindow: true}},
		{"second payment recorded as an exception", "ok", fakeLedger{result: store.Result{Outcome: store.Exception, Exception: store.ExceptionDuplicatePayment}}, &fakeClaims{outcome: gate.Claimed},
			want{verdict: notify.Success, outcome: metrics.OutcomeException, applies: 1, marks: 1, counters: map[string]float64{"anomaly:payment_exception": 1}, inWindow: true}},
		{"no change is acknowledged", "ok", fakeLedger{result: store.Result{Outcome: store.NoChange}}, &fakeClaims{outcome: gate.Claimed},
			want{verdict: notify.Success, outcome: metrics.OutcomeNoChange, applies: 1, marks: 1, inWindow: true}},
		{"unknown order: reject, release, no mark", "ok", fakeLedger{result: store.Result{Outcome: store.UnknownOrder}}, &fakeClaims{outcome: gate.Claimed},
			want{verdict: notify.Reject, outcome: metrics.OutcomeRejected, applies: 1, releases: 1, counters: map[string]float64{"anomaly:unknown_order": 1}}},
		{"amount mismatch: reject, release, no mark", "ok", fakeLedger{result: store.Result{Outcome: store.AmountMismatch}}, &fakeClaims{outcome: gate.Claimed},
			want{verdict: notify.Reject, outcome: metrics.OutcomeRejected, applies: 1, releases: 1, counters: map[string]float64{"anomaly:amount_mismatch": 1}}},
		{"merchant mismatch: reject", "ok", fakeLedger{result: store.Result{Outcome: store.MerchantMismatch}}, &fakeClaims{outcome: gate.Claimed},
			want{verdict: notify.Reject, outcome: metrics.OutcomeRejected, applies: 1, releases: 1, counters: map[string]float64{"anomaly:merchant_mismatch": 1}}},
		{"currency mismatch: reject", "ok", fakeLedger{result: store.Result{Outcome: store.CurrencyMismatch}}, &fakeClaims{outcome: gate.Claimed},
			want{verdict: notify.Reject, outcome: metrics.OutcomeRejected, applies: 1, releases: 1, counters: map[string]float64{"anomaly:currency_mismatch": 1}}},
		{"database down: retry, release, nothing remembered", "ok", fakeLedger{err: dbDown}, &fakeClaims{outcome: gate.Claimed},
			want{verdict: notify.Retry, outcome: metrics.OutcomeRetry, applies: 1, releases: 1}},
		{"invalid input for the ledger: reject", "ok", fakeLedger{err: fmt.Errorf("store: apply: %w: unknown kind", store.ErrInvalidInput)}, &fakeClaims{outcome: gate.Claimed},
			want{verdict: notify.Reject, outcome: metrics.OutcomeRejected, applies: 1, releases: 1, counters: map[string]float64{"anomaly:malformed": 1}}},
		{"mark failure does not change the answer", "ok", fakeLedger{result: store.Result{Outcome: store.Applied}}, &fakeClaims{outcome: gate.Claimed, markErr: context.DeadlineExceeded},
			want{verdict: notify.Success, outcome: metrics.OutcomeApplied, applies: 1, marks: 1, counters: map[string]float64{"degraded:mark_timeout": 1}, inWindow: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ledger := c.ledger
			r := newRig(t, &ledger, c.claims)
			verdict, _ := r.process(c.body)
			if verdict != c.want.verdict {
				t.Fatalf("verdict: expected %s, got %s", c.want.verdict, verdict)
			}
			if got := r.counter("callbacks", c.want.outcome); got != 1 {
				t.Errorf("callbacks_total{outcome=%s}: expected 1, got %v", c.want.outcome, got)
			}
			if ledger.applies != c.want.applies || ledger.lookups != c.want.lookups {
				t.Errorf("ledger calls: expected %d apply / %d lookup, got %d / %d", c.want.applies, c.want.lookups, ledger.applies, ledger.lookups)
			}
			if c.claims != nil && (c.claims.releases != c.want.releases || c.claims.marks != c.want.marks) {
				t.Errorf("redis: expected %d release / %d mark, got %d / %d", c.want.releases, c.want.marks, c.claims.releases, c.claims.marks)
			}
			for spec, want := range c.want.counters {
				name, label, _ := strings.Cut(spec, ":")
				var got float64
				if label == "" {
					got = r.counter(name)
				} else {
					got = r.counter(name, label)
				}
				if got != want {
					t.Errorf("%s: expected %v, got %v", spec, want, got)
				}
			}
			n, _ := fakeAdapter{}.Parse(context.Background(), nil, []byte("ok"))
			n.Channel = channel
			if got := r.window.Contains(GateKey(n)); got != c.want.inWindow {
				t.Errorf("window holds the key: expected %t, got %t", c.want.inWindow, got)
			}
		})
	}
}

// A failed first attempt is never swallowed: its retry reaches the database, and only then is
// the key answered from the window.
func TestFailedFirstAttemptIsRetriedThenWindowed(t *testing.T) {
	ledger := &fakeLedger{err: errors.New("store: apply: timeout")}
	r := newRig(t, ledger, &fakeClaims{outcome: gate.Claimed})
	if v, _ := r.process("ok"); v != notify.Retry {
		t.Fatalf("first attempt with the database failing: expected retry, got %s", v)
	}
	ledger.err, ledger.result = nil, store.Result{Outcome: store.Applied}
	if v, _ := r.process("ok"); v != notify.Success {
		t.Fatalf("retry after recovery: expected success, got %s", v)
	}
	if v, _ := r.process("ok"); v != notify.Success {
		t.Fatalf("third attempt: expected success, got %s", v)
	}
	if ledger.applies != 2 {
		t.Fatalf("expected the failed attempt and its retry to reach the database (2 applies), got %d", ledger.applies)
	}
	if got := r.counter("dup", metrics.GateWindow); got != 1 {
		t.Fatalf("duplicates stopped at the window: expected 1, got %v", got)
	}
}

func TestGateKeySeparatesWhatTheDatabaseSeparates(t *testing.T) {
	base := notify.Notification{Channel: "wx", MerchantID: "m", OutTradeNo: "o", Kind: notify.KindPayment,
		Status: notify.StatusSucceeded, ProviderTxnID: "t1", NotifyID: "n1"}
	retry := base
	retry.NotifyID = "n2" // providers may change the notify id between retries
	second := base
	second.ProviderTxnID = "t2"
	refund := base
	refund.Kind, refund.OutRefundNo, refund.ProviderTxnID = notify.KindRefund, "r1", "t1"
	refundFailed := refund
	refundFailed.Status = notify.StatusFailed
	refundOtherTxn := refund
	refundOtherTxn.ProviderTxnID = "t9"

	if GateKey(base) != GateKey(retry) {
		t.Error("a retry with another notify id: expected the same gate key")
	}
	if GateKey(base) == GateKey(second) {
		t.Error("a second payment with another transaction id: expected another gate key (it must reach the database)")
	}
	if GateKey(refund) == GateKey(refundFailed) {
		t.Error("a failed refund: expected another gate key than its success")
	}
	if GateKey(refund) != GateKey(refundOtherTxn) {
		t.Error("refunds are keyed by refund number alone: expected the same gate key")
	}
}

func TestSecondPaymentReachesTheDatabase(t *testing.T) {
	ledger := &fakeLedger{result: store.Result{Outcome: store.Applied}}
	r := newRig(t, ledger, nil)
	if v, _ := r.process("ok"); v != notify.Success {
		t.Fatalf("first payment: expected success, got %s", v)
	}
	// Same order, another provider transaction: the window must not answer it.
	r.p.channels[channel].Adapter = fakeAdapter{txn: "txn-2"}
	ledger.result = store.Result{Outcome: store.Exception, Exception: store.ExceptionDuplicatePayment}
	if v, _ := r.process("ok"); v != notify.Success {
		t.Fatalf("second payment: expected success, got %s", v)
	}
	if ledger.applies != 2 || ledger.lastApplied.ProviderTxnID != "txn-2" {
		t.Fatalf("expected the second payment applied in the database, got %d applies (last txn %q)", ledger.applies, ledger.lastApplied.ProviderTxnID)
	}
}

func TestRefusalLogCarriesNoSecrets(t *testing.T) {
	r := newRig(t, &fakeLedger{result: store.Result{Outcome: store.AmountMismatch, Detail: "amount 100, order expects 90"}}, &fakeClaims{outcome: gate.Claimed})
	r.process("ok")
	logs := r.logs.String()
	if !strings.Contains(logs, `"reason":"amount_mismatch"`) || !strings.Contains(logs, `"order_no":"ORDER-1"`) {
		t.Fatalf("expected one structured refusal line with reason and order, got %s", logs)
	}
	if n := strings.Count(logs, "\n"); n != 1 {
		t.Fatalf("expected exactly one log line, got %d: %s", n, logs)
	}
	for _, secret := range []string{"whsec_", "openid", "BEGIN"} {
		if strings.Contains(logs, secret) {
			t.Fatalf("the log carries %q: %s", secret, logs)
		}
	}
}

func TestUnknownChannelIsRejected(t *testing.T) {
	r := newRig(t, &fakeLedger{}, nil)
	if _, ok := r.p.Adapter("nope"); ok {
		t.Fatal("Adapter of an unknown channel: expected not found")
	}
	if v, _ := r.p.Process(context.Background(), "nope", nil, []byte("ok")); v != notify.Reject {
		t.Fatalf("unknown channel: expected reject, got %s", v)
	}
}

func TestNewValidatesOptions(t *testing.T) {
	good := Channel{Name: "wx", Adapter: fakeAdapter{}, LockTTL: time.Second, SuccessTTL: time.Hour}
	cases := map[string]Options{
		"no ledger":     {Channels: []Channel{good}, Metrics: metrics.New()},
		"no metrics":    {Channels: []Channel{good}, Ledger: &fakeLedger{}},
		"no channels":   {Ledger: &fakeLedger{}, Metrics: metrics.New()},
		"no adapter":    {Channels: []Channel{{Name: "wx", LockTTL: time.Second, SuccessTTL: time.Hour}}, Ledger: &fakeLedger{}, Metrics: metrics.New()},
		"duplicate":     {Channels: []Channel{good, good}, Ledger: &fakeLedger{}, Metrics: metrics.New()},
		"zero lock TTL": {Channels: []Channel{{Name: "wx", Adapter: fakeAdapter{}, SuccessTTL: time.Hour}}, Ledger: &fakeLedger{}, Metrics: metrics.New()},
	}
	for name, opts := range cases {
		if _, err := New(opts); err == nil {
			t.Errorf("%s: expected an error, got none", name)
		}
	}
}

// In a replay storm the copies that find the key held wait for the holder's result instead of
// bouncing the provider.
func TestContentionWaitsForTheHolder(t *testing.T) {
	cases := []struct {
		name       string
		then       []gate.Outcome
		outcome    gate.Outcome
		ledger     fakeLedger
		verdict    notify.Verdict
		applies    int
		lookups    int
		dupRedis   float64
		contention float64
	}{
		{"the holder commits and marks", []gate.Outcome{gate.HeldByOther, gate.HeldByOther}, gate.AlreadySucceeded,
			fakeLedger{}, notify.Success, 0, 0, 1, 1},
		{"the holder fails and releases: we apply", []gate.Outcome{gate.HeldByOther}, gate.Claimed,
			fakeLedger{result: store.Result{Outcome: store.Applied}}, notify.Success, 1, 0, 0, 1},
		{"the holder stays: the database says committed", nil, gate.HeldByOther,
			fakeLedger{committed: true}, notify.Success, 0, 1, 0, 1},
		{"the holder stays: not committed, retry", nil, gate.HeldByOther,
			fakeLedger{}, notify.Retry, 0, 1, 0, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ledger := c.ledger
			claims := &fakeClaims{then: c.then, outcome: c.outcome}
			r := newRigWait(t, &ledger, claims, 300*time.Millisecond)
			start := time.Now()
			v, _ := r.process("ok")
			if v != c.verdict {
				t.Fatalf("verdict: expected %s, got %s", c.verdict, v)
			}
			if ledger.applies != c.applies || ledger.lookups != c.lookups {
				t.Fatalf("ledger calls: expected %d apply / %d lookup, got %d / %d", c.applies, c.lookups, ledger.applies, ledger.lookups)
			}
			if got := r.counter("dup", metrics.GateRedis); got != c.dupRedis {
				t.Fatalf("duplicates stopped at redis: expected %v, got %v", c.dupRedis, got)
			}
			if got := r.counter("contention"); got != c.contention {
				t.Fatalf("lock contention: expected %v, got %v", c.contention, got)
			}
			if elapsed := time.Since(start); elapsed > 2*time.Second {
				t.Fatalf("the wait must stay within its 300ms budget, took %s", elapsed)
			}
		})
	}
}

func TestContentionWaitStaysInsideTheRequestDeadline(t *testing.T) {
	ledger := &fakeLedger{}
	r := newRigWait(t, ledger, &fakeClaims{outcome: gate.HeldByOther}, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	req := httptest.NewRequest(http.MethodPost, "/notify/"+channel, strings.NewReader("ok"))
	v, _ := r.p.Process(ctx, channel, req, []byte("ok"))
	if elapsed := time.Since(start); elapsed > 600*time.Millisecond {
		t.Fatalf("with 700ms left and a 500ms reserve: expected to stop waiting after about 200ms, took %s", elapsed)
	}
	if v != notify.Retry || ledger.lookups != 1 {
		t.Fatalf("expected a database lookup then retry, got %s with %d lookups", v, ledger.lookups)
	}
}

func TestRefusalLogsAreBoundedButCounted(t *testing.T) {
	r := newRig(t, &fakeLedger{}, nil)
	const flood = 1000
	for range flood {
		r.process("err:bad_signature")
	}
	if got := r.counter("anomaly", "bad_signature"); got != flood {
		t.Fatalf("anomalies during a flood: expected every one counted (%d), got %v", flood, got)
	}
	lines := strings.Count(r.logs.String(), "\n")
	if lines < 1 || lines > refusalLogBurst+10 {
		t.Fatalf("log lines during a flood of %d refusals: expected between 1 and about %d, got %d", flood, refusalLogBurst, lines)
	}
	time.Sleep(100 * time.Millisecond) // the budget refills
	r.process("err:bad_signature")
	if !strings.Contains(r.logs.String(), `"suppressed_since_last"`) {
		t.Fatal("the first line after a flood: expected the number of dropped lines")
	}
}
