package jsonfields

import (
	"strings"
	"testing"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
)

var defaults = callbackdv1alpha1.GenericFields{
	OrderNo: "data.order_no", Amount: "data.amount", EventType: "type", RefundNo: "data.refund_no",
	PaidEvents: []string{"paid"}, RefundEvents: []string{"refunded"},
}

func TestResolveRefusesUnusablePaths(t *testing.T) {
	tests := []struct {
		name       string
		configured *callbackdv1alpha1.GenericFields
		defaults   callbackdv1alpha1.GenericFields
		want       string
	}{
		{"empty path element", &callbackdv1alpha1.GenericFields{OrderNo: "data..order_no"}, defaults, "generic.orderNo"},
		{"too deep", &callbackdv1alpha1.GenericFields{Amount: strings.Repeat("a.", 20) + "a"}, defaults, "generic.amount"},
		{"no event type path", nil, callbackdv1alpha1.GenericFields{OrderNo: "o", Amount: "a", PaidEvents: []string{"p"}}, "generic.eventType"},
		{"no paid events", nil, callbackdv1alpha1.GenericFields{OrderNo: "o", Amount: "a", EventType: "t"}, "generic.paidEvents"},
		{"refund events without refund number", nil, callbackdv1alpha1.GenericFields{OrderNo: "o", Amount: "a", EventType: "t", PaidEvents: []string{"p"}, RefundEvents: []string{"r"}}, "generic.refundNo"},
	}
	for _, tc := range tests {
		_, err := Resolve(tc.configured, tc.defaults, "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: expected an error naming %s, got %v", tc.name, tc.want, err)
		}
	}
}

func TestExtractFollowsArraysAndConfiguredOverrides(t *testing.T) {
	f, err := Resolve(&callbackdv1alpha1.GenericFields{OrderNo: "data.items.1.order", PaidEvents: []string{"custom.paid"}}, defaults, "")
	if err != nil {
		t.Fatal(err)
	}
	var n notify.Notification
	err = f.Extract([]byte(`{"type":"custom.paid","data":{"amount":3,"items":[{"order":"no"},{"order":"O-2"}]}}`), &n)
	if err != nil {
		t.Fatalf("expected extraction to succeed, got %v", err)
	}
	if n.OutTradeNo != "O-2" || n.Amount != 3 || n.Kind != notify.KindPayment {
		t.Fatalf("expected payment O-2 of 3, got %+v", n)
	}
	// The default paid event no longer counts once events are configured.
	var m notify.Notification
	if err := f.Extract([]byte(`{"type":"paid","data":{"amount":3,"items":[{},{"order":"O-2"}]}}`), &m); err != nil || m.Status != notify.StatusIgnored {
		t.Fatalf("expected the default event type to be ignored, got %+v, %v", m, err)
	}
}
