package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/storage"
	"sigs.k8s.io/yaml"
)

// promqlParser parses with the options Prometheus itself uses by default.
var promqlParser = parser.NewParser(parser.Options{})

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	Title  string `json:"title"`
	UID    string `json:"uid"`
	Panels []struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

// grafanaVariables replaces the dashboard's variables with values PromQL accepts, as Grafana does
// before it sends a query.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$channel", ".*", "${datasource}", "")

func TestDashboardQueriesUseExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir(t), "files", "dashboard.json"))
	if err != nil {
		t.Fatalf("read the dashboard: %v", err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("expected the dashboard to be valid JSON, got: %v", err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("expected a titled dashboard with a uid and panels, got title %q uid %q and %d panels", d.Title, d.UID, len(d.Panels))
	}
	exported := exportedSeriesNames(t)

	queries := map[string]string{} // query -> where
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: expected at least one query, got none", p.Title)
		}
		for _, tg := range p.Targets {
			queries[tg.Expr] = "panel " + p.Title
		}
	}
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			// label_values(metric, label) is Grafana's, not PromQL: check its metric.
			inner := strings.TrimSuffix(strings.TrimPrefix(v.Definition, "label_values("), ")")
			queries[strings.TrimSpace(strings.Split(inner, ",")[0])] = "variable " + v.Name
		}
	}

	// The panels the issue asks for are there, each reading the metric that answers it.
	wantPanels := map[string]string{
		"Callbacks by outcome":        "callbackd_callbacks_total",
		"Duplicates stopped per gate": "callbackd_duplicates_stopped_total",
		"Answer latency":              "callbackd_processing_seconds_bucket",
		"Replicas":                    "callbackd_inflight",
		"Outbox backlog":              "callbackd_outbox_backlog",
	}
	for _, p := range d.Panels {
		if metric, ok := wantPanels[p.Title]; ok {
			var used []string
			for _, tg := range p.Targets {
				used = append(used, metricNames(t, grafanaVariables.Replace(tg.Expr))...)
			}
			if !slices.Contains(used, metric) {
				t.Errorf("panel %q: expected a query of %s, got queries of %v", p.Title, metric, used)
			}
			delete(wantPanels, p.Title)
		}
	}
	for title := range wantPanels {
		t.Errorf("expected a panel titled %q, got none", title)
	}

	for q, where := range queries {
		for _, name := range metricNames(t, grafanaVariables.Replace(q)) {
			if !exported[name] {
				t.Errorf("%s queries %s, which callbackd does not export (query %q)", where, name, q)
			}
		}
	}
}

// metricNames parses a PromQL expression and returns the metric names its selectors use.
func metricNames(t testing.TB, expr string) []string {
	t.Helper()
	e, err := promqlParser.ParseExpr(expr)
	if err != nil {
		t.Fatalf("expected valid PromQL, got %v in %q", err, expr)
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			if vs.Name == "" {
				t.Errorf("selector %s names no metric (in %q): every query must name one", vs, expr)
			}
			names = append(names, vs.Name)
		}
		return nil
	})
	return names
}

// ruleFile is files/alerts.yaml.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// alertCase is crafted series, in the promqltest "load" notation at one sample a minute from
// time 0, on which an alert must fire (or stay silent) at minute 60.
type alertCase struct {
	name    string
	series  string
	fires   bool
	channel string // the channel label the alert must carry when it fires
}

// alertCases are, per alert, the series that must fire it and the ones that must not.
var alertCases = map[string][]alertCase{
	"CallbackdDuplicateShareHigh": {
		{name: "10% duplicates", fires: true, channel: "wechat-main", series: `
			callbackd_callbacks_total{channel="wechat-main",provider="wechatpay",outcome="applied"} 0+90x60
			callbackd_callbacks_total{channel="wechat-main",provider="wechatpay",outcome="duplicate"} 0+10x60
			callbackd_callbacks_total{channel="alipay-main",provider="alipay",outcome="applied"} 0+100x60
			callbackd_callbacks_total{channel="alipay-main",provider="alipay",outcome="duplicate"} 0+1x60`},
		{name: "2% duplicates", series: `
			callbackd_callbacks_total{channel="wechat-main",provider="wechatpay",outcome="applied"} 0+98x60
			callbackd_callbacks_total{channel="wechat-main",provider="wechatpay",outcome="duplicate"} 0+2x60`},
		{name: "no traffic", series: `
			callbackd_callbacks_total{channel="wechat-main",provider="wechatpay",outcome="applied"} 0x60
			callbackd_callbacks_total{channel="wechat-main",provider="wechatpay",outcome="duplicate"} 0x60`},
	},
	"CallbackdDeadLetters": {
		{name: "three dead letters", fires: true, channel: "alipay-main", series: `
			callbackd_outbox_dead_letters{channel="alipay-main",pod="a"} 3x60
			callbackd_outbox_dead_letters{channel="wechat-main",pod="a"} 0x60`},
		{name: "none", series: `callbackd_outbox_dead_letters{channel="alipay-main",pod="a"} 0x60`},
	},
	"CallbackdRedisDegraded": {
		{name: "claims timing out", fires: true, channel: "wechat-main", series: `
			callbackd_redis_degraded_total{channel="wechat-main",reason="claim_timeout"} 0+5x60
			callbackd_redis_degraded_total{channel="wechat-main",reason="mark_error"} 0x60`},
		{name: "healthy Redis", series: `
			callbackd_redis_degraded_total{channel="wechat-main",reason="claim_timeout"} 7x60`},
	},
	"CallbackdSignatureFailures": {
		{name: "forged callbacks", fires: true, channel: "wechat-main", series: `
			callbackd_anomalies_total{channel="wechat-main",reason="bad_signature"} 0+120x60
			callbackd_signature_probes_total{channel="wechat-main"} 0x60`},
		{name: "signature probes only", series: `
			callbackd_anomalies_total{channel="wechat-main",reason="bad_signature"} 0x60
			callbackd_signature_probes_total{channel="wechat-main"} 0+600x60`},
		{name: "unknown orders are not signature failures", series: `
			callbackd_anomalies_total{channel="wechat-main",reason="unknown_order"} 0+600x60`},
	},
	"CallbackdOutboxStalled": {
		{name: "due for an hour", fires: true, channel: "wechat-main", series: `
			callbackd_outbox_oldest_due_seconds{channel="wechat-main"} 0+60x60`},
		{name: "keeping up", series: `callbackd_outbox_oldest_due_seconds{channel="wechat-main"} 2x60`},
	},
	"CallbackdStuckOrders": {
		{name: "two stuck", fires: true, channel: "alipay-main", series: `
			callbackd_reconciler_stuck_orders{channel="alipay-main"} 2x60`},
		{name: "stuck for a moment", series: `
			callbackd_reconciler_stuck_orders{channel="alipay-main"} 0x55 4 0 0 0 0`},
		{name: "none", series: `callbackd_reconciler_stuck_orders{channel="alipay-main"} 0x60`},
	},
}

