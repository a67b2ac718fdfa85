package query

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/seed-1cff2221/callback-platform/callbackd/clock"
	"github.com/seed-1cff2221/callback-platform/callbackd/metrics"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/store"
)

// Errors of SyncOrder besides the classified query failures; test with errors.Is.
var (
	// ErrUnknownOrder: no order with this number is registered.
	ErrUnknownOrder = errors.New("unknown order")
	// ErrNotQueryable: the order's channel has no query client (a provider without a query API,
	// a channel served by another deployment, or missing merchant signing keys).
	ErrNotQueryable = errors.New("the order's channel cannot be queried")
)

// Processor runs a normalized notification through the exactly-once gates
// (*pipeline.Pipeline).
type Processor interface {
	ProcessNotification(ctx context.Context, n notify.Notification) (v notify.Verdict, outcome, message string)
}

// Orders reads orders (*store.Store).
type Orders interface {
	GetOrder(ctx context.Context, orderNo string) (store.OrderDetails, error)
}

// SyncerOptions tune a Syncer.
type SyncerOptions struct {
	// Clock decides whether an order is past its expiry; the real clock when nil.
	Clock clock.Clock
	// Logger receives a line per effect applied through a query; discarded when nil.
	Logger *slog.Logger
}

// Syncer brings one order up to date with its provider: it is the active query path shared by
// the merchant API (POST /v1/orders/{order_no}/sync), `callbackd order sync` and the reconciler.
type Syncer struct {
	orders    Orders
	processor Processor
	clients   map[string]Client
	clock     clock.Clock
	logger    *slog.Logger
}

// NewSyncer returns a Syncer querying through clients (by channel name, from NewClients).
func NewSyncer(orders Orders, processor Processor, clients map[string]Client, opts SyncerOptions) (*Syncer, error) {
	if orders == nil || processor == nil {
		return nil, errors.New("query: new syncer: orders and a processor are required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Syncer{orders: orders, processor: processor, clients: clients, clock: opts.Clock,
		logger: opts.Logger.With("component", "query")}, nil
}

// Queryable reports whether orders of the channel can be queried.
func (s *Syncer) Queryable(channel string) bool {
	_, ok := s.clients[channel]
	return ok
}

// Action is what a sync did to the order. It is a closed set, usable as a metric label.
type Action string

// The actions of a sync.
const (
	// ActionNone: nothing was applied (the order is not pending, or the provider reports
	// nothing to apply yet).
	ActionNone Action = "none"
	// ActionPaid: the provider's payment went through the pipeline.
	ActionPaid Action = "paid"
	// ActionClosed: the order was closed, by the provider or because it expired unpaid.
	ActionClosed Action = "closed"
)

// Result is what SyncOrder found and did.
type Result struct {
	// Order is the order after the sync, with its ledger.
	Order store.OrderDetails
	// Queried: the provider was asked (only PENDING orders are).
	Queried bool
	// Answer is the provider's verified answer when Queried.
	Answer Answer
	// Action is what was applied.
	Action Action
	// Outcome is the pipeline's outcome (a metrics.Outcome* value) when something was applied.
	Outcome string
}

// SyncOrder looks the order up and, while it is PENDING, asks its channel's provider about it
// and applies the answer through the pipeline with the callback's own key: a payment the
// provider reports is applied exactly once whether or not its callback also arrives; a close
// the provider reports closes the order. An order past its expires_at that the provider reports
// as not paid (or does not know) is closed through the same conditional update, so that a
// payment arriving later is recorded as an exception, never lost. The returned order is read
// after the effect.
//
// Errors wrap ErrUnknownOrder, ErrNotQueryable, ErrTransient (provider or database unavailable,
// or the event is being applied by a callback right now: sync again) or ErrPermanent (the
// provider's answer was refused, or the pipeline rejected the event, e.g. an amount mismatch).
func (s *Syncer) SyncOrder(ctx context.Context, orderNo string) (Result, error) {
	const op = "query: sync order"
	details, err := s.orders.GetOrder(ctx, orderNo)
	if errors.Is(err, store.ErrNotFound) {
		return Result{}, fmt.Errorf("%s: %w", op, ErrUnknownOrder)
	}
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w: %w", op, ErrTransient, err)
	}
	res := Result{Order: details, Action: ActionNone}
	order := details.Order
	if order.Status != store.StatusPending {
		return res, nil
	}
	client, ok := s.clients[order.Channel]
	if !ok {
		return res, fmt.Errorf("%s: channel %s: %w", op, order.Channel, ErrNotQueryable)
	}
	answer, err := client.Query(ctx, order)
	if err != nil {
		return res, fmt.Errorf("%s: %w", op, err)
	}
	res.Queried, res.Answer = true, answer

	var n notify.Notification
	switch answer.State {
	case StatePaid:
		n, res.Action = answer.Notification, ActionPaid
	case StateClosed:
		n, res.Action = answer.Notification, ActionClosed
	case StateNotPaid, StateNotFound:
		if order.ExpiresAt == nil || s.clock.Now().Before(*order.ExpiresAt) {
			return res, nil
		}
		n, res.Action = s.expiryClose(order, answer.Notification.Provider), ActionClosed
	default:
		return res, fmt.Errorf("%s: %w: unknown answer state %q", op, ErrPermanent, answer.State)
	}
	// The provider's answer is for this channel's merchant; stamp the channel the gates route on.
	n.Channel = order.Channel

	verdict, outcome, msg := s.processor.ProcessNotification(ctx, n)
	res.Outcome = outcome
	switch verdict {
	case notify.Success:
	case notify.Retry:
		return res, fmt.Errorf("%s: %w: %s", op, ErrTransient, msg)
	default:
		return res, fmt.Errorf("%s: %w: the pipeline rejected the provider's answer: %s", op, ErrPermanent, msg)
	}
	if outcome == metrics.OutcomeApplied || outcome == metrics.OutcomeException {
		s.logger.InfoContext(ctx, "order synced with its provider",
			"channel", order.Channel, "order_no", order.OrderNo, "action", string(res.Action),
			"provider_state", answer.ProviderState, "outcome", outcome)
	}
	if details, err = s.orders.GetOrder(ctx, orderNo); err != nil {
		// The effect is committed; only the read-back failed.
		return res, fmt.Errorf("%s: read back: %w: %w", op, ErrTransient, err)
	}
	res.Order = details
	return res, nil
}

// expiryClose is the close of an expired order that the provider reports unpaid. Its key is
// that of a provider close notification (channel, merchant, order, close): either way the order
// is closed once.
func (s *Syncer) expiryClose(o store.Order, provider string) notify.Notification {
	return notify.Notification{
		Channel:       o.Channel,
		Provider:      provider,
		MerchantID:    o.MerchantID,
		SubMerchantID: o.SubMerchantID,
		OutTradeNo:    o.OrderNo,
		Kind:          notify.KindClose,
		Status:        notify.StatusSucceeded,
		NotifyID:      "callbackd-expiry",
		OccurredAt:    s.clock.Now(),
	}
}
