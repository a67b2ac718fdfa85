package merchantapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/seed-1cff2221/callback-platform/callbackd/query"
)

// syncTimeout bounds one sync: the provider query (its own timeout is 10 s by default) and the
// pipeline's transaction.
const syncTimeout = 20 * time.Second

// OrderSyncer is the active query path (*query.Syncer).
type OrderSyncer interface {
	SyncOrder(ctx context.Context, orderNo string) (query.Result, error)
}

// SyncView is the answer of POST /v1/orders/{order_no}/sync.
type SyncView struct {
	// Order is the order after the sync, with its ledger.
	Order OrderView `json:"order"`
	// Queried: the provider was asked (only PENDING orders are).
	Queried bool `json:"queried"`
	// ProviderState is the provider's word about the order (trade_state, trade_status).
	ProviderState string `json:"provider_state,omitempty"`
	// Action is what the sync applied: none, paid or closed.
	Action string `json:"action"`
}

// WithSync adds POST /v1/orders/{order_no}/sync to the merchant API handler h (from New): the
// merchant's "check payment" button. It asks the order's provider and applies a payment (or a
// close) through the same exactly-once pipeline as a callback, then answers the order as it now
// is. The route takes the same bearer tokens; every other path goes to h.
//
// Answers: 200 with a SyncView; 404 for an unknown order; 409 when the order's channel cannot be
// queried; 503 (Retry-After) when the provider or the database is unavailable or a callback for
// the same payment is being applied right now; 502 when the provider's answer was refused.
func WithSync(h http.Handler, syncer OrderSyncer, tokens TokenSource, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	a := &api{tokens: tokens, logger: logger.With("component", "merchantapi")}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders/{order_no}/sync", a.authenticate(syncHandler(syncer, a.logger)))
	mux.Handle("/v1/orders/{order_no}/sync", a.authenticate(methodNotAllowed(http.MethodPost)))
	mux.Handle("/", h)
	return mux
}

func syncHandler(syncer OrderSyncer, logger *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		orderNo := r.PathValue("order_no")
		if err := validateOrderNo(orderNo); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), syncTimeout)
		defer cancel()
		res, err := syncer.SyncOrder(ctx, orderNo)
		switch {
		case errors.Is(err, query.ErrUnknownOrder):
			writeError(w, http.StatusNotFound, "no order "+orderNo)
			return
		case errors.Is(err, query.ErrNotQueryable):
			writeError(w, http.StatusConflict, "the order's channel cannot be queried (its provider has no query API here, or its merchant signing key is not configured)")
			return
		case errors.Is(err, query.ErrPermanent):
			logger.Error("order sync refused", "order_no", orderNo, "error", err.Error())
			writeError(w, http.StatusBadGateway, "the provider's answer could not be used; the order is unchanged (see callbackd's log)")
			return
		case err != nil:
			logger.Warn("order sync failed; the merchant may retry", "order_no", orderNo, "error", err.Error())
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, "the provider or the database is unavailable, or the payment is being applied right now; sync again shortly")
			return
		}
		writeJSON(w, http.StatusOK, SyncView{
			Order:         orderView(res.Order.Order, res.Order.Ledger),
			Queried:       res.Queried,
			ProviderState: res.Answer.ProviderState,
			Action:        string(res.Action),
		})
	}
}
