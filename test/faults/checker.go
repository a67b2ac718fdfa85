package faults

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Snapshot is the database's state as the checker needs it, read straight from PostgreSQL.
type Snapshot struct {
	// Taken is when the snapshot was read: successes answered before it must be in it.
	Taken time.Time
	// Orders maps order_no to status.
	Orders map[string]string
	// Receipts are the committed callback receipts.
	Receipts []ReceiptRow
	// Ledger are the ledger entries.
	Ledger []LedgerRow
	// Events are the outbox events.
	Events []EventRow
	// Exceptions are the recorded payment exceptions.
	Exceptions []ExceptionRow
}

// ReceiptRow is one callback_receipts row.
type ReceiptRow struct {
	Channel, OrderNo string
	Kind             Kind
	Outcome          string
	TxnID            string
}

// Key is the receipt's idempotency key in the checker's form.
func (r ReceiptRow) Key() string { return r.Channel + "/" + r.OrderNo + "/" + string(r.Kind) }

// LedgerRow is one ledger_entries row.
type LedgerRow struct {
	OrderNo, EntryType, RefundNo, TxnID string
	Amount                              int64
}

// EventRow is one outbox_events row.
type EventRow struct {
	EventID, Channel, OrderNo, EventType string
}

// ExceptionRow is one payment_exceptions row.
type ExceptionRow struct {
	OrderNo, Kind, TxnID string
}

// SinkEvent is one delivery the merchant sink received.
type SinkEvent struct {
	WebhookID string    `json:"webhook_id"`
	EventID   string    `json:"event_id"`
	OrderNo   string    `json:"order_no"`
	Type      string    `json:"type"`
	At        time.Time `json:"at"`
}

// Fault is one injected fault and the evidence that it really took place.
type Fault struct {
	// Name says what was done, e.g. "SIGKILL of the Redis master redis-0".
	Name string
	// Evidence says what shows it happened, e.g. "Sentinel +switch-master seen; 412 resets".
	Evidence string
	// Happened is false when the evidence is missing: the checker then fails the scenario.
	Happened bool
}

// CheckInput is everything the checker looks at. The checker is a pure function of it.
type CheckInput struct {
	// Ops is the history of requests.
	Ops []Op
	// Expected are the valid notifications the provider sent; after the faults healed and the
	// provider's retries ended, each must be applied exactly once (or, for a payment and a
	// close of the same order, exactly one of the two).
	Expected []Notification
	// Final is the database after everything converged.
	Final Snapshot
	// Early are snapshots taken earlier (e.g. right after a crash and restart, before any
	// retry): every success answered before one was taken must already be committed in it.
	Early []Snapshot
	// Sink is what the merchant's sink received; nil skips the sink checks.
	Sink []SinkEvent
	// Faults are the injected faults with their evidence.
	Faults []Fault
	// AllowUnfinished lets expected notifications end without a success answer (the scenario
	// measures something else); their effect is still checked for at most once.
	AllowUnfinished bool
}

// The invariants, as named in violations.
const (
	InvAtMostOnce     = "at-most-once"     // per key: ≤1 receipt, ≤1 ledger entry, ≤1 event id
	InvStateMachine   = "state-machine"    // per order: one transition out of PENDING, status matches the ledger
	InvNoFalseSuccess = "no-false-success" // every success answered has a committed effect
	InvConverged      = "converged"        // every valid notification applied exactly once in the end
	InvSink           = "sink"             // every committed event delivered, no phantom events
	InvFaultEvidence  = "fault-evidence"   // every injected fault left evidence
	InvNoRefusal      = "no-refusal"       // valid notifications are never refused
)

// Violation is one broken invariant.
type Violation struct {
	Invariant string
	Key       string
	Detail    string
}

// String formats the violation as "[invariant] key: detail".
func (v Violation) String() string { return fmt.Sprintf("[%s] %s: %s", v.Invariant, v.Key, v.Detail) }

// Counts are the scenario's numbers, printed with its evidence.
type Counts struct {
	Notifications, Requests                  int
	Successes, Retryable, Rejected, NoAnswer int
	Receipts, Ledger, Events, Exceptions     int
	SinkDeliveries, SinkEvents               int
	Faults                                   int
}

// String formats the counts on one line, for the scenario logs.
func (c Counts) String() string {
	return fmt.Sprintf("notifications=%d requests=%d (success=%d retryable=%d rejected=%d no-answer=%d) receipts=%d ledger=%d events=%d exceptions=%d sink deliveries=%d (distinct events %d) faults=%d",
		c.Notifications, c.Requests, c.Successes, c.Retryable, c.Rejected, c.NoAnswer,
		c.Receipts, c.Ledger, c.Events, c.Exceptions, c.SinkDeliveries, c.SinkEvents, c.Faults)
}

// Report is the checker's verdict.
type Report struct {
	Counts     Counts
	Violations []Violation
}

