package pipeline

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/seed-1cff2221/callback-platform/callbackd/gate"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/store"
)

// BenchmarkProcessWindowHit measures the cost of answering a duplicate this replica finished:
// the gate a replay storm mostly hits (adapter parse excluded: the fake's is trivial).
func BenchmarkProcessWindowHit(b *testing.B) {
	r := newRig(&testing.T{}, &fakeLedger{result: store.Result{Outcome: store.Applied}}, &fakeClaims{outcome: gate.Claimed})
	req := httptest.NewRequest(http.MethodPost, "/notify/"+channel, strings.NewReader("ok"))
	body := []byte("ok")
	if v, _ := r.p.Process(context.Background(), channel, req, body); v != notify.Success {
		b.Fatalf("first delivery: expected success, got %s", v)
	}
	b.ReportAllocs()
	for b.Loop() {
		if v, _ := r.p.Process(context.Background(), channel, req, body); v != notify.Success {
			b.Fatalf("expected success, got %s", v)
		}
	}
}

// BenchmarkGateKey measures deriving the gate key of a notification.
func BenchmarkGateKey(b *testing.B) {
	n := notify.Notification{Channel: "wx", MerchantID: "1900000001", OutTradeNo: "ORDER-20261129-000001",
		Kind: notify.KindPayment, Status: notify.StatusSucceeded, ProviderTxnID: "4200000000202611290000000001"}
	b.ReportAllocs()
	for b.Loop() {
		_ = GateKey(n)
	}
}
