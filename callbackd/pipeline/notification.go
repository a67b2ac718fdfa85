package pipeline

import (
	"context"
	"net/http"

	"github.com/seed-1cff2221/callback-platform/callbackd/metrics"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
)

// ProcessNotification decides a notification that did not arrive as a callback: one built by
// the active query path (a merchant's "check payment", the reconciler) from the provider's
// signed answer. It runs the very same gates as Process from step 3 on — the same key, the
// window, the Redis claim, the same database transaction, the mark — so that a callback and a
// query for the same event racing each other commit it once and leave the gates consistent.
//
// n must be verified and normalized already, with n.Channel naming a configured channel. It
// returns the verdict, the outcome (a metrics.Outcome* value) and a short, secret-free message.
// Queries are not callbacks: callbackd_callbacks_total is not incremented; the gates' own
// counters (duplicates stopped, anomalies, Redis degradation) are.
func (p *Pipeline) ProcessNotification(ctx context.Context, n notify.Notification) (v notify.Verdict, outcome, message string) {
	ch, ok := p.channels[n.Channel]
	if !ok {
		return notify.Reject, metrics.OutcomeRejected, "unknown channel"
	}
	// The gates start from the adapter's output: hand them n through an adapter that returns it,
	// so that steps 3 to 8 are not written twice.
	preset := *ch
	preset.Adapter = presetAdapter{Adapter: ch.Adapter, n: n}
	return p.decide(ctx, &preset, nil, nil)
}

// presetAdapter is a channel's adapter whose Parse returns an already normalized notification.
type presetAdapter struct {
	notify.Adapter
	n notify.Notification
}

// Parse returns the preset notification; the request and body are not used.
func (a presetAdapter) Parse(context.Context, *http.Request, []byte) (notify.Notification, error) {
	return a.n, nil
}