func TestAlertsUseExportedMetricsAndFire(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir(t), "files", "alerts.yaml"))
	if err != nil {
		t.Fatalf("read the alerts: %v", err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(raw, &rf); err != nil {
		t.Fatalf("expected a valid rule file, got: %v", err)
	}
	exported := exportedSeriesNames(t)
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, 1_000_000)
	evalAt := time.Unix(0, 0).Add(60 * time.Minute)

	seen := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			t.Run(r.Alert, func(t *testing.T) {
				seen[r.Alert] = true
				if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
					t.Errorf("expected a severity label, a summary and a description, got labels %v annotations %v", r.Labels, r.Annotations)
				}
				for _, name := range metricNames(t, r.Expr) {
					if !exported[name] {
						t.Errorf("expression uses %s, which callbackd does not export", name)
					}
				}
				hold, err := time.ParseDuration(r.For)
				if err != nil {
					t.Fatalf("for: expected a duration, got %q: %v", r.For, err)
				}
				cases := alertCases[r.Alert]
				if !slices.ContainsFunc(cases, func(c alertCase) bool { return c.fires }) ||
					!slices.ContainsFunc(cases, func(c alertCase) bool { return !c.fires }) {
					t.Fatalf("expected crafted series that fire and that do not fire %s, got %d cases", r.Alert, len(cases))
				}
				for _, c := range cases {
					t.Run(c.name, func(t *testing.T) {
						storage := promqltest.LoadedStorage(t, loadCommand(c.series))
						firing := firingChannels(t, engine, storage, r.Expr, evalAt, hold)
						switch {
						case c.fires && !slices.Equal(firing, []string{c.channel}):
							t.Errorf("expected %s to fire for channel %s, got it firing for %v", r.Alert, c.channel, firing)
						case !c.fires && len(firing) > 0:
							t.Errorf("expected %s to stay silent, got it firing for %v", r.Alert, firing)
						}
					})
				}
			})
		}
	}
	for name := range alertCases {
		if !seen[name] {
			t.Errorf("expected an alert named %s in files/alerts.yaml, got none", name)
		}
	}
}

// firingChannels evaluates expr as Prometheus' rule manager would: the alert fires for a series
// that the expression returned at every one-minute evaluation over the `for` hold ending at
// `at`. It returns the channels of the firing series.
func firingChannels(t testing.TB, engine *promql.Engine, storage storage.Queryable, expr string, at time.Time, hold time.Duration) []string {
	t.Helper()
	q, err := engine.NewRangeQuery(t.Context(), storage, nil, expr, at.Add(-hold), at, time.Minute)
	if err != nil {
		t.Fatalf("query %q: %v", expr, err)
	}
	defer q.Close()
	res := q.Exec(t.Context())
	if res.Err != nil {
		t.Fatalf("evaluate %q: %v", expr, res.Err)
	}
	matrix, err := res.Matrix()
	if err != nil {
		t.Fatalf("evaluate %q: expected a matrix, got %v", expr, err)
	}
	steps := int(hold/time.Minute) + 1
	var channels []string
	for _, s := range matrix {
		if len(s.Floats)+len(s.Histograms) == steps {
			channels = append(channels, s.Metric.Get("channel"))
		}
	}
	slices.Sort(channels)
	return channels
}

// loadCommand is a promqltest "load 1m" command of the series, one a line, indented as it requires.
func loadCommand(series string) string {
	var b strings.Builder
	b.WriteString("load 1m\n")
	for line := range strings.Lines(series) {
		if line = strings.TrimSpace(line); line != "" {
			b.WriteString("  " + line + "\n")
		}
	}
	return b.String()
}
