// Package outbox delivers the side effects committed by the exactly-once pipeline to the
// merchant's systems, at least once, on the platform's own retry schedule.
//
// Apply (package store) writes one outbox_events row per effect inside the exactly-once
// transaction. The dispatcher then:
//
//  1. fans each new event out to the channel's endpoints whose event filter matches, one
//     outbox_deliveries row per (event, endpoint), so each endpoint retries and dead-letters on
//     its own (see migration 00010 for why the dispatcher, not a trigger, does this);
//  2. claims due deliveries with FOR UPDATE SKIP LOCKED in a one-statement transaction that also
//     counts the attempt and moves next_attempt_at to the end of a lease, so that several
//     replicas share the work without taking the same row, and a crashed replica's claims come
//     back by themselves when their lease ends;
//  3. sends each claimed delivery, outside any transaction, as a Standard Webhooks request
//     (webhook-id = WebhookID(event, endpoint), stable across attempts and redeliveries;
//     webhook-timestamp; webhook-signature "v1,<base64 HMAC-SHA256(secret, id.timestamp.body)>")
//     with the channel's timeout; any 2xx is delivered;
//  4. records the result if its claim still holds the lease: DELIVERED, or the next attempt at
//     now + the retry schedule's next interval with ±jitter, or DEAD with its last error after
//     the last interval.
//
// Each endpoint has a per-replica concurrency cap (DeliveryEndpoint.MaxConcurrency) and a
// circuit breaker. Delivery is at least once: a crash after the endpoint answered and before the
// result is recorded sends the event again with the same webhook-id, which is what receivers
// deduplicate on. A delivery is never attempted by two dispatchers at once as long as an attempt
// (bounded by the channel's timeout) ends within its lease, which NewDispatcher enforces.
package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-1cff2221/callback-platform/callbackd/clock"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/standardwebhooks"
)

// Defaults of Options and of channel settings left empty.
const (
	DefaultPollInterval     = time.Second
	DefaultExpandBatch      = 200
	DefaultJitter           = 0.1
	DefaultBreakerThreshold = 5
	DefaultBreakerCooldown  = 30 * time.Second
	DefaultStatsInterval    = 15 * time.Second
	// DefaultLeaseMargin is added to the longest delivery timeout to make the default lease: an
	// attempt that hits its timeout still records its result well within its lease.
	DefaultLeaseMargin    = 30 * time.Second
	DefaultTimeout        = 10 * time.Second
	DefaultMaxConcurrency = 8
	maxLastErrorLength    = 512
	maxResponseDrain      = 64 << 10
	recordTimeout         = 10 * time.Second
	headerWebhookID       = "webhook-id"
	headerWebhookTime     = "webhook-timestamp"
	headerWebhookSig      = "webhook-signature"
	deliveryContentType   = "application/json"
	deliveryUserAgent     = "callbackd-outbox/1"
)

// DefaultRetrySchedule is the wait before each retry when a channel configures none.
var DefaultRetrySchedule = []time.Duration{time.Minute, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 6 * time.Hour}

// Options configure a Dispatcher. Zero fields take the defaults.
type Options struct {
	// Clock decides due times, leases, retry times and webhook timestamps; the real clock when nil.
	Clock clock.Clock
	// HTTPClient sends the deliveries. When nil, a client that follows no redirects (a 3xx is a
	// failed attempt: the merchant must configure the final URL) is used. Per-attempt timeouts
	// come from the channel's Delivery.Timeout, not from the client.
	HTTPClient *http.Client
	// Secrets provide the endpoints' signing secrets; by default each channel's
	// Keys.DeliverySecretDir (SecretDirs).
	Secrets SecretSource
	// Registerer receives the metrics; nil registers nothing (the metrics still work).
	Registerer prometheus.Registerer
	// Logger receives operational messages (never secrets nor payloads); none when nil.
	Logger *slog.Logger
	// PollInterval is the longest pause between two looks for due work.
	PollInterval time.Duration
	// Lease is how long a claim keeps a delivery from other dispatchers. It must exceed every
	// channel's delivery timeout; by default the longest timeout plus DefaultLeaseMargin. Due
	// times and leases are written with one replica's clock and compared with another's, so
	// the replicas' clocks must agree to well within the margin (NTP does).
	Lease time.Duration
	// ExpandBatch bounds the events fanned out per transaction.
	ExpandBatch int
	// Jitter spreads each retry interval uniformly over ±Jitter of its length (DefaultJitter
	// when zero, none when negative, at most 0.5), so that events that failed together do not
	// retry together.
	Jitter float64
	// BreakerThreshold consecutive failures open an endpoint's circuit for BreakerCooldown.
	BreakerThreshold int
	BreakerCooldown  time.Duration
	// StatsInterval is how often Run refreshes the backlog, oldest-due and dead-letter gauges.
	StatsInterval time.Duration
}

