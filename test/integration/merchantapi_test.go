package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The merchant API as callbackd serves it: bearer tokens from the mounted file (and a rotation of
// that file without a restart), the front-of-checkout protections, and the order read back.
func TestMerchantAPIThroughCallbackd(t *testing.T) {
	s := newStack(t, sharedPostgres(t), "merchantapi", stackOptions{})
	a := s.start(t, "a")
	p := newPayments(t, "mapi", 1)[0]
	body := func(orderNo string) string {
		return fmt.Sprintf(`{"order_no":%q,"channel":%q,"merchant_id":%q,"amount":%d,"currency":%q}`, orderNo, channelName, merchantID, p.Amount, p.Currency)
	}

	call := func(token, method, path, reqBody string, headers ...string) (int, string, http.Header) {
		t.Helper()
		req, err := http.NewRequestWithContext(context.Background(), method, a.base+path, strings.NewReader(reqBody))
		if err != nil {
			t.Fatalf("build request: %v", err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := s.client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return resp.StatusCode, string(b), resp.Header
	}

	if code, _, _ := call("", http.MethodPost, "/v1/orders", body(p.OrderNo)); code != http.StatusUnauthorized {
		t.Errorf("register without a token: expected 401, got %d", code)
	}
	if code, _, _ := call("mapi_guess", http.MethodGet, "/v1/orders/"+p.OrderNo, ""); code != http.StatusUnauthorized {
		t.Errorf("read with a wrong token: expected 401, got %d", code)
	}

	// Idempotency-Key: the first answer is replayed; another body with the key is refused.
	code, first, _ := call(s.apiToken, http.MethodPost, "/v1/orders", body(p.OrderNo), "Idempotency-Key", "checkout-"+p.OrderNo)
	if code != http.StatusCreated {
		t.Fatalf("register with an Idempotency-Key: expected 201, got %d %s", code, first)
	}
	code, replay, h := call(s.apiToken, http.MethodPost, "/v1/orders", body(p.OrderNo), "Idempotency-Key", "checkout-"+p.OrderNo)
	if code != http.StatusCreated || replay != first || h.Get("Idempotent-Replayed") != "true" {
		t.Errorf("same key and body: expected the first 201 replayed, got %d replayed=%q equal=%v", code, h.Get("Idempotent-Replayed"), replay == first)
	}
	if code, msg, _ := call(s.apiToken, http.MethodPost, "/v1/orders", body(p.OrderNo+"-x"), "Idempotency-Key", "checkout-"+p.OrderNo); code != http.StatusUnprocessableEntity {
		t.Errorf("same key, different body: expected 422, got %d %s", code, msg)
	}

	// Submit tokens: single use.
	code, tokBody, _ := call(s.apiToken, http.MethodPost, "/v1/submit-tokens", "")
	var tok struct {
		SubmitToken string `json:"submit_token"`
	}
	if code != http.StatusCreated || json.Unmarshal([]byte(tokBody), &tok) != nil || tok.SubmitToken == "" {
		t.Fatalf("issue a submit token: expected 201 with submit_token, got %d %s", code, tokBody)
	}
	second := p.OrderNo + "-s"
	if code, msg, _ := call(s.apiToken, http.MethodPost, "/v1/orders", body(second), "Submit-Token", tok.SubmitToken); code != http.StatusCreated {
		t.Errorf("first submit: expected 201, got %d %s", code, msg)
	}
	if code, msg, _ := call(s.apiToken, http.MethodPost, "/v1/orders", body(second), "Submit-Token", tok.SubmitToken); code != http.StatusConflict || !strings.Contains(msg, "already submitted") {
		t.Errorf("second submit: expected 409 already submitted, got %d %s", code, msg)
	}

	// Paid through a callback, then read back.
	if d := s.deliver(context.Background(), a, p, "msg_mapi", 20); !d.succeeded {
		t.Fatalf("payment notification: expected success, got none after %d attempts", d.attempts)
	}
	o := s.getOrder(t, a, p.OrderNo)
	if o.Status != "PAID" || o.ProviderTxnID != p.TxnID || o.PaidAt == nil || len(o.LedgerEntries) != 1 {
		t.Errorf("order after payment: expected PAID by %s with one ledger entry, got %+v", p.TxnID, o)
	}

	// Token rotation: the mounted file is replaced (atomically, as a Secret volume update is);
	// callbackd follows within a few seconds without a restart.
	newToken := "mapi_" + randomHex(t, 16)
	tmp := filepath.Join(s.dir, "api-tokens.new")
	writeFile(t, tmp, newToken+"\n")
	if err := os.Rename(tmp, filepath.Join(s.dir, "api-tokens")); err != nil {
		t.Fatalf("rotate the token file: %v", err)
	}
	var rotatedAfter time.Duration
	start := time.Now()
	for time.Since(start) < 10*time.Second {
		newCode, _, _ := call(newToken, http.MethodGet, "/v1/orders/"+p.OrderNo, "")
		oldCode, _, _ := call(s.apiToken, http.MethodGet, "/v1/orders/"+p.OrderNo, "")
		if newCode == http.StatusOK && oldCode == http.StatusUnauthorized {
			rotatedAfter = time.Since(start)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if rotatedAfter == 0 {
		t.Errorf("token rotation: expected the new token accepted and the old refused within 10s")
	}
	log := a.log(t)
	for _, secret := range []string{s.apiToken, newToken, tok.SubmitToken} {
		if strings.Contains(log, secret) {
			t.Errorf("callbackd log carries a merchant API token or submit token")
		}
	}
	if bytes.Contains([]byte(log), []byte(s.signer.secret)) {
		t.Errorf("callbackd log carries the webhook secret")
	}
	t.Logf("merchant API through callbackd: 401 without/with a wrong token, Idempotency-Key replayed and reuse refused, submit token single-use, order PAID with %d ledger entry, token rotation effective after %v",
		len(o.LedgerEntries), rotatedAfter.Round(time.Millisecond))
}
