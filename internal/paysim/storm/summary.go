package storm

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
)

// Outcome is how the provider reads one answer.
type Outcome string

// The outcomes of a delivery attempt. Only OutcomeSuccess stops a provider from resending; the
// others are told apart for people reading a summary.
const (
	// OutcomeSuccess is the provider's success form: WeChat Pay 200 or 204; Alipay the exact
	// body "success" with 200; Stripe and Standard Webhooks any 2xx.
	OutcomeSuccess Outcome = "success"
	// OutcomeRetry is an answer asking for a resend: 5xx, 408 and 429, or for Alipay a 2xx
	// whose body is anything but "success".
	OutcomeRetry Outcome = "retry"
	// OutcomeReject is a refusal (another 4xx). Providers resend it too: none of them knows a
	// "permanent failure" answer.
	OutcomeReject Outcome = "reject"
	// OutcomeTransportError is no answer at all: refused connection, reset, timeout.
	OutcomeTransportError Outcome = "transport_error"
)

// Classify reads an HTTP answer as provider p does.
func Classify(p callbackdv1alpha1.Provider, status int, body []byte) Outcome {
	switch p {
	case callbackdv1alpha1.ProviderWeChatPay:
		if status == http.StatusOK || status == http.StatusNoContent {
			return OutcomeSuccess
		}
	case callbackdv1alpha1.ProviderAlipay:
		if status == http.StatusOK && bytes.Equal(body, []byte("success")) {
			return OutcomeSuccess
		}
		if status >= 200 && status < 300 {
			return OutcomeRetry
		}
	default:
		if status >= 200 && status < 300 {
			return OutcomeSuccess
		}
	}
	switch {
	case status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500:
		return OutcomeRetry
	case status >= 400:
		return OutcomeReject
	default: // 1xx, 3xx and WeChat Pay's other 2xx: not acknowledged, resent
		return OutcomeRetry
	}
}

// Summary is the result of a storm or a replay.
type Summary struct {
	// Provider and Target describe what was stormed.
	Provider callbackdv1alpha1.Provider `json:"provider"`
	Target   string                     `json:"target"`
	// Orders is the number of distinct trades notified.
	Orders int `json:"orders"`
	// OrdersAcknowledged is the number of orders at least one delivery of which was acknowledged
	// (in a storm, the duplicates of an order in flight are rightly told "not yet").
	OrdersAcknowledged int `json:"orders_acknowledged"`
	// Unacknowledged lists the orders of a storm none of whose deliveries was acknowledged: the
	// ones a provider would resend on its schedule.
	Unacknowledged []string `json:"unacknowledged,omitempty"`
	// Sent is the number of HTTP requests sent.
	Sent int `json:"sent"`
	// Answers counts the requests by outcome.
	Answers Answers `json:"answers"`
	// Latency of the answered and unanswered requests alike, from send to the end of the answer.
	Latency Latency `json:"latency"`
	// DurationSeconds is the wall time of the sending phase (signing excluded).
	DurationSeconds float64 `json:"duration_seconds"`
	// Throughput is Sent per second of DurationSeconds.
	Throughput float64 `json:"throughput_per_second"`
}

// Answers counts requests by outcome.
type Answers struct {
	Success        int `json:"success"`
	Retry          int `json:"retry"`
	Reject         int `json:"reject"`
	TransportError int `json:"transport_error"`
}

// Latency holds percentiles in milliseconds (nearest-rank).
type Latency struct {
	P50 float64 `json:"p50_ms"`
	P90 float64 `json:"p90_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// String renders the summary for people.
func (s Summary) String() string {
	return fmt.Sprintf("%s on %s: %d orders (%d acknowledged), %d notifications sent in %.2fs (%.0f/s)\n"+
		"  answers: success=%d retry=%d reject=%d transport_error=%d\n"+
		"  latency: p50=%.1fms p90=%.1fms p99=%.1fms max=%.1fms",
		s.Provider, s.Target, s.Orders, s.OrdersAcknowledged, s.Sent, s.DurationSeconds, s.Throughput,
		s.Answers.Success, s.Answers.Retry, s.Answers.Reject, s.Answers.TransportError,
		s.Latency.P50, s.Latency.P90, s.Latency.P99, s.Latency.Max)
}

// recorder accumulates attempts from many goroutines.
type recorder struct {
	mu        sync.Mutex
	answers   Answers
	latencies []time.Duration
}

func (r *recorder) record(o Outcome, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.latencies = append(r.latencies, d)
	switch o {
	case OutcomeSuccess:
		r.answers.Success++
	case OutcomeRetry:
		r.answers.Retry++
	case OutcomeReject:
		r.answers.Reject++
	default:
		r.answers.TransportError++
	}
}

// summary completes s with what was recorded over elapsed.
func (r *recorder) summary(s Summary, elapsed time.Duration) Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.Sent = len(r.latencies)
	s.Answers = r.answers
	s.Latency = percentiles(r.latencies)
	s.DurationSeconds = elapsed.Seconds()
	if elapsed > 0 {
		s.Throughput = float64(s.Sent) / elapsed.Seconds()
	}
	return s
}

// percentiles returns nearest-rank percentiles of ds (sorted in place).
func percentiles(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	rank := func(p int) float64 {
		i := (p*len(ds)+99)/100 - 1 // ceil(p/100 * n) - 1
		return ms(ds[max(i, 0)])
	}
	return Latency{P50: rank(50), P90: rank(90), P99: rank(99), Max: ms(ds[len(ds)-1])}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
