// Package metrics holds callbackd's Prometheus metrics, on a registry of its own. The names below
// are a contract: dashboards and alerts use them, so they change only with a deprecation.
//
// Labels are bounded on purpose: channel is a configured channel name (requests for an unknown
// channel are never labelled with the name they asked for), provider and the reason, gate and
// outcome values are closed sets defined here or in package notify. No label ever carries an
// order number, a key, an openid or any secret.
//
// Metrics of the pipeline and the HTTP server (registered by New):
//
//	callbackd_callbacks_total{channel,provider,outcome}     every callback answered, by Outcome*
//	callbackd_duplicates_stopped_total{channel,gate}        duplicates acknowledged, by Gate* (window, redis, database)
//	callbackd_redis_degraded_total{channel,reason}          Redis operations that failed and were skipped, by Degraded*
//	callbackd_lock_contention_total{channel}                callbacks that found their key claimed by another request in flight
//	callbackd_processing_seconds{channel,provider}          histogram of the time from body read to answer
//	callbackd_inflight                                      callbacks being processed now
//	callbackd_anomalies_total{channel,reason}               refused callbacks, by notify.Reason or Anomaly*
//	callbackd_overload_rejections_total{channel}            callbacks answered "retry" at once because MaxInFlight was reached
//
// Metrics of the provider adapters (registered on the same registry by package
// provider/internal/telemetry when a channel's adapter is built):
//
//	callbackd_key_verifications_total{channel,key_id,result} signature verifications per key (certificate serial, public key id)
//	callbackd_signature_probes_total{channel}               deliberate WeChat Pay signature probes, refused as designed
//	callbackd_key_reloads_total{channel,result}             key material re-reads
//
// Plus the Go runtime (go_*) and process (process_*) collectors.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
)

// The metric names, for dashboards, alerts and tests.
const (
	CallbacksTotal          = "callbackd_callbacks_total"
	DuplicatesStoppedTotal  = "callbackd_duplicates_stopped_total"
	RedisDegradedTotal      = "callbackd_redis_degraded_total"
	LockContentionTotal     = "callbackd_lock_contention_total"
	ProcessingSeconds       = "callbackd_processing_seconds"
	InFlight                = "callbackd_inflight"
	AnomaliesTotal          = "callbackd_anomalies_total"
	OverloadRejectionsTotal = "callbackd_overload_rejections_total"
	KeyVerificationsTotal   = "callbackd_key_verifications_total"
	SignatureProbesTotal    = "callbackd_signature_probes_total"
	KeyReloadsTotal         = "callbackd_key_reloads_total"
)

// Outcome label values of callbackd_callbacks_total.
const (
	// OutcomeApplied: the effect was committed by this request.
	OutcomeApplied = "applied"
	// OutcomeDuplicate: the effect had been committed before; acknowledged without effect.
	OutcomeDuplicate = "duplicate"
	// OutcomeException: a second, different payment for a paid order, recorded for a refund decision.
	OutcomeException = "exception"
	// OutcomeNoChange: valid and recorded, but the order was already past that state.
	OutcomeNoChange = "no_change"
	// OutcomeIgnored: valid, asks for no effect, acknowledged and not recorded.
	OutcomeIgnored = "ignored"
	// OutcomeRejected: refused (forged, malformed, unknown order, mismatch).
	OutcomeRejected = "rejected"
	// OutcomeRetry: not done; the provider is asked to resend (database down, key held elsewhere).
	OutcomeRetry = "retry"
	// OutcomeOverloaded: refused at the door because the replica was at its in-flight limit.
	OutcomeOverloaded = "overloaded"
)

// Gate label values of callbackd_duplicates_stopped_total.
const (
	GateWindow   = "window"
	GateRedis    = "redis"
	GateDatabase = "database"
)

// Reason label values of callbackd_redis_degraded_total: the operation and how it failed.
const (
	DegradedClaimTimeout   = "claim_timeout"
	DegradedClaimError     = "claim_error"
	DegradedMarkTimeout    = "mark_timeout"
	DegradedMarkError      = "mark_error"
	DegradedReleaseTimeout = "release_timeout"
	DegradedReleaseError   = "release_error"
)

// Reason label values of callbackd_anomalies_total beyond the adapters' notify.Reason values.
const (
	AnomalyUnknownOrder     = "unknown_order"
	AnomalyAmountMismatch   = "amount_mismatch"
	AnomalyMerchantMismatch = "merchant_mismatch"
	AnomalyCurrencyMismatch = "currency_mismatch"
	// AnomalyPaymentException is a second, different successful payment for a paid order.
	AnomalyPaymentException = "payment_exception"
	// AnomalyBodyTooLarge is a body over server.maxBodyBytes (same value as notify.ReasonTooLarge).
	AnomalyBodyTooLarge = string(notify.ReasonTooLarge)
)