// channelPlan is a channel's delivery settings, resolved.
type channelPlan struct {
	name      string
	schedule  []time.Duration
	timeout   time.Duration
	endpoints []*endpoint
}

// endpoint is one delivery target and its per-replica state.
type endpoint struct {
	channel  *channelPlan
	name     string
	url      string
	events   map[string]bool // nil: every event type
	maxConc  int
	breaker  *breaker
	inflight int // guarded by Dispatcher.mu
}

func (e *endpoint) accepts(eventType string) bool { return e.events == nil || e.events[eventType] }

// Dispatcher delivers outbox events. Run it once per process; several processes on one
// database share the work.
type Dispatcher struct {
	queue   *Queue
	opts    Options
	client  *http.Client
	secrets SecretSource
	logger  *slog.Logger
	metrics *metrics
	plans   map[string]*channelPlan
	targets []*endpoint

	mu   sync.Mutex // guards endpoint.inflight
	wake chan struct{}
	wg   sync.WaitGroup
}

// NewDispatcher validates the channels' delivery settings and returns a dispatcher for them on
// pool. Channels without endpoints are served too: their events are marked delivered, as there
// is nobody to deliver them to.
func NewDispatcher(pool *pgxpool.Pool, channels []config.Channel, opts Options) (*Dispatcher, error) {
	if pool == nil {
		return nil, errors.New("outbox: new dispatcher: nil pool")
	}
	if len(channels) == 0 {
		return nil, errors.New("outbox: new dispatcher: no channels")
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.ExpandBatch <= 0 {
		opts.ExpandBatch = DefaultExpandBatch
	}
	switch {
	case opts.Jitter == 0:
		opts.Jitter = DefaultJitter
	case opts.Jitter < 0:
		opts.Jitter = 0
	case opts.Jitter > 0.5:
		return nil, fmt.Errorf("outbox: new dispatcher: jitter %v is above 0.5", opts.Jitter)
	}
	if opts.BreakerThreshold <= 0 {
		opts.BreakerThreshold = DefaultBreakerThreshold
	}
	if opts.BreakerCooldown <= 0 {
		opts.BreakerCooldown = DefaultBreakerCooldown
	}
	if opts.StatsInterval <= 0 {
		opts.StatsInterval = DefaultStatsInterval
	}

	d := &Dispatcher{
		queue:  NewQueue(pool, opts.Clock),
		client: opts.HTTPClient,
		logger: opts.Logger.With(slog.String("component", "outbox")),
		plans:  make(map[string]*channelPlan, len(channels)),
		wake:   make(chan struct{}, 1),
	}
	secretDirs := SecretDirs{}
	var longest time.Duration
	for i, ch := range channels {
		p, err := planFor(ch, opts.BreakerThreshold, opts.BreakerCooldown)
		if err != nil {
			return nil, fmt.Errorf("outbox: new dispatcher: channels[%d]: %w", i, err)
		}
		if _, dup := d.plans[p.name]; dup {
			return nil, fmt.Errorf("outbox: new dispatcher: channel %q is configured twice", p.name)
		}
		d.plans[p.name] = p
		d.targets = append(d.targets, p.endpoints...)
		longest = max(longest, p.timeout)
		secretDirs[p.name] = ch.Keys.DeliverySecretDir
	}
	switch {
	case opts.Lease == 0:
		opts.Lease = longest + DefaultLeaseMargin
	case opts.Lease <= longest:
		return nil, fmt.Errorf("outbox: new dispatcher: lease %s must exceed the longest delivery timeout %s", opts.Lease, longest)
	}
	if opts.Secrets == nil {
		for _, p := range d.plans {
			if len(p.endpoints) > 0 && secretDirs[p.name] == "" {
				return nil, fmt.Errorf("outbox: new dispatcher: channel %s: keys.deliverySecretDir is required when delivery.endpoints are set", p.name)
			}
		}
		opts.Secrets = secretDirs
	}
	d.secrets = opts.Secrets
	// A missing or malformed secret is not fatal (a Secret may be mounted or fixed later, and
	// the other endpoints must not wait for it), but it is said at once rather than at the
	// first attempt.
	for _, ep := range d.targets {
		if _, err := d.secrets.Secret(ep.channel.name, ep.name); err != nil {
			d.logger.Warn("delivery endpoint has no usable signing secret; its attempts fail until it has one",
				slog.String("channel", ep.channel.name), slog.String("endpoint", ep.name), slog.String("error", err.Error()))
		}
	}
	if d.client == nil {
		// Keep as many idle connections per host as deliveries may run to one endpoint, so that a
		// busy endpoint's connections are reused rather than re-dialled (the default keeps 2).
		perHost := DefaultMaxConcurrency
		for _, ep := range d.targets {
			perHost = max(perHost, ep.maxConc)
		}
		transport := http.DefaultTransport.(*http.Transport).Clone()
		transport.MaxIdleConnsPerHost = perHost
		d.client = &http.Client{
			Transport:     transport,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("outbox: new dispatcher: register metrics: %w", err)
	}
	d.metrics = m
	d.opts = opts
	for _, ep := range d.targets {
		d.metrics.circuitOpen.WithLabelValues(ep.channel.name, ep.name).Set(0)
	}
	return d, nil
}

func planFor(ch config.Channel, threshold int, cooldown time.Duration) (*channelPlan, error) {
	if ch.Name == "" {
		return nil, errors.New("name is empty")
	}
	del := ch.Delivery
	p := &channelPlan{name: ch.Name, timeout: del.Timeout.Duration}
	if p.timeout == 0 {
		p.timeout = DefaultTimeout
	}
	if p.timeout < 0 {
		return nil, fmt.Errorf("delivery.timeout must be positive, got %s", p.timeout)
	}
	for j, d := range del.RetrySchedule {
		if d.Duration <= 0 {
			return nil, fmt.Errorf("delivery.retrySchedule[%d] must be positive, got %s", j, d.Duration)
		}
		p.schedule = append(p.schedule, d.Duration)
	}
	if len(p.schedule) == 0 {
		p.schedule = slices.Clone(DefaultRetrySchedule)
	}
	seen := map[string]bool{}
	for j, e := range del.Endpoints {
		field := fmt.Sprintf("delivery.endpoints[%d]", j)
		if !validEndpointName(e.Name) {
			return nil, fmt.Errorf("%s.name %q must be lower-case letters, digits and inner dashes (at most 63)", field, e.Name)
		}
		if seen[e.Name] {
			return nil, fmt.Errorf("%s.name %q is used twice", field, e.Name)
		}
		seen[e.Name] = true
		u, err := url.Parse(e.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%s.url must be an absolute http(s) URL", field)
		}
		ep := &endpoint{channel: p, name: e.Name, url: e.URL, maxConc: int(e.MaxConcurrency),
			breaker: newBreaker(threshold, cooldown)}
		if ep.maxConc == 0 {
			ep.maxConc = DefaultMaxConcurrency
		}
		if ep.maxConc < 0 {
			return nil, fmt.Errorf("%s.maxConcurrency must be positive, got %d", field, ep.maxConc)
		}
		if len(e.Events) > 0 {
			ep.events = make(map[string]bool, len(e.Events))
			for _, t := range e.Events {
				ep.events[t] = true
			}
		}
		p.endpoints = append(p.endpoints, ep)
	}
	return p, nil
}

// Queue returns the dispatcher's queue (listing and redelivery).
func (d *Dispatcher) Queue() *Queue { return d.queue }

// Run delivers until ctx is done, then waits for the attempts in flight to finish and record
// their results (each is bounded by its channel's delivery timeout) and returns nil. Database
// errors are logged and retried at the next poll: a database outage pauses delivery, it does not
// stop it. Run must not be called twice at once, nor together with RunOnce.
func (d *Dispatcher) Run(ctx context.Context) error {
	defer d.wg.Wait()
	d.logger.InfoContext(ctx, "outbox dispatcher started",
		slog.Int("channels", len(d.plans)), slog.Int("endpoints", len(d.targets)),
		slog.Duration("lease", d.opts.Lease))
	d.refreshStats(ctx)
	stats := time.NewTicker(d.opts.StatsInterval)
	defer stats.Stop()
	poll := time.NewTimer(0)
	defer poll.Stop()
	for {
		busy, _, err := d.step(ctx)
		if ctx.Err() != nil {
			d.logger.InfoContext(context.WithoutCancel(ctx), "outbox dispatcher stopping; waiting for attempts in flight")
			return nil
		}
		if err != nil {
			d.logger.WarnContext(ctx, "outbox pass failed; retrying at the next poll", slog.String("error", err.Error()))
		}
		if busy && err == nil {
			continue
		}
		poll.Reset(d.opts.PollInterval)
		select {
		case <-ctx.Done():
			d.logger.InfoContext(context.WithoutCancel(ctx), "outbox dispatcher stopping; waiting for attempts in flight")
			return nil
		case <-d.wake:
		case <-poll.C:
		case <-stats.C:
			d.refreshStats(ctx)
		}
	}
}

// RunOnce makes one pass: it fans out every new event, claims what is due for every endpoint
// (within the endpoints' concurrency caps and circuit breakers), waits for those attempts to
// finish and be recorded, and returns how many attempts it made. Tests and one-shot tools use
// it; it must not run together with Run.
func (d *Dispatcher) RunOnce(ctx context.Context) (int, error) {
	var errs []error
	for {
		n, err := d.queue.expand(ctx, d.plans, d.opts.ExpandBatch)
		if err != nil {
			errs = append(errs, err)
			break
		}
		if n < d.opts.ExpandBatch {
			break
		}
	}
	started, err := d.claimAll(ctx)
	d.wg.Wait()
	errs = append(errs, err)
	return started, errors.Join(errs...)
}

// step fans out one batch of new events and starts the attempts that are due and allowed. busy
// reports that more new events are waiting.
func (d *Dispatcher) step(ctx context.Context) (busy bool, started int, err error) {
	n, expErr := d.queue.expand(ctx, d.plans, d.opts.ExpandBatch)
	busy = n == d.opts.ExpandBatch
	started, claimErr := d.claimAll(ctx)
	return busy, started, errors.Join(expErr, claimErr)
}

// claimAll claims, for each endpoint, as many due deliveries as its free slots and its breaker
// allow, and starts them.
func (d *Dispatcher) claimAll(ctx context.Context) (started int, err error) {
	var errs []error
	for _, ep := range d.targets {
		now := d.opts.Clock.Now()
		allowed, probe := ep.breaker.allow(now)
		d.setCircuitGauge(ep, now)
		if allowed == 0 {
			continue
		}
		d.mu.Lock()
		free := ep.maxConc - ep.inflight
		d.mu.Unlock()
		if allowed > 0 {
			free = min(free, allowed)
		}
		if free <= 0 {
			if probe {
				ep.breaker.cancelProbe()
			}
			continue
		}
		claims, err := d.queue.claim(ctx, ep.channel.name, ep.name, free, d.opts.Lease)
		if err != nil {
			errs = append(errs, err)
		}
		if len(claims) == 0 && probe {
			ep.breaker.cancelProbe()
		}
		for i, c := range claims {
			d.mu.Lock()
			ep.inflight++
			d.mu.Unlock()
			d.wg.Add(1)
			go d.deliver(ctx, ep, c, probe && i == 0)
			started++
		}
	}
	return started, errors.Join(errs...)
}

// attempt is what one request produced.
type attempt struct {
	outcome    string
	httpStatus int
	err        string // "" when delivered
	// endpointFault: the failure says something about the endpoint (counts for its breaker).
	endpointFault bool
}

// deliver makes one attempt and records it. It runs on its own goroutine; the attempt and the
// recording are not cancelled by ctx (a stopping dispatcher finishes what it started), only
// bounded by the channel's timeout.
func (d *Dispatcher) deliver(ctx context.Context, ep *endpoint, c claimed, probe bool) {
	defer func() {
		d.mu.Lock()
		ep.inflight--
		d.mu.Unlock()
		select {
		case d.wake <- struct{}{}:
		default:
		}
		d.wg.Done()
	}()
	bg := context.WithoutCancel(ctx)
	started := time.Now()
	a := d.send(bg, ep, c)
	d.metrics.attemptSeconds.WithLabelValues(ep.channel.name, ep.name).Observe(time.Since(started).Seconds())
	d.metrics.attempts.WithLabelValues(ep.channel.name, ep.name, a.outcome).Inc()

	now := d.opts.Clock.Now()
	delivered := a.outcome == OutcomeDelivered
	if delivered || a.endpointFault {
		ep.breaker.done(now, delivered, probe)
	} else if probe {
		ep.breaker.cancelProbe()
	}
	d.setCircuitGauge(ep, now)

	r := result{delivered: delivered, httpStatus: a.httpStatus, errText: a.err}
	if !delivered {
		if c.attempt > len(ep.channel.schedule) {
			r.dead = true
		} else {
			r.nextAt = now.Add(d.jitter(ep.channel.schedule[c.attempt-1]))
		}
	}
	rctx, cancel := context.WithTimeout(bg, recordTimeout)
	defer cancel()
	recorded, err := d.queue.record(rctx, c, r)
	id := WebhookID(c.eventID, c.endpoint)
	switch {
	case err != nil:
		// The lease will expire and the delivery will be attempted again: at least once.
		d.logger.ErrorContext(bg, "recording a delivery attempt failed; it will be retried after its lease",
			slog.String("channel", ep.channel.name), slog.String("endpoint", ep.name),
			slog.String("webhook_id", id), slog.String("error", err.Error()))
	case !recorded:
		d.metrics.leasesLost.WithLabelValues(ep.channel.name).Inc()
		d.logger.WarnContext(bg, "delivery attempt outlived its lease; its result was dropped",
			slog.String("channel", ep.channel.name), slog.String("endpoint", ep.name), slog.String("webhook_id", id))
	case r.dead:
		d.metrics.deadLettered.WithLabelValues(ep.channel.name, ep.name).Inc()
		d.logger.WarnContext(bg, "delivery dead-lettered after its last attempt",
			slog.String("channel", ep.channel.name), slog.String("endpoint", ep.name), slog.String("webhook_id", id),
			slog.Int("attempts", c.attempt), slog.String("last_error", a.err))
	case !delivered:
		d.logger.InfoContext(bg, "delivery attempt failed; retry scheduled",
			slog.String("channel", ep.channel.name), slog.String("endpoint", ep.name), slog.String("webhook_id", id),
			slog.Int("attempt", c.attempt), slog.Time("next_attempt_at", r.nextAt), slog.String("error", a.err))
	}
}

// send makes the HTTP request of one attempt.
func (d *Dispatcher) send(ctx context.Context, ep *endpoint, c claimed) attempt {
	key, err := d.secrets.Secret(ep.channel.name, ep.name)
	if err != nil {
		return attempt{outcome: OutcomeNoSecret, err: truncate("signing secret unavailable: " + err.Error())}
	}
	ctx, cancel := context.WithTimeout(ctx, ep.channel.timeout)
	defer cancel()
	id := WebhookID(c.eventID, c.endpoint)
	ts := d.opts.Clock.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.url, bytes.NewReader(c.payload))
	if err != nil {
		return attempt{outcome: OutcomeNetworkError, err: truncate("build request: " + err.Error())}
	}
	req.Header.Set("Content-Type", deliveryContentType)
	req.Header.Set("User-Agent", deliveryUserAgent)
	req.Header.Set(headerWebhookID, id)
	req.Header.Set(headerWebhookTime, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(headerWebhookSig, standardwebhooks.Sign(key, id, ts, c.payload))
	resp, err := d.client.Do(req)
	if err != nil {
		return attempt{outcome: OutcomeNetworkError, err: truncate(requestError(err, ep.channel.timeout)), endpointFault: true}
	}
	// Drain (bounded) so that the connection is reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseDrain))
	_ = resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return attempt{outcome: OutcomeDelivered, httpStatus: resp.StatusCode}
	}
	return attempt{outcome: OutcomeHTTPError, httpStatus: resp.StatusCode,
		err: fmt.Sprintf("endpoint answered HTTP %d", resp.StatusCode), endpointFault: true}
}

// requestError describes a failed request without the URL (which may carry credentials or
// tokens in its query).
func requestError(err error, timeout time.Duration) string {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		if uerr.Timeout() {
			return fmt.Sprintf("no answer within %s", timeout)
		}
		err = uerr.Err
	}
	return "request failed: " + err.Error()
}

