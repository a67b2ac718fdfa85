// Package fakeprovider is a fake of the providers' order query APIs, the other side of
// callbackd's active query path (a user pressing "check payment", or the reconciler asking
// about an order that stayed PENDING):
//
//   - WeChat Pay APIv3 GET /v3/pay/transactions/out-trade-no/{out_trade_no}?mchid=…, with the
//     merchant's WECHATPAY2-SHA256-RSA2048 Authorization verified and the answer signed with
//     WeChat Pay's key in Wechatpay-Serial/-Signature/-Timestamp/-Nonce, as the real API does;
//   - Alipay's gateway (POST /gateway.do, form or query parameters) method alipay.trade.query,
//     with the application's RSA2 request signature verified and the answer
//     {"alipay_trade_query_response":{…},"sign":"…"} signed over the exact bytes of the
//     response object.
//
// It answers from the trades it has been told about (Put, or PUT /paysim/trades): a simulator
// that "pays" orders registers them here, and may then drop (never send) the notification of
// some of them, so that only the query path can find that they were paid.
package fakeprovider

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/keyset"
)

// State is a trade's state at the provider.
type State string

// Trade states. The empty State means StatePaid.
const (
	StatePaid    State = "PAID"
	StateNotPaid State = "NOTPAY"
	StateClosed  State = "CLOSED"
)

// Trade is one order as the provider knows it.
type Trade struct {
	// Provider and MerchantID (WeChat Pay mchid, Alipay app_id) say whose order it is.
	Provider   callbackdv1alpha1.Provider `json:"provider"`
	MerchantID string                     `json:"merchant_id"`
	// OutTradeNo is the merchant's order number.
	OutTradeNo string `json:"out_trade_no"`
	// TransactionID is the provider's transaction id (transaction_id, trade_no).
	TransactionID string `json:"transaction_id"`
	// Amount in minor units (fen) and its currency.
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// State is the trade state; empty means paid.
	State State `json:"state,omitempty"`
	// PaidAt is the payment time of a paid trade.
	PaidAt time.Time `json:"paid_at"`
}

func (t Trade) state() State {
	if t.State == "" {
		return StatePaid
	}
	return t.State
}

type tradeKey struct {
	provider   callbackdv1alpha1.Provider
	merchantID string
	outTradeNo string
}

func keyOf(t Trade) tradeKey { return tradeKey{t.Provider, t.MerchantID, t.OutTradeNo} }

// Options tune a Server.
type Options struct {
	// Now is the clock of signatures and their checks; time.Now when nil.
	Now func() time.Time
	// Logger receives one line per refused request; discarded when nil.
	Logger *slog.Logger
}

// Server is the fake query API. It is safe for concurrent use.
type Server struct {
	now    func() time.Time
	logger *slog.Logger
	mux    *http.ServeMux

	// channels by provider and merchant id; fixed after New.
	channels map[tradeKey]*keyset.Set

	mu      sync.Mutex
	trades  map[tradeKey]Trade
	queries map[tradeKey]int
}

// New returns a server answering for the channels of the given key sets (wechatpay and alipay
// sets; others are ignored: Stripe-style providers are not queried).
func New(sets []*keyset.Set, opts Options) (*Server, error) {
	s := &Server{
		now:      opts.Now,
		logger:   opts.Logger,
		channels: map[tradeKey]*keyset.Set{},
		trades:   map[tradeKey]Trade{},
		queries:  map[tradeKey]int{},
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	for _, set := range sets {
		m := set.Manifest
		switch m.Provider {
		case callbackdv1alpha1.ProviderWeChatPay, callbackdv1alpha1.ProviderAlipay:
		default:
			continue
		}
		k := tradeKey{provider: m.Provider, merchantID: m.Merchant.MerchantID}
		if _, dup := s.channels[k]; dup {
			return nil, fmt.Errorf("fakeprovider: two key sets for %s merchant %s", m.Provider, m.Merchant.MerchantID)
		}
		s.channels[k] = set
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("GET /v3/pay/transactions/out-trade-no/{out_trade_no}", s.wechatQuery)
	s.mux.HandleFunc("/gateway.do", s.alipayGateway)
	s.mux.HandleFunc("PUT /paysim/trades", s.putTrades)
	s.mux.HandleFunc("GET /paysim/queries", s.getQueries)
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Put tells the provider about trades (replacing earlier versions of the same order).
func (s *Server) Put(trades ...Trade) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range trades {
		s.trades[keyOf(t)] = t
	}
}

// Trade returns what the provider knows about an order, without counting a query.
func (s *Server) Trade(provider callbackdv1alpha1.Provider, merchantID, outTradeNo string) (Trade, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.trades[tradeKey{provider, merchantID, outTradeNo}]
	return t, ok
}

// Len returns the number of trades the provider knows.
func (s *Server) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.trades)
}

// Queries returns how many times the order was queried (found or not).
func (s *Server) Queries(provider callbackdv1alpha1.Provider, merchantID, outTradeNo string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[tradeKey{provider, merchantID, outTradeNo}]
}

// lookup counts a query of k and returns the trade, if known.
func (s *Server) lookup(k tradeKey) (Trade, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queries[k]++
	t, ok := s.trades[k]
	return t, ok
}

func (s *Server) channel(p callbackdv1alpha1.Provider, merchantID string) *keyset.Set {
	return s.channels[tradeKey{provider: p, merchantID: merchantID}]
}

// maxAdminBody bounds a PUT /paysim/trades body.
const maxAdminBody = 8 << 20

// putTrades is the simulator's side door: PUT /paysim/trades with a JSON array of trades.
func (s *Server) putTrades(w http.ResponseWriter, r *http.Request) {
	var trades []Trade
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAdminBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&trades); err != nil {
		http.Error(w, "body must be a JSON array of trades: "+err.Error(), http.StatusBadRequest)
		return
	}
	for _, t := range trades {
		if t.Provider == "" || t.MerchantID == "" || t.OutTradeNo == "" {
			http.Error(w, "every trade needs provider, merchant_id and out_trade_no", http.StatusBadRequest)
			return
		}
		switch t.state() {
		case StatePaid, StateNotPaid, StateClosed:
		default:
			http.Error(w, fmt.Sprintf("unknown state %q", t.State), http.StatusBadRequest)
			return
		}
	}
	s.Put(trades...)
	w.WriteHeader(http.StatusNoContent)
}

// getQueries answers the query counts as {"<provider>/<merchant>/<out_trade_no>": n}.
func (s *Server) getQueries(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	out := make(map[string]int, len(s.queries))
	for k, n := range s.queries {
		out[string(k.provider)+"/"+k.merchantID+"/"+k.outTradeNo] = n
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
