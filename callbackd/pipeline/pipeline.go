// Package pipeline is the exactly-once decision for one provider callback: verify and normalize
// (the channel's adapter), then the gates in order — the in-process window, the Redis claim, the
// PostgreSQL transaction — and the verdict the adapter renders for the provider.
//
// The rules that make it exactly-once, from other systems' bugs:
//
//   - Success is answered only for an effect committed in PostgreSQL: committed by this request,
//     found committed by the database (a duplicate), or vouched for by a gate that is written only
//     after a commit (the window of this replica, the Redis SUCCESS mark). A Redis claim held by
//     another request is never an answer by itself: the database is asked.
//   - Nothing records "done" before the work is done, so a failed first attempt is never
//     swallowed: its retry finds no window entry and no mark.
//   - A Redis failure skips the Redis gate; the database gates alone keep exactly-once.
//   - A database failure releases the claim and answers "retry", with nothing recorded.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/seed-1cff2221/callback-platform/callbackd/gate"
	"github.com/seed-1cff2221/callback-platform/callbackd/metrics"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/store"
)

// Ledger is the database gate, the source of truth: the one transaction that records a
// notification's receipt and effect, and the lookup of whether a notification is durably handled.
// *store.Store implements it.
type Ledger interface {
	// Apply runs the transaction for n. An error means nothing was committed.
	Apply(ctx context.Context, n notify.Notification) (store.Result, error)
	// NotificationCommitted reports whether this very notification (same key, same provider
	// transaction) is durably handled.
	NotificationCommitted(ctx context.Context, n notify.Notification) (bool, error)
}

// Claimer is the Redis gate (*gate.Claims). A nil Claimer skips the gate.
type Claimer interface {
	Claim(ctx context.Context, channel string, k gate.Key, lockTTL time.Duration) gate.Claim
	Release(ctx context.Context, c gate.Claim) (bool, error)
	MarkSuccess(ctx context.Context, c gate.Claim, successTTL time.Duration) (bool, error)
}

// Channel is one configured channel as the pipeline sees it.
type Channel struct {
	// Name is the {channel} path element.
	Name string
	// Adapter verifies and answers in the provider's dialect.
	Adapter notify.Adapter
	// LockTTL is the Redis claim lifetime.
	LockTTL time.Duration
	// SuccessTTL is the Redis SUCCESS mark lifetime.
	SuccessTTL time.Duration
	// WindowTTL is the in-process window lifetime of a finished key.
	WindowTTL time.Duration
}

// Options assemble a Pipeline.
type Options struct {
	Channels []Channel
	Ledger   Ledger
	// Claims is the Redis gate; nil runs on the window and the database alone.
	Claims Claimer
	// Window is the in-process gate; nil disables it.
	Window  *gate.Window
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	// GateTimeout bounds the best-effort Redis writes after the verdict (release, mark), which
	// run even when the request's context is already cancelled. Zero: 100 ms.
	GateTimeout time.Duration
	// ContentionWait bounds how long a request whose key another request holds waits for that
	// request's result before asking the database and, if still uncommitted, answering retry.
	// It is also capped by the request's deadline less AnswerReserve. Zero: 2 s; negative: no wait.
	ContentionWait time.Duration
	// AnswerReserve is the part of the request's deadline kept for the database lookup and the
	// answer after a contention wait. Zero: 500 ms.
	AnswerReserve time.Duration
}

// Refusal log budget: a steady rate with a burst, beyond which refusal lines are dropped and
// their number is reported on the next line written.
const (
	refusalLogsPerSecond = 20
	refusalLogBurst      = 100
)

// Pipeline processes callbacks. It is safe for concurrent use.
type Pipeline struct {
	channels    map[string]*Channel
	ledger      Ledger
	claims      Claimer
	window      *gate.Window
	metrics     *metrics.Metrics
	log         *slog.Logger
	gateTimeout time.Duration
	contention  time.Duration
	reserve     time.Duration
	// refusalLog bounds the refusal log lines (a forged-request flood must not flood the logs);
	// the anomaly counters still count every refusal.
	refusalLog *rate.Limiter
	suppressed atomic.Int64
	// lastDegradedLog rate-limits the Redis-degraded warning (unix nanoseconds), so that a
	// Redis outage during a storm logs once a second, not once a request; the counter counts all.
	lastDegradedLog atomic.Int64
}