func truncate(s string) string {
	if len(s) <= maxLastErrorLength {
		return s
	}
	return s[:maxLastErrorLength]
}

// jitter spreads d over [d·(1-J), d·(1+J)].
func (d *Dispatcher) jitter(base time.Duration) time.Duration {
	j := d.opts.Jitter
	if j == 0 {
		return base
	}
	f := 1 + j*(2*rand.Float64()-1)
	return time.Duration(float64(base) * f)
}

func (d *Dispatcher) setCircuitGauge(ep *endpoint, now time.Time) {
	v := 0.0
	if ep.breaker.state(now) != breakerClosed {
		v = 1
	}
	d.metrics.circuitOpen.WithLabelValues(ep.channel.name, ep.name).Set(v)
}

// RefreshMetrics reads the backlog, oldest-due and dead-letter figures and sets the gauges. Run
// does it every StatsInterval.
func (d *Dispatcher) RefreshMetrics(ctx context.Context) error {
	names := make([]string, 0, len(d.plans))
	for name := range d.plans {
		names = append(names, name)
	}
	slices.Sort(names)
	stats, err := d.queue.stats(ctx, names)
	if err != nil {
		return err
	}
	now := d.opts.Clock.Now()
	for _, name := range names {
		s := stats[name]
		d.metrics.backlog.WithLabelValues(name).Set(float64(s.pending + s.unexpanded))
		d.metrics.deadLetters.WithLabelValues(name).Set(float64(s.dead))
		var oldest time.Duration
		for _, t := range []*time.Time{s.oldestDue, s.oldestNew} {
			if t != nil && now.Sub(*t) > oldest {
				oldest = now.Sub(*t)
			}
		}
		d.metrics.oldestDue.WithLabelValues(name).Set(oldest.Seconds())
	}
	return nil
}

func (d *Dispatcher) refreshStats(ctx context.Context) {
	if err := d.RefreshMetrics(ctx); err != nil && ctx.Err() == nil {
		d.logger.WarnContext(ctx, "refreshing outbox metrics failed", slog.String("error", err.Error()))
	}
}
