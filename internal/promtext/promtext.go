// Package promtext reads Prometheus text exposition (what callbackd serves on /metrics) for the
// test harnesses: one scrape becomes a Families value that tests query by family name and labels.
//
// It exists so that every harness sums series the same way: counters and gauges by value,
// histograms by their observation count, over the series whose labels include a given set of
// name=value pairs.
package promtext

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families is one scrape: each metric family by its name.
type Families map[string]*dto.MetricFamily

// Parse reads a text exposition. Metric and label names must be legacy (Prometheus 2) names,
// which is what callbackd exposes; anything else is a parse error.
func Parse(r io.Reader) (Families, error) {
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics text: %w", err)
	}
	return Families(fams), nil
}

// Scrape fetches url with client and parses the body. A status other than 200 is an error that
// names the status; the body of such a response is not parsed.
func Scrape(ctx context.Context, client *http.Client, url string) (Families, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil, fmt.Errorf("scrape %s: expected status 200, got %s", url, resp.Status)
	}
	fams, err := Parse(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return fams, nil
}

// Has reports whether the family is exposed at all (a vector with no series yet is absent).
func (f Families) Has(name string) bool {
	_, ok := f[name]
	return ok
}

// Sum adds up a family over every series whose labels include match. A series matches only
// when it carries each label of match with exactly that value; a nil or empty match takes
// every series. A family that is not exposed sums to 0.
func (f Families) Sum(name string, match map[string]string) float64 {
	var sum float64
	for _, s := range f[name].GetMetric() {
		if labelsMatch(s, match) {
			sum += value(s)
		}
	}
	return sum
}

// ByLabel adds up a family per value of one label, over the series whose labels include match
// (as in Sum). A series without that label is counted under the empty value.
func (f Families) ByLabel(name, label string, match map[string]string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range f[name].GetMetric() {
		if !labelsMatch(s, match) {
			continue
		}
		v := ""
		for _, lp := range s.GetLabel() {
			if lp.GetName() == label {
				v = lp.GetValue()
			}
		}
		out[v] += value(s)
	}
	return out
}

// value is what one series contributes to a sum: counters and gauges by value, histograms by
// their observation count. Summaries and untyped samples count 0 (callbackd exposes none that a
// harness sums).
func value(s *dto.Metric) float64 {
	switch {
	case s.Counter != nil:
		return s.GetCounter().GetValue()
	case s.Gauge != nil:
		return s.GetGauge().GetValue()
	case s.Histogram != nil:
		return float64(s.GetHistogram().GetSampleCount())
	}
	return 0
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

// Delta is the per-key increase from before to after, keeping only the keys that moved (a key
// missing from before counts as 0 there; a key only in before is not reported).
func Delta(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// Format renders a key → value map as "{k=v ...}" in key order, values with %g, so that log
// lines from two runs can be compared.
func Format(m map[string]float64) string {
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
