package chart

import (
	"context"
	"regexp"
	"sort"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/metrics"
	"github.com/seed-1cff2221/callback-platform/callbackd/outbox"
	"github.com/seed-1cff2221/callback-platform/callbackd/query"
	"github.com/seed-1cff2221/callback-platform/callbackd/reconciler"
	"github.com/seed-1cff2221/callback-platform/callbackd/retention"
)

// exportedSeriesNames returns every series name callbackd's /metrics can show: the registries
// are built the way `callbackd serve` builds them (metrics.New for the pipeline, the Go and
// process collectors; the outbox dispatcher, reconciler and retention sweeper registering on
// it), and every registered descriptor counts, whether or not traffic has created its series
// yet. Histograms add their _bucket, _sum and _count series.
//
// The adapters' metrics are registered by an internal package when a channel's adapter is built
// from real key material; their names are taken from package metrics' documented constants.
func exportedSeriesNames(t testing.TB) map[string]bool {
	t.Helper()
	m := metrics.New()
	m.InitChannel("probe", "wechatpay")

	// A pool that never connects: the constructors only need it to exist.
	pool, err := pgxpool.New(context.Background(), "postgres://callbackd@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatalf("lazy pgx pool: %v", err)
	}
	t.Cleanup(pool.Close)
	channels := []config.Channel{{Name: "probe"}}
	if _, err := outbox.NewDispatcher(pool, channels, outbox.Options{Registerer: m.Registry}); err != nil {
		t.Fatalf("outbox dispatcher on the metrics registry: %v", err)
	}
	if _, err := retention.NewSweeper(pool, channels, retention.Options{Registerer: m.Registry}); err != nil {
		t.Fatalf("retention sweeper on the metrics registry: %v", err)
	}
	if _, err := reconciler.New(pool, querySyncer{}, channels, reconciler.Options{Registerer: m.Registry}); err != nil {
		t.Fatalf("reconciler on the metrics registry: %v", err)
	}

	names := map[string]bool{}
	// Every descriptor, with or without series.
	descs := make(chan *prometheus.Desc, 64)
	go func() {
		m.Registry.Describe(descs)
		close(descs)
	}()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		if sm := fqName.FindStringSubmatch(d.String()); sm != nil {
			names[sm[1]] = true
		}
	}
	// The types of the gathered families, for the histogram and summary series.
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatalf("gather callbackd's registry: %v", err)
	}
	for _, f := range families {
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			names[f.GetName()+"_bucket"] = true
			names[f.GetName()+"_sum"] = true
			names[f.GetName()+"_count"] = true
		case dto.MetricType_SUMMARY:
			names[f.GetName()+"_sum"] = true
			names[f.GetName()+"_count"] = true
		}
	}
	for _, n := range []string{metrics.KeyVerificationsTotal, metrics.SignatureProbesTotal, metrics.KeyReloadsTotal} {
		names[n] = true
	}
	// The registries really hold the documented names (a sanity check of the collection above).
	for _, n := range []string{metrics.CallbacksTotal, outbox.MetricBacklog, reconciler.MetricStuckOrders,
		retention.MetricSweepsTotal, metrics.ProcessingSeconds + "_bucket"} {
		if !names[n] {
			t.Fatalf("expected %s among the registered metrics, got %v", n, sortedKeys(names))
		}
	}
	return names
}

// querySyncer is a Syncer whose every channel is queryable; it is never called.
type querySyncer struct{}

func (querySyncer) SyncOrder(context.Context, string) (query.Result, error) {
	return query.Result{}, nil
}
func (querySyncer) Queryable(string) bool { return true }

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
