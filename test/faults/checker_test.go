package faults

import (
	"testing"
	"time"
)

// plant builds a consistent world for n paid orders: each answered success once at t0+i ms,
// each with one receipt, one ledger entry, one event and one sink delivery. Cases then break it.
func plant(n int) (CheckInput, time.Time) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	in := CheckInput{Final: Snapshot{Taken: t0.Add(time.Hour), Orders: map[string]string{}}, Sink: []SinkEvent{}}
	for i := range n {
		no := "o-" + string(rune('a'+i))
		p := Notification{Channel: Channel, OrderNo: no, Kind: KindPayment, Amount: 100, Currency: Currency, TxnID: "txn_" + no}
		in.Expected = append(in.Expected, p)
		at := t0.Add(time.Duration(i) * time.Millisecond)
		in.Ops = append(in.Ops,
			Op{Seq: int64(2*i + 1), Key: p.Key(), OrderNo: no, Kind: KindPayment, Class: Retryable, Sent: at, Answered: at},
			Op{Seq: int64(2*i + 2), Key: p.Key(), OrderNo: no, Kind: KindPayment, Class: Success, Sent: at, Answered: at})
		in.Final.Orders[no] = "PAID"
		in.Final.Receipts = append(in.Final.Receipts, ReceiptRow{Channel: Channel, OrderNo: no, Kind: KindPayment, Outcome: "applied"})
		in.Final.Ledger = append(in.Final.Ledger, LedgerRow{OrderNo: no, EntryType: "payment", Amount: 100})
		in.Final.Events = append(in.Final.Events, EventRow{EventID: "ev-" + no, Channel: Channel, OrderNo: no, EventType: "payment.succeeded"})
		in.Sink = append(in.Sink,
			SinkEvent{EventID: "ev-" + no, OrderNo: no, Type: "payment.succeeded"},
			SinkEvent{EventID: "ev-" + no, OrderNo: no, Type: "payment.succeeded"}) // at least once: a redelivery is fine
	}
	return in, t0
}