// ProcessingBuckets are the latency buckets, in seconds: dense below the 5 s provider deadline.
var ProcessingBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2, 3, 4, 5}

// Metrics are callbackd's collectors, registered on Registry.
type Metrics struct {
	// Registry holds every collector; serve it on /metrics and hand it to the adapters.
	Registry *prometheus.Registry

	// Callbacks is callbackd_callbacks_total{channel,provider,outcome}.
	Callbacks *prometheus.CounterVec
	// DuplicatesStopped is callbackd_duplicates_stopped_total{channel,gate}.
	DuplicatesStopped *prometheus.CounterVec
	// RedisDegraded is callbackd_redis_degraded_total{channel,reason}.
	RedisDegraded *prometheus.CounterVec
	// LockContention is callbackd_lock_contention_total{channel}.
	LockContention *prometheus.CounterVec
	// Processing is callbackd_processing_seconds{channel,provider}.
	Processing *prometheus.HistogramVec
	// InFlight is callbackd_inflight.
	InFlight prometheus.Gauge
	// Anomalies is callbackd_anomalies_total{channel,reason}.
	Anomalies *prometheus.CounterVec
	// OverloadRejections is callbackd_overload_rejections_total{channel}.
	OverloadRejections *prometheus.CounterVec
}

// New creates the metrics on a fresh registry, with the Go and process collectors.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		Callbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: CallbacksTotal,
			Help: "Provider callbacks answered, by channel, provider and outcome (applied, duplicate, exception, no_change, ignored, rejected, retry, overloaded).",
		}, []string{"channel", "provider", "outcome"}),
		DuplicatesStopped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: DuplicatesStoppedTotal,
			Help: "Duplicate callbacks acknowledged without effect, by the gate that stopped them (window, redis, database).",
		}, []string{"channel", "gate"}),
		RedisDegraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: RedisDegradedTotal,
			Help: "Redis operations that failed or timed out; the Redis gate was skipped and the database gates decided.",
		}, []string{"channel", "reason"}),
		LockContention: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: LockContentionTotal,
			Help: "Callbacks that found their key claimed in Redis by another request in flight; they wait for its result, then ask the database (answering retry only if it is still uncommitted).",
		}, []string{"channel"}),
		Processing: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    ProcessingSeconds,
			Help:    "Time from the end of the body read to the verdict, by channel and provider.",
			Buckets: ProcessingBuckets,
		}, []string{"channel", "provider"}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: InFlight,
			Help: "Callbacks being processed by this replica now.",
		}),
		Anomalies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: AnomaliesTotal,
			Help: "Refused or suspicious callbacks, by reason (bad_signature, stale_timestamp, unknown_order, amount_mismatch, body_too_large, payment_exception, ...).",
		}, []string{"channel", "reason"}),
		OverloadRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: OverloadRejectionsTotal,
			Help: "Callbacks answered at once with a retryable failure because the replica was at its in-flight limit.",
		}, []string{"channel"}),
	}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.Callbacks, m.DuplicatesStopped, m.RedisDegraded, m.LockContention,
		m.Processing, m.InFlight, m.Anomalies, m.OverloadRejections,
	)
	return m
}

// InitChannel creates the series of one channel at zero, so that rate() and absence alerts work
// before the first event, and so that /metrics lists every metric from the start.
func (m *Metrics) InitChannel(channel, provider string) {
	for _, o := range []string{OutcomeApplied, OutcomeDuplicate, OutcomeException, OutcomeNoChange,
		OutcomeIgnored, OutcomeRejected, OutcomeRetry, OutcomeOverloaded} {
		m.Callbacks.WithLabelValues(channel, provider, o)
	}
	for _, g := range []string{GateWindow, GateRedis, GateDatabase} {
		m.DuplicatesStopped.WithLabelValues(channel, g)
	}
	for _, r := range []string{DegradedClaimTimeout, DegradedClaimError, DegradedMarkTimeout,
		DegradedMarkError, DegradedReleaseTimeout, DegradedReleaseError} {
		m.RedisDegraded.WithLabelValues(channel, r)
	}
	m.LockContention.WithLabelValues(channel)
	m.Processing.WithLabelValues(channel, provider)
	for _, r := range []string{AnomalyUnknownOrder, AnomalyAmountMismatch, AnomalyMerchantMismatch,
		AnomalyCurrencyMismatch, AnomalyPaymentException, AnomalyBodyTooLarge,
		string(notify.ReasonBadSignature), string(notify.ReasonUnknownKey), string(notify.ReasonStaleTimestamp),
		string(notify.ReasonDecrypt), string(notify.ReasonMalformed), string(notify.ReasonUnsupported)} {
		m.Anomalies.WithLabelValues(channel, r)
	}
	m.OverloadRejections.WithLabelValues(channel)
}

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}
