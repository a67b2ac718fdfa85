package outbox

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, for dashboards, alerts and tests. Labels are bounded: channel and endpoint are
// configured names, outcome is one of the Outcome* values.
const (
	// MetricBacklog is a gauge per channel: deliveries not yet delivered nor dead (including
	// those in flight), plus events not fanned out to their endpoints yet.
	MetricBacklog = "callbackd_outbox_backlog"
	// MetricOldestDueSeconds is a gauge per channel: how long the longest-waiting due delivery
	// (or event not fanned out yet) has been due; 0 when nothing is overdue.
	MetricOldestDueSeconds = "callbackd_outbox_oldest_due_seconds"
	// MetricAttemptsTotal counts delivery attempts per channel, endpoint and outcome.
	MetricAttemptsTotal = "callbackd_outbox_attempts_total"
	// MetricDeadLetters is a gauge per channel: deliveries in the dead-letter state now (it goes
	// down when an operator redelivers them). A gauge rather than a counter so that an alert can
	// say "there are dead letters" rather than "there were".
	MetricDeadLetters = "callbackd_outbox_dead_letters"
	// MetricDeadLetteredTotal counts deliveries this replica moved to the dead-letter state.
	MetricDeadLetteredTotal = "callbackd_outbox_dead_lettered_total"
	// MetricCircuitOpen is a gauge per channel and endpoint: 1 while the endpoint's circuit
	// breaker (on this replica) is open or half-open.
	MetricCircuitOpen = "callbackd_outbox_circuit_open"
	// MetricAttemptSeconds is a histogram of attempt durations per channel and endpoint.
	MetricAttemptSeconds = "callbackd_outbox_attempt_seconds"
	// MetricLeasesLostTotal counts attempts whose result could not be recorded because their
	// lease had been taken over (the attempt outlived its lease): a sign that the lease is too
	// short for the delivery timeout.
	MetricLeasesLostTotal = "callbackd_outbox_leases_lost_total"
)

// Outcome label values of callbackd_outbox_attempts_total.
const (
	// OutcomeDelivered: the endpoint answered 2xx.
	OutcomeDelivered = "delivered"
	// OutcomeHTTPError: the endpoint answered, but not 2xx.
	OutcomeHTTPError = "http_error"
	// OutcomeNetworkError: no answer (connection refused, reset, timeout).
	OutcomeNetworkError = "network_error"
	// OutcomeNoSecret: the endpoint's signing secret could not be read; nothing was sent.
	OutcomeNoSecret = "no_secret"
)

type metrics struct {
	backlog        *prometheus.GaugeVec
	oldestDue      *prometheus.GaugeVec
	attempts       *prometheus.CounterVec
	deadLetters    *prometheus.GaugeVec
	deadLettered   *prometheus.CounterVec
	circuitOpen    *prometheus.GaugeVec
	attemptSeconds *prometheus.HistogramVec
	leasesLost     *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricBacklog,
			Help: "Outbox deliveries not yet delivered nor dead, plus events not fanned out yet."}, []string{"channel"}),
		oldestDue: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricOldestDueSeconds,
			Help: "Seconds since the longest-waiting due outbox delivery became due (0 when none is overdue)."}, []string{"channel"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricAttemptsTotal,
			Help: "Outbox delivery attempts by outcome."}, []string{"channel", "endpoint", "outcome"}),
		deadLetters: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricDeadLetters,
			Help: "Outbox deliveries in the dead-letter state now."}, []string{"channel"}),
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricDeadLetteredTotal,
			Help: "Outbox deliveries moved to the dead-letter state by this replica."}, []string{"channel", "endpoint"}),
		circuitOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricCircuitOpen,
			Help: "1 while the endpoint's circuit breaker on this replica is open or half-open."}, []string{"channel", "endpoint"}),
		attemptSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricAttemptSeconds,
			Help:    "Duration of outbox delivery attempts.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"channel", "endpoint"}),
		leasesLost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricLeasesLostTotal,
			Help: "Delivery attempts whose result was not recorded because their lease had been taken over."}, []string{"channel"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.backlog, m.oldestDue, m.attempts, m.deadLetters,
		m.deadLettered, m.circuitOpen, m.attemptSeconds, m.leasesLost} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
