// Package telemetry holds the Prometheus metrics shared by the provider adapters: per-key
// signature verifications, signature probes and key reloads. Several channels (and several
// adapters in one process) register the same collectors; the second registration reuses the
// first, so building a second channel never fails on a duplicate metric.
package telemetry

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the adapters' counters. A nil *Metrics records nothing, which keeps adapters usable
// without a registry (unit tests, tools).
type Metrics struct {
	verifications *prometheus.CounterVec
	probes        *prometheus.CounterVec
	reloads       *prometheus.CounterVec
}

// New registers the counters with reg (nil: unregistered counters) and returns them.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		verifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "callbackd_key_verifications_total",
			Help: "Signature verifications by channel, key id (certificate serial, public key id or secret file name) and result (ok, bad_signature).",
		}, []string{"channel", "key_id", "result"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "callbackd_signature_probes_total",
			Help: "Deliberate signature probes (WeChat Pay WECHATPAY/SIGNTEST/) refused as designed; not an attack and not an outage.",
		}, []string{"channel"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "callbackd_key_reloads_total",
			Help: "Key material re-reads that changed the keys in use (result=ok) or failed and kept the previous keys (result=error).",
		}, []string{"channel", "result"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.verifications, err = register(reg, m.verifications); err != nil {
		return nil, err
	}
	if m.probes, err = register(reg, m.probes); err != nil {
		return nil, err
	}
	if m.reloads, err = register(reg, m.reloads); err != nil {
		return nil, err
	}
	return m, nil
}

func register(reg prometheus.Registerer, c *prometheus.CounterVec) (*prometheus.CounterVec, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		if existing, ok := already.ExistingCollector.(*prometheus.CounterVec); ok {
			return existing, nil
		}
	}
	return nil, fmt.Errorf("telemetry: register adapter metrics: %w", err)
}

// Verified counts one verification attempt against one key.
func (m *Metrics) Verified(channel, keyID string, ok bool) {
	if m == nil {
		return
	}
	result := "ok"
	if !ok {
		result = "bad_signature"
	}
	m.verifications.WithLabelValues(channel, keyID, result).Inc()
}

// Probe counts one refused signature probe.
func (m *Metrics) Probe(channel string) {
	if m == nil {
		return
	}
	m.probes.WithLabelValues(channel).Inc()
}

// Reloaded counts one key reload that changed the keys (err == nil) or failed (err != nil).
func (m *Metrics) Reloaded(channel string, err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.reloads.WithLabelValues(channel, result).Inc()
}
