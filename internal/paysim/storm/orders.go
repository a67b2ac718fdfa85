package storm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"strings"
	"sync"
	"time"
)

// Merchant registers orders through callbackd's merchant API (POST /v1/orders), as the
// merchant's checkout does before the user pays: a notification for an order callbackd does not
// know is not a payment it may book.
type Merchant struct {
	// BaseURL is callbackd's merchant API base, e.g. http://127.0.0.1:8080 (loopback only).
	BaseURL string
	// Token is the bearer token (one line of callbackd's apiTokensFile). Never logged.
	Token string
	// Client sends the requests; NewClient(16, DefaultTimeout) when nil.
	Client *http.Client
}

// OrderSpec names the channel and merchant identity the orders belong to.
type OrderSpec struct {
	Channel       string
	MerchantID    string
	SubMerchantID string
}

// Register registers every trade's order at concurrency workers. An order that already exists
// with the same content counts as registered (the API answers 200 for an identical repeat).
func (m *Merchant) Register(ctx context.Context, spec OrderSpec, trades []Trade, workers int) error {
	if _, err := CheckTarget(m.BaseURL); err != nil {
		return err
	}
	client := m.Client
	if client == nil {
		client = NewClient(16, DefaultTimeout)
	}
	var mu sync.Mutex
	var failed []string
	forEach(ctx, len(trades), max(workers, 1), func(i int) {
		if err := m.register(ctx, client, spec, trades[i]); err != nil {
			mu.Lock()
			failed = append(failed, err.Error())
			mu.Unlock()
		}
	})
	if len(failed) > 0 {
		return fmt.Errorf("storm: register orders: %d of %d failed, first: %s", len(failed), len(trades), failed[0])
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("storm: register orders: %w", err)
	}
	return nil
}

// orderRequest is the body of POST /v1/orders.
type orderRequest struct {
	OrderNo       string `json:"order_no"`
	Channel       string `json:"channel"`
	MerchantID    string `json:"merchant_id"`
	SubMerchantID string `json:"sub_merchant_id,omitempty"`
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
}

func (m *Merchant) register(ctx context.Context, client *http.Client, spec OrderSpec, t Trade) error {
	body, err := json.Marshal(orderRequest{
		OrderNo: t.OrderNo, Channel: spec.Channel, MerchantID: spec.MerchantID, SubMerchantID: spec.SubMerchantID,
		Amount: t.Amount, Currency: t.Currency,
	})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(m.BaseURL, "/")+"/v1/orders", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+m.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("order %s: %w", t.OrderNo, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("order %s: %d %s", t.OrderNo, resp.StatusCode, strings.TrimSpace(string(answer)))
	}
	return nil
}

// SyncResult is the part of the merchant API's sync answer a simulator needs.
type SyncResult struct {
	// Status is the order's status after the sync (PENDING, PAID, CLOSED, …).
	Status string
	// Queried tells whether callbackd asked the provider; ProviderState is what it said.
	Queried       bool
	ProviderState string
	// Action is what the sync applied: none, paid or closed.
	Action string
}

// Sync presses the merchant's "check payment" button for one order: POST
// /v1/orders/{order_no}/sync, which makes callbackd ask the provider and apply what it says
// through the same exactly-once pipeline as a callback. A 503 (provider or database busy, or a
// callback for the order being applied) is retried a few times after its Retry-After.
func (m *Merchant) Sync(ctx context.Context, orderNo string) (SyncResult, error) {
	if _, err := CheckTarget(m.BaseURL); err != nil {
		return SyncResult{}, err
	}
	client := m.Client
	if client == nil {
		client = NewClient(16, DefaultTimeout)
	}
	url := strings.TrimRight(m.BaseURL, "/") + "/v1/orders/" + neturl.PathEscape(orderNo) + "/sync"
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
		if err != nil {
			return SyncResult{}, fmt.Errorf("storm: sync order %s: %w", orderNo, err)
		}
		req.Header.Set("Authorization", "Bearer "+m.Token)
		resp, err := client.Do(req)
		if err != nil {
			return SyncResult{}, fmt.Errorf("storm: sync order %s: %w", orderNo, err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if err != nil {
			return SyncResult{}, fmt.Errorf("storm: sync order %s: %w", orderNo, err)
		}
		if resp.StatusCode == http.StatusServiceUnavailable && attempt < 5 {
			select {
			case <-ctx.Done():
				return SyncResult{}, fmt.Errorf("storm: sync order %s: %w", orderNo, ctx.Err())
			case <-time.After(time.Second):
				continue
			}
		}
		if resp.StatusCode != http.StatusOK {
			return SyncResult{}, fmt.Errorf("storm: sync order %s: %d %s", orderNo, resp.StatusCode, strings.TrimSpace(string(body)))
		}
		var view struct {
			Order struct {
				Status string `json:"status"`
			} `json:"order"`
			Queried       bool   `json:"queried"`
			ProviderState string `json:"provider_state"`
			Action        string `json:"action"`
		}
		if err := json.Unmarshal(body, &view); err != nil {
			return SyncResult{}, fmt.Errorf("storm: sync order %s: decode the answer: %w", orderNo, err)
		}
		return SyncResult{Status: view.Order.Status, Queried: view.Queried, ProviderState: view.ProviderState, Action: view.Action}, nil
	}
}
