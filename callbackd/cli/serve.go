package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/gate"
	"github.com/seed-1cff2221/callback-platform/callbackd/merchantapi"
	"github.com/seed-1cff2221/callback-platform/callbackd/metrics"
	"github.com/seed-1cff2221/callback-platform/callbackd/outbox"
	"github.com/seed-1cff2221/callback-platform/callbackd/pipeline"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider"
	"github.com/seed-1cff2221/callback-platform/callbackd/server"
	"github.com/seed-1cff2221/callback-platform/callbackd/store"
)

func newServeCommand(stderr io.Writer) *cobra.Command {
	var configPath, logLevel string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve provider callbacks, the merchant API and the operational endpoints",
		Long: "serve loads and validates the configuration file, then serves POST /notify/{channel}, " +
			"the merchant API under /v1/, /healthz, /readyz and /metrics until SIGTERM or SIGINT, " +
			"when it drains the callbacks in flight.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configPath == "" {
				return &usageError{errors.New("serve: --config is required")}
			}
			logger, err := newLogger(stderr, logLevel)
			if err != nil {
				return err
			}
			cfg, err := config.Load(configPath)
			if err != nil {
				return err
			}
			return Serve(cmd.Context(), cfg, logger, nil)
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "callbackd configuration file (YAML or JSON)")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}