// New validates the options and builds the pipeline.
func New(opts Options) (*Pipeline, error) {
	if opts.Ledger == nil {
		return nil, errors.New("pipeline: new: a Ledger is required")
	}
	if opts.Metrics == nil {
		return nil, errors.New("pipeline: new: Metrics are required")
	}
	if len(opts.Channels) == 0 {
		return nil, errors.New("pipeline: new: at least one channel is required")
	}
	p := &Pipeline{
		channels:    make(map[string]*Channel, len(opts.Channels)),
		ledger:      opts.Ledger,
		claims:      opts.Claims,
		window:      opts.Window,
		metrics:     opts.Metrics,
		log:         opts.Logger,
		gateTimeout: opts.GateTimeout,
		refusalLog:  rate.NewLimiter(rate.Limit(refusalLogsPerSecond), refusalLogBurst),
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.gateTimeout <= 0 {
		p.gateTimeout = 100 * time.Millisecond
	}
	switch p.contention = opts.ContentionWait; {
	case p.contention == 0:
		p.contention = 2 * time.Second
	case p.contention < 0:
		p.contention = 0
	}
	if p.reserve = opts.AnswerReserve; p.reserve <= 0 {
		p.reserve = 500 * time.Millisecond
	}
	for i := range opts.Channels {
		ch := opts.Channels[i]
		switch {
		case ch.Name == "":
			return nil, fmt.Errorf("pipeline: new: channels[%d] has no name", i)
		case ch.Adapter == nil:
			return nil, fmt.Errorf("pipeline: new: channel %q has no adapter", ch.Name)
		case ch.LockTTL <= 0 || ch.SuccessTTL <= 0:
			return nil, fmt.Errorf("pipeline: new: channel %q needs positive lock and success TTLs", ch.Name)
		}
		if _, dup := p.channels[ch.Name]; dup {
			return nil, fmt.Errorf("pipeline: new: channel %q configured twice", ch.Name)
		}
		p.channels[ch.Name] = &ch
		p.metrics.InitChannel(ch.Name, ch.Adapter.Provider())
	}
	return p, nil
}

// Adapter returns the adapter of a configured channel; ok is false for an unknown channel.
func (p *Pipeline) Adapter(channel string) (a notify.Adapter, ok bool) {
	ch, ok := p.channels[channel]
	if !ok {
		return nil, false
	}
	return ch.Adapter, true
}

// Channels lists the configured channel names.
func (p *Pipeline) Channels() []string {
	names := make([]string, 0, len(p.channels))
	for name := range p.channels {
		names = append(names, name)
	}
	return names
}

// Process decides one callback on a configured channel from its raw body (read by the caller
// under the size limit) and returns the verdict and a short, secret-free message for the
// adapter's answer. It never panics on input and never answers Success for an uncommitted
// effect. An unknown channel is Reject (callers route only configured channels here).
func (p *Pipeline) Process(ctx context.Context, channel string, r *http.Request, body []byte) (notify.Verdict, string) {
	ch, ok := p.channels[channel]
	if !ok {
		return notify.Reject, "unknown channel"
	}
	start := time.Now()
	provider := ch.Adapter.Provider()
	verdict, outcome, msg := p.decide(ctx, ch, r, body)
	p.metrics.Callbacks.WithLabelValues(ch.Name, provider, outcome).Inc()
	p.metrics.Processing.WithLabelValues(ch.Name, provider).Observe(time.Since(start).Seconds())
	return verdict, msg
}

// Refuse counts a callback refused before the pipeline saw it (an oversized body) and returns
// the verdict to answer.
func (p *Pipeline) Refuse(channel string, reason notify.Reason) (notify.Verdict, string) {
	ch, ok := p.channels[channel]
	if !ok {
		return notify.Reject, "unknown channel"
	}
	p.metrics.Anomalies.WithLabelValues(ch.Name, string(reason)).Inc()
	p.metrics.Callbacks.WithLabelValues(ch.Name, ch.Adapter.Provider(), metrics.OutcomeRejected).Inc()
	p.refused(p.log, "callback refused", "channel", ch.Name, "provider", ch.Adapter.Provider(), "reason", string(reason))
	return notify.Reject, string(reason)
}

// decide runs the gates and returns the verdict, the outcome label and the answer's message.
func (p *Pipeline) decide(ctx context.Context, ch *Channel, r *http.Request, body []byte) (notify.Verdict, string, string) {
	provider := ch.Adapter.Provider()

	// 1-2. Verify and normalize. A refusal changes nothing.
	n, err := p.parse(ctx, ch, r, body)
	if err != nil {
		reason := notify.ReasonOf(err)
		if reason != notify.ReasonProbe { // probes are counted by the adapter, apart, and page nobody
			p.metrics.Anomalies.WithLabelValues(ch.Name, string(reason)).Inc()
		}
		p.refused(p.log, "callback refused", "channel", ch.Name, "provider", provider, "reason", string(reason), "error", err.Error())
		return notify.Reject, metrics.OutcomeRejected, string(reason)
	}
	n.Channel = ch.Name
	if n.Status == notify.StatusIgnored {
		// Acknowledged and not recorded, so that it never shadows a later notification.
		return notify.Success, metrics.OutcomeIgnored, "ignored"
	}

	// 3. The key of this notification for the gates.
	k := GateKey(n)

	// 4. The in-process window: keys this replica finished itself.
	if p.window.Contains(k) {
		p.metrics.DuplicatesStopped.WithLabelValues(ch.Name, metrics.GateWindow).Inc()
		return notify.Success, metrics.OutcomeDuplicate, "duplicate"
	}
	logger := p.log.With("channel", ch.Name, "provider", provider, "key", k.Short())

	// 5. The Redis claim.
	claim := gate.Claim{Outcome: gate.Unavailable}
	if p.claims != nil {
		claim = p.claims.Claim(ctx, ch.Name, k, ch.LockTTL)
		switch claim.Outcome {
		case gate.HeldByOther:
			// Another request is on it (or crashed holding it). Wait a little for its result
			// rather than bouncing the provider at once: in a replay storm every copy but one
			// arrives while the first is still committing.
			p.metrics.LockContention.WithLabelValues(ch.Name).Inc()
			claim = p.awaitHolder(ctx, ch, k)
		}
		switch claim.Outcome {
		case gate.AlreadySucceeded:
			// The mark is written only after a commit (and the window only holds committed keys).
			stoppedAt := metrics.GateRedis
			if p.window.Contains(k) {
				stoppedAt = metrics.GateWindow
			}
			p.metrics.DuplicatesStopped.WithLabelValues(ch.Name, stoppedAt).Inc()
			p.window.Remember(k, ch.WindowTTL)
			return notify.Success, metrics.OutcomeDuplicate, "duplicate"
		case gate.Claimed:
			if p.window.Contains(k) { // finished here while we waited
				p.release(ctx, ch.Name, claim)
				p.metrics.DuplicatesStopped.WithLabelValues(ch.Name, metrics.GateWindow).Inc()
				return notify.Success, metrics.OutcomeDuplicate, "duplicate"
			}
		case gate.HeldByOther:
			// Still held: only the database knows whether the holder's effect is committed.
			committed, err := p.ledger.NotificationCommitted(ctx, n)
			if err != nil {
				logger.Error("receipt lookup failed; answering retry", "error", err.Error())
				return notify.Retry, metrics.OutcomeRetry, "temporarily unavailable"
			}
			if committed {
				p.metrics.DuplicatesStopped.WithLabelValues(ch.Name, metrics.GateDatabase).Inc()
				p.window.Remember(k, ch.WindowTTL)
				return notify.Success, metrics.OutcomeDuplicate, "duplicate"
			}
			return notify.Retry, metrics.OutcomeRetry, "processing"
		case gate.Unavailable:
			p.degraded(ch.Name, claim.Err, metrics.DegradedClaimTimeout, metrics.DegradedClaimError)
		}
	}

	// 6. The database transaction, the source of truth.
	res, err := p.ledger.Apply(ctx, n)
	if err != nil {
		p.release(ctx, ch.Name, claim)
		if errors.Is(err, store.ErrInvalidInput) {
			// An adapter produced a notification no order can take: resending cannot help.
			p.metrics.Anomalies.WithLabelValues(ch.Name, string(notify.ReasonMalformed)).Inc()
			p.refused(logger, "callback refused by the ledger", "reason", string(notify.ReasonMalformed), "error", err.Error())
			return notify.Reject, metrics.OutcomeRejected, string(notify.ReasonMalformed)
		}
		logger.Error("ledger apply failed; answering retry", "error", err.Error())
		return notify.Retry, metrics.OutcomeRetry, "temporarily unavailable"
	}
	switch res.Outcome {
	case store.Applied, store.Duplicate, store.Exception, store.NoChange:
		// 7. Committed (now or before): mark, remember, acknowledge.
		p.finish(ctx, ch, k, claim)
		switch res.Outcome {
		case store.Applied:
			return notify.Success, metrics.OutcomeApplied, "ok"
		case store.Duplicate:
			p.metrics.DuplicatesStopped.WithLabelValues(ch.Name, metrics.GateDatabase).Inc()
			return notify.Success, metrics.OutcomeDuplicate, "duplicate"
		case store.Exception:
			p.metrics.Anomalies.WithLabelValues(ch.Name, metrics.AnomalyPaymentException).Inc()
			logger.Warn("payment exception recorded for a person to decide",
				"exception", string(res.Exception), "order_status", res.OrderStatus, "event_id", res.EventID,
				"detail", res.Detail, "order_no", n.OutTradeNo, "kind", string(n.Kind), "amount", n.Amount,
				"currency", n.Currency)
			return notify.Success, metrics.OutcomeException, "ok"
		default:
			return notify.Success, metrics.OutcomeNoChange, "ok"
		}
	case store.Ignored:
		// Nothing recorded: neither the mark nor the window may answer for this key.
		p.release(ctx, ch.Name, claim)
		return notify.Success, metrics.OutcomeIgnored, "ignored"
	case store.UnknownOrder, store.AmountMismatch, store.MerchantMismatch, store.CurrencyMismatch:
		p.release(ctx, ch.Name, claim)
		reason := string(res.Outcome)
		p.metrics.Anomalies.WithLabelValues(ch.Name, reason).Inc()
		p.refused(logger, "callback refused by the ledger", "reason", reason, "detail", res.Detail,
			"order_no", n.OutTradeNo, "kind", string(n.Kind), "amount", n.Amount, "currency", n.Currency,
			"notify_id", n.NotifyID)
		return notify.Reject, metrics.OutcomeRejected, reason
	default:
		p.release(ctx, ch.Name, claim)
		logger.Error("ledger returned an unknown outcome; answering retry", "outcome", string(res.Outcome))
		return notify.Retry, metrics.OutcomeRetry, "temporarily unavailable"
	}
}

// awaitHolder polls the claim, with a growing pause, until the holder's result shows (the
// SUCCESS mark, or the key freed after its failure and claimed by us), Redis fails, or the wait
// budget ends (HeldByOther). A key finished by this replica meanwhile counts as the mark.
func (p *Pipeline) awaitHolder(ctx context.Context, ch *Channel, k gate.Key) gate.Claim {
	budget := p.contention
	if dl, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Until(dl)-p.reserve)
	}
	held := gate.Claim{Outcome: gate.HeldByOther}
	if budget <= 0 {
		return held
	}
	deadline := time.Now().Add(budget)
	pause := 5 * time.Millisecond
	timer := time.NewTimer(pause)
	defer timer.Stop()
	for {
		if time.Now().Add(pause).After(deadline) {
			return held
		}
		timer.Reset(pause)
		select {
		case <-ctx.Done():
			return held
		case <-timer.C:
		}
		if p.window.Contains(k) {
			return gate.Claim{Outcome: gate.AlreadySucceeded}
		}
		c := p.claims.Claim(ctx, ch.Name, k, ch.LockTTL)
		if c.Outcome != gate.HeldByOther {
			return c
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// GateKey is the key the window and the Redis claim deduplicate on: the idempotency key, plus
// what the database also tells apart under it, so that no gate can swallow a notification the
// database would act on: the status of an unsuccessful event (a failed refund never shadows its
// later success) and, for payments, the provider transaction (a second, different payment of the
// same order must reach the database and be recorded as an exception).
func GateKey(n notify.Notification) gate.Key {
	key := n.IdempotencyKey()
	if n.Status != notify.StatusSucceeded {
		key += "|status=" + string(n.Status)
	}
	if n.Kind == notify.KindPayment {
		key += "|txn=" + n.ProviderTxnID
	}
	return gate.KeyOf(key)
}

// parse runs the adapter, turning a panic in it into a refusal: input must never take the
// process down.
func (p *Pipeline) parse(ctx context.Context, ch *Channel, r *http.Request, body []byte) (n notify.Notification, err error) {
	defer func() {
		if v := recover(); v != nil {
			p.log.Error("adapter panicked on input", "channel", ch.Name, "provider", ch.Adapter.Provider(), "panic", fmt.Sprint(v))
			err = notify.Errorf(notify.ReasonMalformed, "adapter failed on this input")
		}
	}()
	return ch.Adapter.Parse(ctx, r, body)
}

// finish records a committed key in the gates: the Redis SUCCESS mark (best effort: a failure
// only means the next duplicate reaches the database) and the window.
func (p *Pipeline) finish(ctx context.Context, ch *Channel, k gate.Key, claim gate.Claim) {
	p.window.Remember(k, ch.WindowTTL)
	if p.claims == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.gateTimeout)
	defer cancel()
	if _, err := p.claims.MarkSuccess(ctx, claim, ch.SuccessTTL); err != nil {
		p.degraded(ch.Name, err, metrics.DegradedMarkTimeout, metrics.DegradedMarkError)
	}
}

// release gives back a claim this request holds after nothing was committed, so that the
// provider's retry is processed at once instead of after the lock TTL.
func (p *Pipeline) release(ctx context.Context, channel string, claim gate.Claim) {
	if p.claims == nil || !claim.Held() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.gateTimeout)
	defer cancel()
	if _, err := p.claims.Release(ctx, claim); err != nil {
		p.degraded(channel, err, metrics.DegradedReleaseTimeout, metrics.DegradedReleaseError)
	}
}

// refused writes one refusal line within the log budget, with the number of lines dropped
// since the previous one.
func (p *Pipeline) refused(logger *slog.Logger, msg string, args ...any) {
	if !p.refusalLog.Allow() {
		p.suppressed.Add(1)
		return
	}
	if n := p.suppressed.Swap(0); n > 0 {
		args = append(args, "suppressed_since_last", n)
	}
	logger.Warn(msg, args...)
}

// degraded counts a Redis failure and logs it at most once a second.
func (p *Pipeline) degraded(channel string, err error, timeoutReason, errorReason string) {
	reason := errorReason
	if gate.IsTimeout(err) {
		reason = timeoutReason
	}
	p.metrics.RedisDegraded.WithLabelValues(channel, reason).Inc()
	now := time.Now().UnixNano()
	last := p.lastDegradedLog.Load()
	if now-last >= int64(time.Second) && p.lastDegradedLog.CompareAndSwap(last, now) {
		msg := "<nil>"
		if err != nil {
			msg = err.Error()
		}
		p.log.Warn("redis gate skipped; the database gates decide", "channel", channel, "reason", reason, "error", msg)
	}
}
