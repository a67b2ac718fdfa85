package merchantapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/seed-1cff2221/callback-platform/callbackd/outbox"
)

// OutboxQueue is what the outbox routes need (*outbox.Queue).
type OutboxQueue interface {
	List(ctx context.Context, f outbox.Filter) ([]outbox.Delivery, error)
	DeadLetters(ctx context.Context, channel string, limit int) ([]outbox.Delivery, error)
	Redeliver(ctx context.Context, eventID, endpoint string) ([]outbox.Delivery, error)
}

// DeliveriesView is the answer of the outbox routes.
type DeliveriesView struct {
	Deliveries []outbox.DeliveryView `json:"deliveries"`
}

// WithOutbox adds the outbox routes to the merchant API handler h (from New), the API twin of
// `callbackd outbox list|dead-letters|redeliver`:
//
//	GET  /v1/outbox/deliveries?channel=&endpoint=&status=&event_id=&order_no=&limit=&after=
//	GET  /v1/outbox/dead-letters?channel=&limit=
//	POST /v1/outbox/events/{event_id}/redeliver?endpoint=
//
// A redelivery sends the event again with the same webhook-id; it never re-applies the payment.
// The routes take the same bearer tokens; every other path goes to h. Answers: 200 with a
// DeliveriesView (newest first for the listings); 400 for a bad query parameter; 404 for an
// unknown event; 409 when the delivery is being attempted right now; 503 when the database is
// unavailable.
func WithOutbox(h http.Handler, q OutboxQueue, tokens TokenSource, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	a := &api{tokens: tokens, logger: logger}
	o := outboxRoutes{queue: q, logger: logger}
	mux := http.NewServeMux()
	mux.Handle("GET /v1/outbox/deliveries", a.authenticate(http.HandlerFunc(o.list)))
	mux.Handle("GET /v1/outbox/dead-letters", a.authenticate(http.HandlerFunc(o.deadLetters)))
	mux.Handle("POST /v1/outbox/events/{event_id}/redeliver", a.authenticate(http.HandlerFunc(o.redeliver)))
	mux.Handle("/v1/outbox/deliveries", a.authenticate(methodNotAllowed(http.MethodGet)))
	mux.Handle("/v1/outbox/dead-letters", a.authenticate(methodNotAllowed(http.MethodGet)))
	mux.Handle("/v1/outbox/events/{event_id}/redeliver", a.authenticate(methodNotAllowed(http.MethodPost)))
	mux.Handle("/", h)
	return mux
}

type outboxRoutes struct {
	queue  OutboxQueue
	logger *slog.Logger
}

func (o outboxRoutes) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := outbox.Filter{Channel: q.Get("channel"), Endpoint: q.Get("endpoint"), EventID: q.Get("event_id"),
		OrderNo: q.Get("order_no")}
	if s := q.Get("status"); s != "" {
		f.Status = outbox.Status(strings.ToUpper(s))
		switch f.Status {
		case outbox.StatusPending, outbox.StatusDelivered, outbox.StatusDead:
		default:
			writeError(w, http.StatusBadRequest, "status must be pending, delivered or dead")
			return
		}
	}
	var ok bool
	if f.Limit, ok = intParam(w, q.Get("limit"), "limit", outbox.MaxListLimit); !ok {
		return
	}
	after, ok := intParam(w, q.Get("after"), "after", 0)
	if !ok {
		return
	}
	f.AfterID = int64(after)
	o.answer(w, r, "list", func(ctx context.Context) ([]outbox.Delivery, error) { return o.queue.List(ctx, f) })
}

func (o outboxRoutes) deadLetters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, ok := intParam(w, q.Get("limit"), "limit", outbox.MaxListLimit)
	if !ok {
		return
	}
	o.answer(w, r, "dead letters", func(ctx context.Context) ([]outbox.Delivery, error) {
		return o.queue.DeadLetters(ctx, q.Get("channel"), limit)
	})
}

func (o outboxRoutes) redeliver(w http.ResponseWriter, r *http.Request) {
	eventID := r.PathValue("event_id")
	if eventID == "" || len(eventID) > 200 {
		writeError(w, http.StatusBadRequest, "event_id must be 1 to 200 characters")
		return
	}
	endpoint := r.URL.Query().Get("endpoint")
	o.answer(w, r, "redeliver", func(ctx context.Context) ([]outbox.Delivery, error) {
		return o.queue.Redeliver(ctx, eventID, endpoint)
	})
}

func (o outboxRoutes) answer(w http.ResponseWriter, r *http.Request, op string, fn func(context.Context) ([]outbox.Delivery, error)) {
	ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
	defer cancel()
	ds, err := fn(ctx)
	switch {
	case errors.Is(err, outbox.ErrNotFound):
		writeError(w, http.StatusNotFound, "no delivery of this event (to this endpoint)")
		return
	case errors.Is(err, outbox.ErrInFlight):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusConflict, "the delivery is being attempted right now; redeliver again once it is recorded")
		return
	case err != nil:
		o.logger.Warn("outbox "+op+" failed", "error", err.Error())
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "the database is unavailable; try again shortly")
		return
	}
	views := make([]outbox.DeliveryView, len(ds))
	for i, d := range ds {
		views[i] = d.View()
	}
	writeJSON(w, http.StatusOK, DeliveriesView{Deliveries: views})
}

// intParam parses an optional non-negative integer query parameter (at most upTo when upTo > 0);
// on a bad value it answers 400 and reports false.
func intParam(w http.ResponseWriter, s, name string, upTo int) (int, bool) {
	if s == "" {
		return 0, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || (upTo > 0 && n > upTo) {
		msg := name + " must be a non-negative integer"
		if upTo > 0 {
			msg += " up to " + strconv.Itoa(upTo)
		}
		writeError(w, http.StatusBadRequest, msg)
		return 0, false
	}
	return n, true
}
