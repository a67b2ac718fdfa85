package cli

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/outbox"
	"github.com/seed-1cff2221/callback-platform/callbackd/query"
	"github.com/seed-1cff2221/callback-platform/callbackd/retention"
	"github.com/seed-1cff2221/callback-platform/callbackd/store"
)

// startBackground starts the loops that run beside the HTTP server for as long as serve does:
// the outbox dispatcher (delivers committed side effects to the merchant's endpoints), the
// retention sweeper (purges expired receipts, API idempotency keys and submit tokens) and the
// reconciler (settles orders whose callbacks never came with their provider). Every replica runs
// all three: the dispatcher's claims and the sweepers' advisory locks keep replicas from doing the
// same work twice.
//
// The returned stop cancels them and waits: the dispatcher finishes and records the attempts it
// has in flight (each bounded by its channel's delivery timeout), so none is cut off mid-way.
func startBackground(ctx context.Context, cfg *config.File, st *store.Store, syncer *query.Syncer,
	reg prometheus.Registerer, logger *slog.Logger) (stop func(), err error) {
	dispatcher, err := outbox.NewDispatcher(st.Pool(), cfg.Channels, outbox.Options{
		Registerer: reg,
		Logger:     logger,
	})
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	sweeper, err := retention.NewSweeper(st.Pool(), cfg.Channels, retention.Options{
		Registerer: reg,
		Logger:     logger,
	})
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	reconciler, err := newReconciler(cfg, st, syncer, reg, logger)
	if err != nil {
		return nil, err
	}
	// The loops outlive the serve context's cancellation by exactly the drain of the HTTP server:
	// stop, called when serving has ended, cancels them.
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := dispatcher.Run(bctx); err != nil {
			logger.Error("outbox dispatcher stopped", slog.String("error", err.Error()))
		}
	})
	wg.Go(func() {
		if err := sweeper.Run(bctx); err != nil {
			logger.Error("retention sweeper stopped", slog.String("error", err.Error()))
		}
	})
	wg.Go(func() {
		if err := reconciler.Run(bctx); err != nil {
			logger.Error("reconciler stopped", slog.String("error", err.Error()))
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}, nil
}
