package merchantapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/seed-1cff2221/callback-platform/callbackd/store"
)

// OrderView is the JSON form of an order in the merchant API's answers.
type OrderView struct {
	OrderNo        string      `json:"order_no"`
	Channel        string      `json:"channel"`
	MerchantID     string      `json:"merchant_id"`
	SubMerchantID  string      `json:"sub_merchant_id,omitempty"`
	Amount         int64       `json:"amount"`
	Currency       string      `json:"currency"`
	Status         string      `json:"status"`
	RefundedAmount int64       `json:"refunded_amount"`
	ProviderTxnID  string      `json:"provider_txn_id,omitempty"`
	PaidAt         *time.Time  `json:"paid_at,omitempty"`
	ExpiresAt      *time.Time  `json:"expires_at,omitempty"`
	CreatedAt      time.Time   `json:"created_at"`
	UpdatedAt      time.Time   `json:"updated_at"`
	LedgerEntries  []EntryView `json:"ledger_entries"`
}

// EntryView is the JSON form of one ledger entry.
type EntryView struct {
	Type          string    `json:"type"`
	RefundNo      string    `json:"refund_no,omitempty"`
	Amount        int64     `json:"amount"`
	Currency      string    `json:"currency"`
	ProviderTxnID string    `json:"provider_txn_id,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
}

type submitTokenView struct {
	SubmitToken string `json:"submit_token"`
}

// errorView is every error answer: {"error": "..."}.
type errorView struct {
	Error string `json:"error"`
}

func (in orderInput) toStore() store.NewOrder {
	return store.NewOrder{
		OrderNo:       in.OrderNo,
		Channel:       in.Channel,
		MerchantID:    in.MerchantID,
		SubMerchantID: in.SubMerchantID,
		Amount:        in.Amount,
		Currency:      in.Currency,
		ExpiresAt:     in.ExpiresAt,
	}
}

func orderView(o store.Order, ledger []store.LedgerEntry) OrderView {
	v := OrderView{
		OrderNo:        o.OrderNo,
		Channel:        o.Channel,
		MerchantID:     o.MerchantID,
		SubMerchantID:  o.SubMerchantID,
		Amount:         o.Amount,
		Currency:       o.Currency,
		Status:         string(o.Status),
		RefundedAmount: o.RefundedAmount,
		ProviderTxnID:  o.ProviderTxnID,
		PaidAt:         utcPtr(o.PaidAt),
		ExpiresAt:      utcPtr(o.ExpiresAt),
		CreatedAt:      o.CreatedAt.UTC(),
		UpdatedAt:      o.UpdatedAt.UTC(),
		LedgerEntries:  make([]EntryView, 0, len(ledger)),
	}
	for _, e := range ledger {
		v.LedgerEntries = append(v.LedgerEntries, EntryView{
			Type:          e.Type,
			RefundNo:      e.RefundNo,
			Amount:        e.Amount,
			Currency:      e.Currency,
			ProviderTxnID: e.ProviderTxnID,
			CreatedAt:     e.CreatedAt.UTC(),
		})
	}
	return v
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own view types reach here; they always marshal.
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal error"}`)
	}
	writeRaw(w, status, append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorView{Error: msg})
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// responseRecorder captures an answer so it can be stored for an Idempotency-Key before it is
// sent.
type responseRecorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newResponseRecorder() *responseRecorder {
	return &responseRecorder{header: http.Header{}, status: http.StatusOK}
}

func (r *responseRecorder) Header() http.Header { return r.header }

func (r *responseRecorder) WriteHeader(status int) { r.status = status }

func (r *responseRecorder) Write(b []byte) (int, error) { return r.body.Write(b) }

func (r *responseRecorder) copyTo(w http.ResponseWriter) {
	for k, v := range r.header {
		w.Header()[k] = v
	}
	w.WriteHeader(r.status)
	_, _ = w.Write(r.body.Bytes())
}
