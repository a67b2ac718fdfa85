package merchantapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/callbackd/query"
	"github.com/seed-1cff2221/callback-platform/callbackd/store"
)

// fakeSyncer answers SyncOrder with a preset result and records the order numbers asked for.
type fakeSyncer struct {
	res   query.Result
	err   error
	asked []string
}

func (f *fakeSyncer) SyncOrder(_ context.Context, orderNo string) (query.Result, error) {
	f.asked = append(f.asked, orderNo)
	return f.res, f.err
}

// TestSyncRoute: POST /v1/orders/{order_no}/sync answers the synced order, maps the syncer's
// classified failures to statuses a merchant can act on, needs the bearer token, and leaves the
// other routes to the wrapped handler.
func TestSyncRoute(t *testing.T) {
	paidAt := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	paid := query.Result{
		Order: store.OrderDetails{Order: store.Order{OrderNo: "ORD-1", Channel: "wx", MerchantID: "1900000109", Amount: 100,
			Currency: "CNY", Status: store.StatusPaid, ProviderTxnID: "4200000001", PaidAt: &paidAt},
			Ledger: []store.LedgerEntry{{Type: "payment", Amount: 100, Currency: "CNY", ProviderTxnID: "4200000001"}}},
		Queried: true, Answer: query.Answer{State: query.StatePaid, ProviderState: "SUCCESS"}, Action: query.ActionPaid,
	}
	cases := []struct {
		name, method, path, token string
		res                       query.Result
		err                       error
		wantStatus                int
		wantAsked                 bool
	}{
		{"paid", http.MethodPost, "/v1/orders/ORD-1/sync", "tok", paid, nil, http.StatusOK, true},
		{"unknown order", http.MethodPost, "/v1/orders/ORD-1/sync", "tok", query.Result{}, fmt.Errorf("sync: %w", query.ErrUnknownOrder), http.StatusNotFound, true},
		{"not queryable", http.MethodPost, "/v1/orders/ORD-1/sync", "tok", query.Result{}, fmt.Errorf("sync: %w", query.ErrNotQueryable), http.StatusConflict, true},
		{"provider down", http.MethodPost, "/v1/orders/ORD-1/sync", "tok", query.Result{}, fmt.Errorf("sync: %w", query.ErrTransient), http.StatusServiceUnavailable, true},
		{"answer refused", http.MethodPost, "/v1/orders/ORD-1/sync", "tok", query.Result{}, fmt.Errorf("sync: %w", query.ErrPermanent), http.StatusBadGateway, true},
		{"bad order number", http.MethodPost, "/v1/orders/ORD%201/sync", "tok", paid, nil, http.StatusBadRequest, false},
		{"no token", http.MethodPost, "/v1/orders/ORD-1/sync", "", paid, nil, http.StatusUnauthorized, false},
		{"wrong token", http.MethodPost, "/v1/orders/ORD-1/sync", "nope", paid, nil, http.StatusUnauthorized, false},
		{"GET", http.MethodGet, "/v1/orders/ORD-1/sync", "tok", paid, nil, http.StatusMethodNotAllowed, false},
		{"other routes go to the wrapped handler", http.MethodGet, "/v1/orders/ORD-1", "tok", paid, nil, http.StatusTeapot, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			syncer := &fakeSyncer{res: tc.res, err: tc.err}
			inner := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
			h := WithSync(inner, syncer, NewStaticTokens("tok"), nil)
			req := httptest.NewRequest(tc.method, tc.path, nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.wantStatus {
				t.Fatalf("expected %d, got %d %s", tc.wantStatus, rec.Code, rec.Body)
			}
			if asked := len(syncer.asked) > 0; asked != tc.wantAsked {
				t.Errorf("syncer asked: expected %v, got %v (%v)", tc.wantAsked, asked, syncer.asked)
			}
			if tc.wantStatus == http.StatusServiceUnavailable && rec.Header().Get("Retry-After") == "" {
				t.Error("503: expected a Retry-After header")
			}
			if tc.wantStatus != http.StatusOK {
				return
			}
			var v SyncView
			if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
				t.Fatalf("answer is not a SyncView: %v", err)
			}
			if v.Order.OrderNo != "ORD-1" || v.Order.Status != "PAID" || len(v.Order.LedgerEntries) != 1 ||
				!v.Queried || v.ProviderState != "SUCCESS" || v.Action != "paid" {
				t.Errorf("expected ORD-1 PAID with 1 ledger entry, queried, SUCCESS, paid; got %+v", v)
			}
		})
	}
}
