// Command operator runs the callback-platform operator: the PaymentChannel controller, with
// leader election, Prometheus metrics, health probes and structured (JSON) logs.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/controllers"
)

func main() {
	if err := run(); err != nil {
		slog.Error("operator exited", "error", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		metricsAddr    string
		metricsSecure  bool
		probeAddr      string
		leaderElect    bool
		leaderElectNS  string
		logLevel       slog.Level
		logText        bool
		maxConcurrency int
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8443", "address of the metrics endpoint (\"0\" disables it)")
	flag.BoolVar(&metricsSecure, "metrics-secure", true, "serve metrics over HTTPS, authenticated and authorized by the API server")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	flag.BoolVar(&leaderElect, "leader-elect", true, "elect a leader, so that only one replica reconciles at a time")
	flag.StringVar(&leaderElectNS, "leader-election-namespace", "", "namespace of the leader-election Lease (default: the operator's own)")
	flag.TextVar(&logLevel, "log-level", slog.LevelInfo, "log level: DEBUG, INFO, WARN or ERROR")
	flag.BoolVar(&logText, "log-text", false, "log as text instead of JSON (for a terminal)")
	flag.IntVar(&maxConcurrency, "max-concurrent-reconciles", 4, "PaymentChannels reconciled at once")
	flag.Parse()

	var h slog.Handler = slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel})
	if logText {
		h = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel})
	}
	slog.SetDefault(slog.New(h))
	ctrl.SetLogger(logr.FromSlogHandler(h))

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(callbackdv1alpha1.AddToScheme(scheme))

	metricsOpts := metricsserver.Options{BindAddress: metricsAddr, SecureServing: metricsSecure}
	if metricsSecure {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("operator: kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        probeAddr,
		LeaderElection:                leaderElect,
		LeaderElectionID:              "callback-platform-operator.callbackd.io",
		LeaderElectionNamespace:       leaderElectNS,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("operator: create manager: %w", err)
	}

	ctx := ctrl.SetupSignalHandler()
	r := &controllers.PaymentChannelReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder(controllers.FieldOwner),
		Discovery: controllers.RESTMapperDiscovery{Mapper: mgr.GetRESTMapper()},
	}
	setupCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := r.SetupWithManager(setupCtx, mgr, maxConcurrency); err != nil {
		return fmt.Errorf("operator: set up the PaymentChannel controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("operator: add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("operator: add readiness check: %w", err)
	}
	slog.Info("starting the operator", "metrics", metricsAddr, "probes", probeAddr, "leaderElection", leaderElect)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("operator: run manager: %w", err)
	}
	return nil
}
