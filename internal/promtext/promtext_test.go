package promtext

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

const exposition = `# HELP callbackd_callbacks_total Callbacks by outcome.
# TYPE callbackd_callbacks_total counter
callbackd_callbacks_total{channel="ali",outcome="applied"} 7
callbackd_callbacks_total{channel="ali",outcome="duplicate"} 3
callbackd_callbacks_total{channel="wx",outcome="applied"} 5
# HELP callbackd_inflight Requests in flight.
# TYPE callbackd_inflight gauge
callbackd_inflight{channel="ali"} 2
callbackd_inflight{channel="wx"} 1.5
# HELP callbackd_latency_seconds Latency.
# TYPE callbackd_latency_seconds histogram
callbackd_latency_seconds_bucket{channel="ali",le="0.1"} 4
callbackd_latency_seconds_bucket{channel="ali",le="+Inf"} 6
callbackd_latency_seconds_sum{channel="ali"} 0.9
callbackd_latency_seconds_count{channel="ali"} 6
# HELP go_gc_duration_seconds GC pauses.
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0.5"} 0.001
go_gc_duration_seconds_sum 0.01
go_gc_duration_seconds_count 9
# HELP callbackd_degraded_total Degraded by reason.
# TYPE callbackd_degraded_total counter
callbackd_degraded_total{reason="timeout"} 4
callbackd_degraded_total 1
`

func parse(t *testing.T) Families {
	t.Helper()
	f, err := Parse(strings.NewReader(exposition))
	if err != nil {
		t.Fatalf("Parse: expected no error, got %v", err)
	}
	return f
}

func TestSum(t *testing.T) {
	f := parse(t)
	tests := []struct {
		name   string
		family string
		match  map[string]string
		want   float64
	}{
		{"counter, all series", "callbackd_callbacks_total", nil, 15},
		{"counter, one label", "callbackd_callbacks_total", map[string]string{"outcome": "applied"}, 12},
		{"counter, two labels", "callbackd_callbacks_total", map[string]string{"channel": "ali", "outcome": "applied"}, 7},
		{"counter, no series match", "callbackd_callbacks_total", map[string]string{"channel": "none"}, 0},
		{"counter, label absent from every series", "callbackd_callbacks_total", map[string]string{"gate": "redis"}, 0},
		{"gauge by value", "callbackd_inflight", nil, 3.5},
		{"histogram by observation count", "callbackd_latency_seconds", map[string]string{"channel": "ali"}, 6},
		{"summary counts nothing", "go_gc_duration_seconds", nil, 0},
		{"family not exposed", "callbackd_missing_total", nil, 0},
		{"series without the label does not match", "callbackd_degraded_total", map[string]string{"reason": "timeout"}, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := f.Sum(tc.family, tc.match); got != tc.want {
				t.Errorf("Sum(%q, %v): expected %g, got %g", tc.family, tc.match, tc.want, got)
			}
		})
	}
}

func TestByLabel(t *testing.T) {
	f := parse(t)
	tests := []struct {
		name   string
		family string
		label  string
		match  map[string]string
		want   string
	}{
		{"all series", "callbackd_callbacks_total", "outcome", nil, "{applied=12 duplicate=3}"},
		{"filtered", "callbackd_callbacks_total", "outcome", map[string]string{"channel": "ali"}, "{applied=7 duplicate=3}"},
		{"series without the label under empty key", "callbackd_degraded_total", "reason", nil, "{=1 timeout=4}"},
		{"gauge", "callbackd_inflight", "channel", nil, "{ali=2 wx=1.5}"},
		{"family not exposed", "callbackd_missing_total", "reason", nil, "{}"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Format(f.ByLabel(tc.family, tc.label, tc.match)); got != tc.want {
				t.Errorf("ByLabel(%q, %q, %v): expected %s, got %s", tc.family, tc.label, tc.match, tc.want, got)
			}
		})
	}
}

func TestHas(t *testing.T) {
	f := parse(t)
	for name, want := range map[string]bool{"callbackd_callbacks_total": true, "callbackd_missing_total": false} {
		if got := f.Has(name); got != want {
			t.Errorf("Has(%q): expected %v, got %v", name, want, got)
		}
	}
}

func TestDeltaAndFormat(t *testing.T) {
	tests := []struct {
		name          string
		before, after map[string]float64
		want          string
	}{
		{"only moved keys", map[string]float64{"a": 1, "b": 2}, map[string]float64{"a": 1, "b": 5}, "{b=3}"},
		{"new key counts from 0", nil, map[string]float64{"x": 2}, "{x=2}"},
		{"key only in before is dropped", map[string]float64{"gone": 4}, map[string]float64{}, "{}"},
		{"sorted, %g", nil, map[string]float64{"z": 1e6, "m": 0.5, "a": 10}, "{a=10 m=0.5 z=1e+06}"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Format(Delta(tc.before, tc.after)); got != tc.want {
				t.Errorf("Format(Delta(%v, %v)): expected %s, got %s", tc.before, tc.after, tc.want, got)
			}
		})
	}
}

func TestParseRejectsBadText(t *testing.T) {
	if _, err := Parse(strings.NewReader("callbackd_x{ 1\n")); err == nil {
		t.Fatal("Parse of malformed text: expected an error, got nil")
	}
}

func TestScrape(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.Error(w, "no", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(exposition))
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	f, err := Scrape(ctx, srv.Client(), srv.URL+"/metrics")
	if err != nil {
		t.Fatalf("Scrape: expected no error, got %v", err)
	}
	if got := f.Sum("callbackd_callbacks_total", nil); got != 15 {
		t.Errorf("Scrape then Sum: expected 15, got %g", got)
	}

	_, err = Scrape(ctx, srv.Client(), srv.URL+"/other")
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("Scrape of a 503: expected an error naming 503, got %v", err)
	}
}
