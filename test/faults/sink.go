package faults

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// Sink is the merchant's system: an HTTP server on loopback that records every event callbackd
// delivers (webhook-id, event id, order, type) and answers 200.
type Sink struct {
	// URL is the endpoint's address.
	URL string

	mu     sync.Mutex
	events []SinkEvent
	srv    *httptest.Server
}

// NewSink starts a sink for t.
func NewSink(t testing.TB) *Sink {
	t.Helper()
	s := &Sink{}
	s.srv = httptest.NewServer(http.HandlerFunc(s.handle))
	s.URL = s.srv.URL
	t.Cleanup(s.srv.Close)
	return s
}

func (s *Sink) handle(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	var p struct {
		EventID string `json:"event_id"`
		Type    string `json:"type"`
		OrderNo string `json:"order_no"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		http.Error(w, "decode", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.events = append(s.events, SinkEvent{WebhookID: r.Header.Get("webhook-id"), EventID: p.EventID,
		OrderNo: p.OrderNo, Type: p.Type, At: time.Now()})
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// Events returns a copy of what the sink received.
func (s *Sink) Events() []SinkEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]SinkEvent(nil), s.events...)
}

// Distinct is the number of distinct event ids received.
func (s *Sink) Distinct() int {
	seen := map[string]bool{}
	for _, e := range s.Events() {
		seen[e.EventID] = true
	}
	return len(seen)
}