func TestCheckerSeesPlantedViolations(t *testing.T) {
	cases := []struct {
		name  string
		plant func(in *CheckInput, t0 time.Time)
		want  map[string]int // violations per invariant; empty: none
	}{
		{name: "consistent history", plant: func(*CheckInput, time.Time) {}, want: map[string]int{}},
		{name: "second ledger entry for one key", want: map[string]int{InvAtMostOnce: 1, InvConverged: 1}, plant: func(in *CheckInput, _ time.Time) {
			in.Final.Ledger = append(in.Final.Ledger, LedgerRow{OrderNo: "o-a", EntryType: "payment", Amount: 100})
		}},
		{name: "ledger amount differs from the notification", want: map[string]int{InvConverged: 1}, plant: func(in *CheckInput, _ time.Time) {
			in.Final.Ledger[2].Amount = 99
		}},
		{name: "two event ids for one effect", want: map[string]int{InvAtMostOnce: 1, InvConverged: 1, InvSink: 1}, plant: func(in *CheckInput, _ time.Time) {
			in.Final.Events = append(in.Final.Events, EventRow{EventID: "ev-other", OrderNo: "o-b", EventType: "payment.succeeded"})
		}},
		{name: "merchant got two event ids", want: map[string]int{InvAtMostOnce: 1, InvSink: 1}, plant: func(in *CheckInput, _ time.Time) {
			in.Sink = append(in.Sink, SinkEvent{EventID: "ev-phantom", OrderNo: "o-b", Type: "payment.succeeded"})
		}},
		{name: "success answered, commit lost (final)", want: map[string]int{InvNoFalseSuccess: 1, InvConverged: 2, InvSink: 1}, plant: func(in *CheckInput, _ time.Time) {
			in.Final.Receipts = in.Final.Receipts[1:]
			in.Final.Ledger = in.Final.Ledger[1:]
			in.Final.Events = in.Final.Events[1:]
			in.Final.Orders["o-a"] = "PENDING"
		}},
		{name: "success answered before an early snapshot that lacks it", want: map[string]int{InvNoFalseSuccess: 1}, plant: func(in *CheckInput, t0 time.Time) {
			in.Early = []Snapshot{{Taken: t0.Add(time.Second), Orders: map[string]string{}, Receipts: in.Final.Receipts[1:]}}
		}},
		{name: "success answered after the early snapshot is not owed in it", want: map[string]int{}, plant: func(in *CheckInput, t0 time.Time) {
			in.Early = []Snapshot{{Taken: t0.Add(-time.Second), Orders: map[string]string{}}}
		}},
		{name: "never answered success", want: map[string]int{InvConverged: 1}, plant: func(in *CheckInput, _ time.Time) {
			in.Ops = in.Ops[:len(in.Ops)-1]
		}},
		{name: "valid notification refused", want: map[string]int{InvNoRefusal: 1}, plant: func(in *CheckInput, t0 time.Time) {
			in.Ops = append(in.Ops, Op{Key: in.Expected[0].Key(), Class: Rejected, Answered: t0})
		}},
		{name: "paid and closed", want: map[string]int{InvStateMachine: 2, InvConverged: 1}, plant: func(in *CheckInput, t0 time.Time) {
			c := CloseOf(in.Expected[0])
			in.Expected = append(in.Expected, c)
			in.Ops = append(in.Ops, Op{Key: c.Key(), Class: Success, Answered: t0})
			in.Final.Receipts = append(in.Final.Receipts, ReceiptRow{Channel: Channel, OrderNo: c.OrderNo, Kind: KindClose})
			in.Final.Orders[c.OrderNo] = "CLOSED"
			in.Final.Events = append(in.Final.Events, EventRow{EventID: "ev-close", OrderNo: c.OrderNo, EventType: "order.closed"})
			in.Sink = append(in.Sink, SinkEvent{EventID: "ev-close", OrderNo: c.OrderNo, Type: "order.closed"})
		}},
		{name: "close loses the race, payment kept as exception", want: map[string]int{}, plant: func(in *CheckInput, t0 time.Time) {
			c := CloseOf(in.Expected[0])
			in.Expected = append(in.Expected, c)
			in.Ops = append(in.Ops, Op{Key: c.Key(), Class: Success, Answered: t0})
			in.Final.Receipts = append(in.Final.Receipts, ReceiptRow{Channel: Channel, OrderNo: c.OrderNo, Kind: KindClose})
			in.Final.Orders[c.OrderNo] = "CLOSED"
			in.Final.Ledger = in.Final.Ledger[1:]
			in.Final.Events[0] = EventRow{EventID: "ev-close", OrderNo: c.OrderNo, EventType: "order.closed"}
			in.Final.Events = append(in.Final.Events, EventRow{EventID: "ev-exc", OrderNo: c.OrderNo, EventType: "payment.exception"})
			in.Final.Exceptions = append(in.Final.Exceptions, ExceptionRow{OrderNo: c.OrderNo, Kind: "payment_on_closed_order"})
			in.Sink = append(in.Sink[2:], SinkEvent{EventID: "ev-close", OrderNo: c.OrderNo, Type: "order.closed"},
				SinkEvent{EventID: "ev-exc", OrderNo: c.OrderNo, Type: "payment.exception"})
		}},
		{name: "committed event never delivered", want: map[string]int{InvSink: 1}, plant: func(in *CheckInput, _ time.Time) {
			in.Sink = in.Sink[2:]
		}},
		{name: "fault without evidence", want: map[string]int{InvFaultEvidence: 1}, plant: func(in *CheckInput, _ time.Time) {
			in.Faults = []Fault{{Name: "kill", Evidence: "ok", Happened: true}, {Name: "partition", Evidence: "no held chunks", Happened: false}}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in, t0 := plant(3)
			tc.plant(&in, t0)
			r := Check(in)
			got := r.ByInvariant()
			if len(got) != len(tc.want) {
				t.Fatalf("violations per invariant: expected %v, got %v\n%s", tc.want, got, r.Summary(20))
			}
			for inv, n := range tc.want {
				if got[inv] != n {
					t.Fatalf("violations of %s: expected %d, got %d (all: %v)\n%s", inv, n, got[inv], got, r.Summary(20))
				}
			}
		})
	}
}

func TestCheckerCounts(t *testing.T) {
	in, _ := plant(4)
	r := Check(in)
	want := Counts{Notifications: 4, Requests: 8, Successes: 4, Retryable: 4, Receipts: 4, Ledger: 4, Events: 4,
		SinkDeliveries: 8, SinkEvents: 4}
	if r.Counts != want {
		t.Fatalf("counts:\n  expected %s\n  got      %s", want, r.Counts)
	}
}
