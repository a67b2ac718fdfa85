package merchantapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/callbackd/outbox"
)

// fakeOutbox records the calls of the outbox routes and answers with preset deliveries.
type fakeOutbox struct {
	ds    []outbox.Delivery
	err   error
	calls []string
	f     outbox.Filter
}

func (q *fakeOutbox) List(_ context.Context, f outbox.Filter) ([]outbox.Delivery, error) {
	q.calls = append(q.calls, "list")
	q.f = f
	return q.ds, q.err
}

func (q *fakeOutbox) DeadLetters(_ context.Context, channel string, limit int) ([]outbox.Delivery, error) {
	q.calls = append(q.calls, fmt.Sprintf("dead-letters %s %d", channel, limit))
	return q.ds, q.err
}

func (q *fakeOutbox) Redeliver(_ context.Context, eventID, endpoint string) ([]outbox.Delivery, error) {
	q.calls = append(q.calls, fmt.Sprintf("redeliver %s %s", eventID, endpoint))
	return q.ds, q.err
}

// TestOutboxRoutes: the outbox routes call the queue with the request's parameters, answer the
// deliveries as DeliveriesView, map the queue's errors to statuses an operator can act on, need
// the bearer token, and leave the other routes to the wrapped handler. (The queue itself is
// tested against PostgreSQL in package outbox.)
func TestOutboxRoutes(t *testing.T) {
	dead := outbox.Delivery{ID: 7, EventID: "evt_1", WebhookID: "evt_1:crm", Channel: "wx", Endpoint: "crm",
		EventType: "payment.succeeded", OrderNo: "ORD-1", Status: outbox.StatusDead, Attempts: 6,
		LastHTTPStatus: 503, LastError: "endpoint answered HTTP 503", CreatedAt: time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)}
	cases := []struct {
		name, method, path, token string
		err                       error
		wantStatus                int
		wantCall                  string
	}{
		{"list", http.MethodGet, "/v1/outbox/deliveries?status=dead&channel=wx&limit=10&after=99", "tok", nil, http.StatusOK, "list"},
		{"dead letters", http.MethodGet, "/v1/outbox/dead-letters?channel=wx&limit=5", "tok", nil, http.StatusOK, "dead-letters wx 5"},
		{"redeliver", http.MethodPost, "/v1/outbox/events/evt_1/redeliver?endpoint=crm", "tok", nil, http.StatusOK, "redeliver evt_1 crm"},
		{"redeliver unknown", http.MethodPost, "/v1/outbox/events/evt_x/redeliver", "tok", fmt.Errorf("x: %w", outbox.ErrNotFound), http.StatusNotFound, "redeliver evt_x "},
		{"redeliver in flight", http.MethodPost, "/v1/outbox/events/evt_1/redeliver", "tok", fmt.Errorf("x: %w", outbox.ErrInFlight), http.StatusConflict, "redeliver evt_1 "},
		{"database down", http.MethodGet, "/v1/outbox/deliveries", "tok", errors.New("connection refused"), http.StatusServiceUnavailable, "list"},
		{"bad status", http.MethodGet, "/v1/outbox/deliveries?status=lost", "tok", nil, http.StatusBadRequest, ""},
		{"bad limit", http.MethodGet, "/v1/outbox/dead-letters?limit=-1", "tok", nil, http.StatusBadRequest, ""},
		{"limit too high", http.MethodGet, "/v1/outbox/deliveries?limit=100000", "tok", nil, http.StatusBadRequest, ""},
		{"no token", http.MethodGet, "/v1/outbox/dead-letters", "", nil, http.StatusUnauthorized, ""},
		{"wrong token", http.MethodPost, "/v1/outbox/events/evt_1/redeliver", "nope", nil, http.StatusUnauthorized, ""},
		{"GET redeliver", http.MethodGet, "/v1/outbox/events/evt_1/redeliver", "tok", nil, http.StatusMethodNotAllowed, ""},
		{"POST list", http.MethodPost, "/v1/outbox/deliveries", "tok", nil, http.StatusMethodNotAllowed, ""},
		{"other routes go to the wrapped handler", http.MethodGet, "/v1/orders/ORD-1", "tok", nil, http.StatusTeapot, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeOutbox{ds: []outbox.Delivery{dead}, err: tc.err}
			inner := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
			h := WithOutbox(inner, q, NewStaticTokens("tok"), nil)
			req := httptest.NewRequest(tc.method, tc.path, nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.wantStatus {
				t.Fatalf("expected %d, got %d %s", tc.wantStatus, rec.Code, rec.Body)
			}
			var call string
			if len(q.calls) > 0 {
				call = q.calls[0]
			}
			if call != tc.wantCall || len(q.calls) > 1 {
				t.Errorf("queue calls: expected [%s], got %q", tc.wantCall, q.calls)
			}
			if tc.name == "list" {
				want := outbox.Filter{Channel: "wx", Status: outbox.StatusDead, Limit: 10, AfterID: 99}
				if q.f != want {
					t.Errorf("list filter: expected %+v, got %+v", want, q.f)
				}
			}
			if tc.wantStatus != http.StatusOK {
				return
			}
			var v DeliveriesView
			if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
				t.Fatalf("answer is not a DeliveriesView: %v", err)
			}
			if len(v.Deliveries) != 1 || v.Deliveries[0].WebhookID != "evt_1:crm" || v.Deliveries[0].Status != "DEAD" ||
				v.Deliveries[0].LastError != "endpoint answered HTTP 503" || v.Deliveries[0].NextAttemptAt != nil {
				t.Errorf("expected evt_1:crm DEAD with its last error and no next attempt, got %+v", v.Deliveries)
			}
		})
	}
}
