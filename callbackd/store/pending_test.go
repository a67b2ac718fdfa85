package store

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestPendingOrdersIsTheReconcilersWorkList(t *testing.T) {
	ctx := testContext(t)
	s := newStore(t)
	now := time.Now().UTC()
	in := func(d time.Duration) *time.Time { t := now.Add(d); return &t }

	orders := []struct {
		no      string
		channel string
		age     time.Duration // created this long ago
		expires *time.Time
		paid    bool
	}{
		{no: "old-1", channel: "wx", age: 2 * time.Hour},
		{no: "old-2", channel: "wx", age: 3 * time.Hour},
		{no: "young", channel: "wx", age: time.Minute},
		{no: "young-expired", channel: "wx", age: time.Minute, expires: in(-time.Second)},
		{no: "young-expiring-later", channel: "wx", age: time.Minute, expires: in(time.Hour)},
		{no: "old-paid", channel: "wx", age: 2 * time.Hour, paid: true},
		{no: "old-other-channel", channel: "ali", age: 2 * time.Hour},
	}
	for _, o := range orders {
		in := testOrder(o.no)
		in.Channel = o.channel
		in.ExpiresAt = o.expires
		mustCreate(t, s, in)
		if o.paid {
			mustApply(t, s, paymentOf(in, "txn-"+o.no), Applied)
		}
		if _, err := s.Pool().Exec(ctx, `UPDATE payment_orders SET created_at = $2 WHERE order_no = $1`,
			o.no, now.Add(-o.age)); err != nil {
			t.Fatalf("backdate %s: %v", o.no, err)
		}
	}

	tests := []struct {
		name string
		q    PendingQuery
		want []string
	}{
		{"stuck for an hour, oldest first", PendingQuery{Channel: "wx", CreatedBefore: now.Add(-time.Hour), Limit: 10},
			[]string{"old-2", "old-1"}},
		{"expired", PendingQuery{Channel: "wx", ExpiredBefore: now, Limit: 10}, []string{"young-expired"}},
		{"stuck or expired", PendingQuery{Channel: "wx", CreatedBefore: now.Add(-time.Hour), ExpiredBefore: now, Limit: 10},
			[]string{"old-2", "old-1", "young-expired"}},
		{"limited", PendingQuery{Channel: "wx", CreatedBefore: now.Add(-time.Hour), Limit: 1}, []string{"old-2"}},
		{"other channel", PendingQuery{Channel: "ali", CreatedBefore: now.Add(-time.Hour), Limit: 10}, []string{"old-other-channel"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.PendingOrders(ctx, tc.q)
			if err != nil {
				t.Fatalf("PendingOrders: %v", err)
			}
			var nos []string
			for _, o := range got {
				nos = append(nos, o.OrderNo)
			}
			if !slices.Equal(nos, tc.want) {
				t.Fatalf("PendingOrders = %v, want %v", nos, tc.want)
			}
			tc.q.Limit = 0
			n, err := s.CountPendingOrders(ctx, tc.q)
			if err != nil {
				t.Fatalf("CountPendingOrders: %v", err)
			}
			if tc.name != "limited" && n != int64(len(tc.want)) {
				t.Fatalf("CountPendingOrders = %d, want %d", n, len(tc.want))
			}
		})
	}

	for name, q := range map[string]PendingQuery{
		"no channel":   {CreatedBefore: now, Limit: 1},
		"no condition": {Channel: "wx", Limit: 1},
		"no limit":     {Channel: "wx", CreatedBefore: now},
	} {
		if _, err := s.PendingOrders(ctx, q); !errors.Is(err, ErrInvalidInput) {
			t.Errorf("%s: err = %v, want ErrInvalidInput", name, err)
		}
	}
}