// Serve runs callbackd with a loaded, validated configuration until ctx is done, then drains.
// onListen, when not nil, is told the bound addresses (the operations address is nil when the
// operational endpoints share the main listener); tests use it with port 0.
func Serve(ctx context.Context, cfg *config.File, logger *slog.Logger, onListen func(main, ops net.Addr)) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger.Info("starting", "version", ResolvedVersion(), "channels", len(cfg.Channels), "redis", cfg.Redis != nil)
	if int64(cfg.Server.MaxInFlight) > int64(cfg.Database.MaxConns) {
		// Not an error: the pool's wait is bounded by the request deadline. But then a storm
		// queues on the pool rather than being turned away at the door.
		logger.Warn("server.maxInFlight exceeds database.maxConns; callbacks beyond the pool size wait for a connection",
			"maxInFlight", cfg.Server.MaxInFlight, "maxConns", cfg.Database.MaxConns)
	}

	dsn, err := cfg.Database.ResolveDSN()
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, dsn, store.Options{
		MaxConns:         cfg.Database.MaxConns,
		LockTimeout:      cfg.Database.LockTimeout.Duration,
		StatementTimeout: cfg.Database.StatementTimeout.Duration,
		IdleInTxTimeout:  cfg.Database.IdleInTransactionTimeout.Duration,
		Logger:           logger.With("component", "store"),
	})
	if err != nil {
		return err
	}
	defer st.Close()
	if err := checkSchema(ctx, st, logger); err != nil {
		return err
	}

	m := metrics.New()
	// The adapters' key watchers run until serving ends.
	adaptersCtx, stopAdapters := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAdapters()
	channels := make([]pipeline.Channel, 0, len(cfg.Channels))
	for _, ch := range cfg.Channels {
		a, err := provider.New(adaptersCtx, ch, logger, m.Registry)
		if err != nil {
			return err
		}
		channels = append(channels, pipeline.Channel{
			Name:       ch.Name,
			Adapter:    a,
			LockTTL:    ch.TTLs.Lock.Duration,
			SuccessTTL: ch.TTLs.SuccessMark.Duration,
			WindowTTL:  ch.TTLs.GatewayWindow.Duration,
		})
	}

	window, err := gate.NewWindow(gate.WindowOptions{MaxEntries: cfg.Server.WindowMaxEntries})
	if err != nil {
		return err
	}
	popts := pipeline.Options{Channels: channels, Ledger: st, Window: window, Metrics: m,
		Logger: logger.With("component", "pipeline")}
	if cfg.Redis != nil {
		client, err := gate.NewRedisClient(*cfg.Redis)
		if err != nil {
			return err
		}
		defer client.Close()
		popts.Claims = gate.NewClaims(client, cfg.Redis.Timeout.Duration)
		popts.GateTimeout = max(2*cfg.Redis.Timeout.Duration, 100*time.Millisecond)
	} else {
		logger.Warn("no redis configured; the window and the database gates alone deduplicate")
	}
	p, err := pipeline.New(popts)
	if err != nil {
		return err
	}
	// The active query path shares the pipeline's gates: a query and a callback commit once.
	syncer, err := newSyncer(adaptersCtx, cfg, st, p, logger)
	if err != nil {
		return err
	}

	var merchantAPI http.Handler
	if cfg.APITokensFile != "" {
		tokens, err := merchantapi.NewFileTokens(cfg.APITokensFile, logger)
		if err != nil {
			return err
		}
		served := make([]string, 0, len(cfg.Channels))
		for _, ch := range cfg.Channels {
			served = append(served, ch.Name)
		}
		// Orders can only be registered for channels this process serves: a misspelt channel is a 400
		// at registration, not an order that no notification can ever match.
		merchantAPI = merchantapi.WithSync(merchantapi.New(st, tokens, logger.With("component", "merchantapi"),
			merchantapi.WithChannels(served...)), syncer, tokens, logger)
		merchantAPI = merchantapi.WithOutbox(merchantAPI, outbox.NewQueue(st.Pool(), nil), tokens,
			logger.With("component", "merchantapi"))
	} else {
		logger.Warn("apiTokensFile not set; the merchant API is not served")
	}

	s := cfg.Server
	srv, err := server.New(server.Options{
		Pipeline:          p,
		Metrics:           m,
		Database:          st,
		MerchantAPI:       merchantAPI,
		Logger:            logger.With("component", "server"),
		MaxBodyBytes:      s.MaxBodyBytes,
		MaxInFlight:       s.MaxInFlight,
		RequestTimeout:    s.RequestTimeout.Duration,
		ReadHeaderTimeout: s.ReadHeaderTimeout.Duration,
		ReadTimeout:       s.ReadTimeout.Duration,
		WriteTimeout:      s.WriteTimeout.Duration,
		IdleTimeout:       s.IdleTimeout.Duration,
		ShutdownTimeout:   s.ShutdownTimeout.Duration,
		DrainDelay:        s.ShutdownDelay.Duration,
	})
	if err != nil {
		return err
	}

	stopBackground, err := startBackground(ctx, cfg, st, syncer, m.Registry, logger)
	if err != nil {
		return err
	}
	defer stopBackground()

	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("serve: listen: %w", err)
	}
	var opsLn net.Listener
	var opsAddr net.Addr
	if cfg.MetricsListen != "" {
		if opsLn, err = lc.Listen(ctx, "tcp", cfg.MetricsListen); err != nil {
			_ = ln.Close()
			return fmt.Errorf("serve: listen metrics: %w", err)
		}
		opsAddr = opsLn.Addr()
	}
	if onListen != nil {
		onListen(ln.Addr(), opsAddr)
	}
	return srv.Serve(ctx, ln, opsLn)
}

// checkSchema refuses to serve on a database whose schema is older than this binary's: the
// migration Job must run first. An unreachable database is not an error here (the daemon starts
// and reports not ready until it is back).
func checkSchema(ctx context.Context, st *store.Store, logger *slog.Logger) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	have, err := store.SchemaVersion(cctx, st.Pool())
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("serve: %w", ctx.Err())
		}
		logger.Warn("cannot read the schema version; starting not ready until the database answers", "error", err.Error())
		return nil
	}
	if want := store.LatestSchemaVersion(); have < want {
		return errors.New("serve: the database schema is at version " + fmt.Sprint(have) +
			", this callbackd needs " + fmt.Sprint(want) + ": run `callbackd migrate` first")
	}
	return nil
}
