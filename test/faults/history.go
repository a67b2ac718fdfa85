package faults

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// Kind is the business kind of a notification the suite sends.
type Kind string

// The kinds the suite sends (Standard Webhooks event types payment.succeeded and order.closed).
const (
	KindPayment Kind = "payment"
	KindClose   Kind = "close"
)

// Notification is one valid provider notification: the unit that must take effect exactly once.
// Its duplicates and retries are requests (Ops) in the History.
type Notification struct {
	Channel  string `json:"channel"`
	OrderNo  string `json:"order_no"`
	Kind     Kind   `json:"kind"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// TxnID is the provider's transaction id (payments).
	TxnID string `json:"txn_id,omitempty"`
}

// Key is the notification's idempotency key as the checker sees it: channel, order and kind
// (the suite uses one merchant per channel and no refunds).
func (n Notification) Key() string { return n.Channel + "/" + n.OrderNo + "/" + string(n.Kind) }

// EventType is the Standard Webhooks event type the provider sends.
func (n Notification) EventType() string {
	if n.Kind == KindClose {
		return "order.closed"
	}
	return "payment.succeeded"
}

// Body is the notification's JSON body in the field layout of callbackd's Standard Webhooks
// defaults (type, data.id, data.order_no, data.amount, data.currency).
func (n Notification) Body() []byte {
	b, err := json.Marshal(map[string]any{
		"type": n.EventType(),
		"data": map[string]any{
			"id":       n.TxnID,
			"order_no": n.OrderNo,
			"amount":   n.Amount,
			"currency": n.Currency,
		},
	})
	if err != nil {
		panic(err) // strings and integers always marshal
	}
	return b
}

// Class is how the sender reads one answer (Standard Webhooks: any 2xx means done; 429 and
// 5xx mean "try again"; other 4xx a refusal).
type Class string

// The answer classes.
const (
	Success   Class = "success"
	Retryable Class = "retryable"
	Rejected  Class = "rejected"
	// Transport is no answer at all: refused, reset or timed out.
	Transport Class = "transport"
)

// ClassOf classifies an HTTP status code.
func ClassOf(code int) Class {
	switch {
	case code >= 200 && code < 300:
		return Success
	case code == 429 || code >= 500:
		return Retryable
	default:
		return Rejected
	}
}

// Op is one request of the history: one delivery attempt of a notification and its answer.
type Op struct {
	// Seq orders the ops by the time they were recorded (answered).
	Seq int64 `json:"seq"`
	// Key is Notification.Key(); Channel, OrderNo and Kind repeat its parts.
	Key     string `json:"key"`
	Channel string `json:"channel"`
	OrderNo string `json:"order_no"`
	Kind    Kind   `json:"kind"`
	// MsgID is the webhook-id of the request (the same for every attempt of one delivery).
	MsgID string `json:"msg_id"`
	// Instance is the callbackd process that got the request.
	Instance string `json:"instance"`
	// Phase is the part of the scenario (e.g. "storm", "during-fault", "retries").
	Phase string `json:"phase,omitempty"`
	// Sent and Answered bound the request; Answered is when the answer (or the error) came.
	Sent     time.Time `json:"sent"`
	Answered time.Time `json:"answered"`
	// Status is the HTTP status (0 without an answer); Class its reading; Body the answer's
	// first bytes (callbackd's answers carry no secret); Err the transport error.
	Status int    `json:"status,omitempty"`
	Class  Class  `json:"class"`
	Body   string `json:"body,omitempty"`
	Err    string `json:"err,omitempty"`
}

// History records every request of a scenario. It is safe for concurrent use.
type History struct {
	mu  sync.Mutex
	ops []Op
}

// Record appends op, numbering it.
func (h *History) Record(op Op) Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	op.Seq = int64(len(h.ops)) + 1
	h.ops = append(h.ops, op)
	return op
}

// Ops returns a copy of the recorded ops, in recording order.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}

// Len is the number of recorded ops.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

// Succeeded returns the keys that got at least one success answer so far.
func (h *History) Succeeded() map[string]bool {
	out := map[string]bool{}
	for _, op := range h.Ops() {
		if op.Class == Success {
			out[op.Key] = true
		}
	}
	return out
}

// Tally counts ops by class.
func Tally(ops []Op) map[Class]int {
	t := map[Class]int{}
	for _, op := range ops {
		t[op.Class]++
	}
	return t
}

// TallyString formats a tally in a fixed order.
func TallyString(t map[Class]int) string {
	return fmt.Sprintf("success=%d retryable=%d rejected=%d transport=%d",
		t[Success], t[Retryable], t[Rejected], t[Transport])
}

// PhaseTally counts ops by phase and class, e.g. "storm: success=… | retries: …".
func PhaseTally(ops []Op) string {
	by := map[string][]Op{}
	var phases []string
	for _, op := range ops {
		if _, ok := by[op.Phase]; !ok {
			phases = append(phases, op.Phase)
		}
		by[op.Phase] = append(by[op.Phase], op)
	}
	sort.Strings(phases)
	parts := make([]string, 0, len(phases))
	for _, p := range phases {
		parts = append(parts, fmt.Sprintf("%s: %d requests, %s", p, len(by[p]), TallyString(Tally(by[p]))))
	}
	return strings.Join(parts, " | ")
}

// WriteJSONL writes the history to path, one op per line.
func (h *History) WriteJSONL(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("history: create %s: %w", path, err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, op := range h.Ops() {
		if err := enc.Encode(op); err != nil {
			f.Close()
			return fmt.Errorf("history: encode op %d: %w", op.Seq, err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("history: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("history: close %s: %w", path, err)
	}
	return nil
}
