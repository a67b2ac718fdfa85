package hostile

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metricSet is one scrape of callbackd's /metrics.
type metricSet map[string]*dto.MetricFamily

func (e *env) scrape(t testing.TB) metricSet {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("scrape /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape /metrics: expected 200, got %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return families
}

// value sums a counter or gauge family over the series whose labels include match.
func (m metricSet) value(name string, match map[string]string) float64 {
	f, ok := m[name]
	if !ok {
		return 0
	}
	var sum float64
	for _, s := range f.GetMetric() {
		if !labelsMatch(s, match) {
			continue
		}
		switch {
		case s.Counter != nil:
			sum += s.GetCounter().GetValue()
		case s.Gauge != nil:
			sum += s.GetGauge().GetValue()
		case s.Histogram != nil:
			sum += float64(s.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// byLabel sums a family per value of one label, over the series whose labels include match.
func (m metricSet) byLabel(name, label string, match map[string]string) map[string]float64 {
	out := map[string]float64{}
	f, ok := m[name]
	if !ok {
		return out
	}
	for _, s := range f.GetMetric() {
		if !labelsMatch(s, match) {
			continue
		}
		v := ""
		for _, lp := range s.GetLabel() {
			if lp.GetName() == label {
				v = lp.GetValue()
			}
		}
		if s.Counter != nil {
			out[v] += s.GetCounter().GetValue()
		}
	}
	return out
}

func labelsMatch(s *dto.Metric, match map[string]string) bool {
	for name, want := range match {
		found := false
		for _, lp := range s.GetLabel() {
			if lp.GetName() == name && lp.GetValue() == want {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// delta is the per-label increase between two scrapes (only labels that moved).
func delta(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// format renders a label → value map sorted, for the evidence lines.
func format(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%g", k, m[k]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// anomalies is callbackd_anomalies_total of a channel by reason.
func (m metricSet) anomalies(channel string) map[string]float64 {
	return m.byLabel("callbackd_anomalies_total", "reason", map[string]string{"channel": channel})
}
