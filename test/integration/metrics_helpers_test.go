package integration_test

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

// metricSet is one scrape of /metrics: each family's series, by family name.
type metricSet map[string]*dto.MetricFamily

// scrape fetches and parses /metrics of inst.
func (s *stack) scrape(t testing.TB, inst *instance) metricSet {
	t.Helper()
	ms, err := s.tryScrape(inst)
	if err != nil {
		t.Fatalf("scrape %s/metrics: %v", inst.base, err)
	}
	return ms
}

func (s *stack) tryScrape(inst *instance) (metricSet, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, inst.base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	return families, nil
}

// total sums a family over every series whose labels include match: counters and gauges by
// value, histograms by their observation count.
func (m metricSet) total(name string, match map[string]string) float64 {
	f, ok := m[name]
	if !ok {
		return 0
	}
	var sum float64
	for _, series := range f.GetMetric() {
		if !labelsMatch(series, match) {
			continue
		}
		switch {
		case series.Counter != nil:
			sum += series.GetCounter().GetValue()
		case series.Gauge != nil:
			sum += series.GetGauge().GetValue()
		case series.Histogram != nil:
			sum += float64(series.GetHistogram().GetSampleCount())
		case series.Untyped != nil:
			sum += series.GetUntyped().GetValue()
		}
	}
	return sum
}

// has reports whether the family is exposed at all.
func (m metricSet) has(name string) bool {
	_, ok := m[name]
	return ok
}

// byLabel sums a family per value of one label, for logs.
func (m metricSet) byLabel(name, label string) map[string]float64 {
	out := map[string]float64{}
	f, ok := m[name]
	if !ok {
		return out
	}
	for _, series := range f.GetMetric() {
		v := "<none>"
		for _, lp := range series.GetLabel() {
			if lp.GetName() == label {
				v = lp.GetValue()
			}
		}
		switch {
		case series.Counter != nil:
			out[v] += series.GetCounter().GetValue()
		case series.Gauge != nil:
			out[v] += series.GetGauge().GetValue()
		case series.Histogram != nil:
			out[v] += float64(series.GetHistogram().GetSampleCount())
		}
	}
	return out
}

// diff returns the per-label increase from before to after, only the labels that changed.
func diffByLabel(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// format renders a label → value map sorted, for t.Logf evidence.
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

func labelsMatch(series *dto.Metric, match map[string]string) bool {
	for name, want := range match {
		found := false
		for _, lp := range series.GetLabel() {
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