// OK reports whether every invariant held.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// ByInvariant counts the violations per invariant.
func (r Report) ByInvariant() map[string]int {
	out := map[string]int{}
	for _, v := range r.Violations {
		out[v.Invariant]++
	}
	return out
}

// Summary lists the violation counts per invariant and the first few violations.
func (r Report) Summary(first int) string {
	if r.OK() {
		return "all invariants hold"
	}
	by := r.ByInvariant()
	names := make([]string, 0, len(by))
	for n := range by {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s=%d ", n, by[n])
	}
	for i, v := range r.Violations {
		if i == first {
			fmt.Fprintf(&b, "\n  … and %d more", len(r.Violations)-first)
			break
		}
		fmt.Fprintf(&b, "\n  %s", v)
	}
	return b.String()
}

// Check verifies the invariants over a history, the database and the sink.
func Check(in CheckInput) Report {
	var r Report
	add := func(inv, key, format string, args ...any) {
		r.Violations = append(r.Violations, Violation{Invariant: inv, Key: key, Detail: fmt.Sprintf(format, args...)})
	}
	t := Tally(in.Ops)
	r.Counts = Counts{
		Notifications: len(in.Expected), Requests: len(in.Ops),
		Successes: t[Success], Retryable: t[Retryable], Rejected: t[Rejected], NoAnswer: t[Transport],
		Receipts: len(in.Final.Receipts), Ledger: len(in.Final.Ledger), Events: len(in.Final.Events),
		Exceptions: len(in.Final.Exceptions), SinkDeliveries: len(in.Sink), Faults: len(in.Faults),
	}

	// --- at most once, per key -----------------------------------------------------------
	receipts := map[string]int{}
	for _, rc := range in.Final.Receipts {
		receipts[rc.Key()]++
	}
	for k, n := range receipts {
		if n > 1 {
			add(InvAtMostOnce, k, "expected at most 1 receipt, got %d", n)
		}
	}
	payments := map[string][]LedgerRow{} // order → payment ledger entries
	for _, l := range in.Final.Ledger {
		if l.EntryType == "payment" {
			payments[l.OrderNo] = append(payments[l.OrderNo], l)
		}
	}
	for o, ls := range payments {
		if len(ls) > 1 {
			add(InvAtMostOnce, o+"/payment", "expected at most 1 payment ledger entry, got %d", len(ls))
		}
	}
	eventIDs := map[string]map[string]bool{} // order/type → distinct event ids
	for _, e := range in.Final.Events {
		k := e.OrderNo + "/" + e.EventType
		if eventIDs[k] == nil {
			eventIDs[k] = map[string]bool{}
		}
		eventIDs[k][e.EventID] = true
	}
	for k, ids := range eventIDs {
		if len(ids) > 1 && !strings.HasSuffix(k, "/payment.exception") {
			add(InvAtMostOnce, k, "expected at most 1 event id, got %d", len(ids))
		}
	}
	if in.Sink != nil {
		sinkIDs := map[string]map[string]bool{}
		distinct := map[string]bool{}
		for _, s := range in.Sink {
			k := s.OrderNo + "/" + s.Type
			if sinkIDs[k] == nil {
				sinkIDs[k] = map[string]bool{}
			}
			sinkIDs[k][s.EventID] = true
			distinct[s.EventID] = true
		}
		r.Counts.SinkEvents = len(distinct)
		for k, ids := range sinkIDs {
			if len(ids) > 1 && !strings.HasSuffix(k, "/payment.exception") {
				add(InvAtMostOnce, k, "the merchant received %d different event ids for one effect, expected 1", len(ids))
			}
		}
	}

	// --- state machine, per order --------------------------------------------------------
	closedEvents := map[string]int{}
	for _, e := range in.Final.Events {
		if e.EventType == "order.closed" {
			closedEvents[e.OrderNo]++
		}
	}
	for o, status := range in.Final.Orders {
		paid, closed := len(payments[o]), closedEvents[o]
		if paid > 0 && closed > 0 {
			add(InvStateMachine, o, "both paid (%d ledger entries) and closed (%d order.closed events): two transitions out of PENDING", paid, closed)
		}
		switch status {
		case "PAID", "PARTIALLY_REFUNDED", "REFUNDED":
			if paid == 0 {
				add(InvStateMachine, o, "status %s without a payment ledger entry", status)
			}
		case "CLOSED":
			if paid > 0 {
				add(InvStateMachine, o, "status CLOSED with %d payment ledger entries", paid)
			}
		case "PENDING":
			if paid > 0 || closed > 0 {
				add(InvStateMachine, o, "status PENDING with %d payment ledger entries and %d order.closed events", paid, closed)
			}
		}
	}

	// --- no false success ----------------------------------------------------------------
	committed := func(s Snapshot) map[string]bool {
		m := map[string]bool{}
		for _, rc := range s.Receipts {
			m[rc.Key()] = true
		}
		return m
	}
	firstSuccess := map[string]time.Time{}
	for _, op := range in.Ops {
		if op.Class == Success {
			if t0, ok := firstSuccess[op.Key]; !ok || op.Answered.Before(t0) {
				firstSuccess[op.Key] = op.Answered
			}
		}
	}
	snaps := append([]Snapshot{in.Final}, in.Early...)
	for i, s := range snaps {
		c := committed(s)
		name := "final"
		if i > 0 {
			name = fmt.Sprintf("early#%d", i)
		}
		for k, at := range firstSuccess {
			if at.After(s.Taken) {
				continue
			}
			if !c[k] {
				add(InvNoFalseSuccess, k, "answered success at %s but no committed receipt in the %s snapshot (%s)",
					at.Format("15:04:05.000"), name, s.Taken.Format("15:04:05.000"))
			}
		}
	}

	// --- refusals of valid notifications ---------------------------------------------------
	expectedKeys := map[string]Notification{}
	for _, n := range in.Expected {
		expectedKeys[n.Key()] = n
	}
	refused := map[string]int{}
	for _, op := range in.Ops {
		if op.Class == Rejected {
			if _, ok := expectedKeys[op.Key]; ok {
				refused[op.Key]++
			}
		}
	}
	for k, n := range refused {
		add(InvNoRefusal, k, "a valid notification was refused %d times (expected retryable failures at worst)", n)
	}

	// --- converged: every valid notification applied exactly once ---------------------------
	byOrder := map[string][]Notification{}
	for _, n := range in.Expected {
		byOrder[n.OrderNo] = append(byOrder[n.OrderNo], n)
	}
	exceptions := map[string]int{}
	for _, e := range in.Final.Exceptions {
		exceptions[e.OrderNo]++
	}
	for _, n := range in.Expected {
		k := n.Key()
		if !in.AllowUnfinished {
			if _, ok := firstSuccess[k]; !ok {
				add(InvConverged, k, "never answered success after the faults healed and the provider's retries ended")
			}
			if receipts[k] != 1 {
				add(InvConverged, k, "expected exactly 1 committed receipt, got %d", receipts[k])
			}
		}
	}
	for o, ns := range byOrder {
		var hasPay, hasClose bool
		for _, n := range ns {
			hasPay = hasPay || n.Kind == KindPayment
			hasClose = hasClose || n.Kind == KindClose
		}
		status, registered := in.Final.Orders[o]
		if !registered {
			add(InvConverged, o, "order not registered in the database")
			continue
		}
		paid, closed := len(payments[o]), closedEvents[o]
		switch {
		case in.AllowUnfinished:
			// at most once is checked above; nothing is owed
		case hasPay && hasClose:
			// Exactly one of the two: paid (the close then changes nothing), or closed (the
			// payment then is an exception for a person, never dropped).
			okPaid := status == "PAID" && paid == 1 && closed == 0
			okClosed := status == "CLOSED" && paid == 0 && closed == 1 && exceptions[o] >= 1
			if !okPaid && !okClosed {
				add(InvConverged, o, "payment and close: expected PAID with 1 ledger entry or CLOSED with the payment as an exception, got %s with %d ledger entries, %d close events, %d exceptions",
					status, paid, closed, exceptions[o])
			}
		case hasPay:
			for _, n := range ns {
				for _, l := range payments[o] {
					if n.Kind == KindPayment && l.Amount != n.Amount {
						add(InvConverged, o, "ledger amount %d, expected the notified %d", l.Amount, n.Amount)
					}
				}
			}
			if status != "PAID" || paid != 1 || len(eventIDs[o+"/payment.succeeded"]) != 1 {
				add(InvConverged, o, "expected PAID with 1 ledger entry and 1 payment.succeeded event, got %s with %d ledger entries and %d events",
					status, paid, len(eventIDs[o+"/payment.succeeded"]))
			}
		case hasClose:
			if status != "CLOSED" || closed != 1 {
				add(InvConverged, o, "expected CLOSED with 1 order.closed event, got %s with %d", status, closed)
			}
		}
	}

	// --- the merchant's sink ------------------------------------------------------------
	if in.Sink != nil {
		got := map[string]bool{}
		for _, s := range in.Sink {
			got[s.EventID] = true
		}
		known := map[string]bool{}
		for _, e := range in.Final.Events {
			known[e.EventID] = true
			if !got[e.EventID] {
				add(InvSink, e.OrderNo+"/"+e.EventType, "committed event %s never reached the merchant", e.EventID)
			}
		}
		for id := range got {
			if !known[id] {
				add(InvSink, id, "the merchant received an event that is not committed (a phantom effect)")
			}
		}
	}

	// --- fault evidence ----------------------------------------------------------------
	for _, f := range in.Faults {
		if !f.Happened {
			add(InvFaultEvidence, f.Name, "the fault left no evidence that it took place (%s)", f.Evidence)
		}
	}
	sort.SliceStable(r.Violations, func(i, j int) bool {
		if r.Violations[i].Invariant != r.Violations[j].Invariant {
			return r.Violations[i].Invariant < r.Violations[j].Invariant
		}
		return r.Violations[i].Key < r.Violations[j].Key
	})
	return r
}
