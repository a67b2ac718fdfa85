package merchantapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/store"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// The handler tests run against a real PostgreSQL: one server for the package, a fresh migrated
// database per test.
var pg *testenv.Postgres

func TestMain(m *testing.M) {
	var err error
	pg, err = testenv.NewPostgres()
	if err != nil {
		fmt.Fprintf(os.Stderr, "merchantapi: start PostgreSQL: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := pg.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "merchantapi: stop PostgreSQL: %v\n", err)
		code = 1
	}
	os.Exit(code)
}

const testToken = "mapi_test_7f3a9c"

// fixture is a handler over a fresh database.
type fixture struct {
	t       *testing.T
	store   *store.Store
	handler http.Handler
	logs    *lockedBuffer
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	dsn := pg.NewDatabase(t, "")
	if _, err := store.Migrate(ctx, dsn, nil); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	st, err := store.Open(ctx, dsn, store.Options{MaxConns: 8})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(st.Close)
	logs := &lockedBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f := &fixture{t: t, store: st, logs: logs}
	f.handler = newHandler(st, NewStaticTokens(testToken), logger)
	t.Cleanup(func() {
		if strings.Contains(logs.String(), testToken) {
			t.Errorf("logs: expected no bearer token, found it")
		}
	})
	return f
}

// response is a decoded answer.
type response struct {
	code   int
	header http.Header
	body   []byte
}

func (r response) errorMessage() string {
	var e errorView
	_ = json.Unmarshal(r.body, &e)
	return e.Error
}

func (r response) order(t *testing.T) OrderView {
	t.Helper()
	var o OrderView
	if err := json.Unmarshal(r.body, &o); err != nil {
		t.Fatalf("decode order answer %s: %v", r.body, err)
	}
	return o
}

// do serves one request with the test token unless headers say otherwise.
func (f *fixture) do(method, path, body string, headers ...string) response {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "<unset>" {
			req.Header.Del(headers[i])
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	f.handler.ServeHTTP(rec, req)
	return response{code: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

func orderBody(orderNo string, amount int64) string {
	return fmt.Sprintf(`{"order_no":%q,"channel":"wx","merchant_id":"1900000109","amount":%d,"currency":"CNY"}`, orderNo, amount)
}

func expectStatus(t *testing.T, what string, got response, want int) {
	t.Helper()
	if got.code != want {
		t.Fatalf("%s: expected HTTP %d, got %d %s", what, want, got.code, got.body)
	}
	if ct := got.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s: expected a JSON answer, got Content-Type %q", what, ct)
	}
}

func TestEveryRouteNeedsAValidBearerToken(t *testing.T) {
	f := newFixture(t)
	routes := []struct{ method, path string }{
		{http.MethodPost, "/v1/orders"},
		{http.MethodGet, "/v1/orders/ord-1"},
		{http.MethodPost, "/v1/submit-tokens"},
		{http.MethodGet, "/v1/nothing-here"},
	}
	auths := map[string]string{
		"missing":      "<unset>",
		"wrong token":  "Bearer mapi_wrong",
		"empty bearer": "Bearer ",
		"basic scheme": "Basic " + testToken,
		"token alone":  testToken,
	}
	for _, r := range routes {
		for name, auth := range auths {
			got := f.do(r.method, r.path, orderBody("ord-1", 100), "Authorization", auth)
			if got.code != http.StatusUnauthorized {
				t.Errorf("%s %s with %s authorization: expected 401, got %d %s", r.method, r.path, name, got.code, got.body)
				continue
			}
			if got.header.Get("WWW-Authenticate") == "" || got.errorMessage() == "" {
				t.Errorf("%s %s with %s authorization: expected WWW-Authenticate and a JSON error, got %v %s", r.method, r.path, name, got.header, got.body)
			}
		}
	}
	if got := f.do(http.MethodGet, "/v1/orders/ord-1", ""); got.code != http.StatusNotFound {
		t.Errorf("no order was created by refused requests: expected 404, got %d %s", got.code, got.body)
	}
	if got := f.do(http.MethodGet, "/v1/orders/ord-1", "", "Authorization", "bearer "+testToken); got.code != http.StatusNotFound {
		t.Errorf("lower-case bearer scheme: expected it accepted (404 for the missing order), got %d", got.code)
	}
}

func TestCreateOrderIsIdempotentPerOrderNumber(t *testing.T) {
	f := newFixture(t)
	first := f.do(http.MethodPost, "/v1/orders", orderBody("ord-1", 1999))
	expectStatus(t, "first registration", first, http.StatusCreated)
	o := first.order(t)
	if o.OrderNo != "ord-1" || o.Amount != 1999 || o.Currency != "CNY" || o.Status != "PENDING" || o.MerchantID != "1900000109" || o.Channel != "wx" {
		t.Errorf("first registration: expected ord-1 PENDING 1999 CNY for 1900000109 on wx, got %+v", o)
	}
	if loc := first.header.Get("Location"); loc != "/v1/orders/ord-1" {
		t.Errorf("Location: expected /v1/orders/ord-1, got %q", loc)
	}

	again := f.do(http.MethodPost, "/v1/orders", orderBody("ord-1", 1999))
	expectStatus(t, "same registration again", again, http.StatusOK)
	if got := again.order(t); got.CreatedAt != o.CreatedAt {
		t.Errorf("same registration again: expected the same order (created %v), got created %v", o.CreatedAt, got.CreatedAt)
	}

	conflict := f.do(http.MethodPost, "/v1/orders", orderBody("ord-1", 2999))
	expectStatus(t, "different registration for the same order number", conflict, http.StatusConflict)
	if !strings.Contains(conflict.errorMessage(), "different request") {
		t.Errorf("conflict message: expected it to say the request differs, got %q", conflict.errorMessage())
	}

	got := f.do(http.MethodGet, "/v1/orders/ord-1", "")
	expectStatus(t, "GET the order", got, http.StatusOK)
	if v := got.order(t); v.Amount != 1999 || v.Status != "PENDING" || v.LedgerEntries == nil || len(v.LedgerEntries) != 0 {
		t.Errorf("GET the order: expected 1999 PENDING with an empty ledger, got %+v", v)
	}
	if !strings.Contains(string(got.body), `"ledger_entries":[]`) {
		t.Errorf("GET the order: expected an empty ledger_entries array, got %s", got.body)
	}
}

func TestCreateOrderRefusesInvalidInputWithAClearMessage(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		name, body, want string
	}{
		{"float amount", `{"order_no":"o-1","channel":"wx","merchant_id":"m","amount":19.99,"currency":"CNY"}`, "not a decimal"},
		{"string amount", `{"order_no":"o-1","channel":"wx","merchant_id":"m","amount":"1999","currency":"CNY"}`, "not a string"},
		{"negative amount", `{"order_no":"o-1","channel":"wx","merchant_id":"m","amount":-1,"currency":"CNY"}`, "positive"},
		{"zero amount", `{"order_no":"o-1","channel":"wx","merchant_id":"m","amount":0,"currency":"CNY"}`, "positive"},
		{"lower-case currency", `{"order_no":"o-1","channel":"wx","merchant_id":"m","amount":1,"currency":"cny"}`, "ISO 4217"},
		{"unknown field", `{"order_no":"o-1","channel":"wx","merchant_id":"m","amount":1,"currency":"CNY","coupon":"x"}`, `unknown field "coupon"`},
		{"malformed JSON", `{"order_no":"o-1",`, "JSON"},
		{"missing merchant", `{"order_no":"o-1","channel":"wx","amount":1,"currency":"CNY"}`, "merchant_id is required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := f.do(http.MethodPost, "/v1/orders", tc.body)
			expectStatus(t, tc.name, got, http.StatusBadRequest)
			if !strings.Contains(got.errorMessage(), tc.want) {
				t.Errorf("message: expected it to contain %q, got %q", tc.want, got.errorMessage())
			}
		})
	}
	if got := f.do(http.MethodGet, "/v1/orders/o-1", ""); got.code != http.StatusNotFound {
		t.Errorf("after refused registrations: expected no order o-1 (404), got %d", got.code)
	}

	huge := `{"order_no":"o-2","channel":"wx","merchant_id":"m","amount":1,"currency":"CNY","x":"` + strings.Repeat("a", MaxBodyBytes) + `"}`
	expectStatus(t, "oversized body", f.do(http.MethodPost, "/v1/orders", huge), http.StatusRequestEntityTooLarge)
}

func TestWithChannelsRefusesOrdersForUnservedChannels(t *testing.T) {
	f := newFixture(t)
	f.handler = newHandler(f.store, NewStaticTokens(testToken), nil, WithChannels("wx", "alipay"))
	expectStatus(t, "served channel", f.do(http.MethodPost, "/v1/orders", orderBody("ord-ch1", 100)), http.StatusCreated)
	unserved := f.do(http.MethodPost, "/v1/orders", strings.Replace(orderBody("ord-ch2", 100), `"wx"`, `"wxx"`, 1))
	expectStatus(t, "unserved channel", unserved, http.StatusBadRequest)
	if !strings.Contains(unserved.errorMessage(), `"wxx" is not served`) {
		t.Errorf("unserved channel: expected a message naming the channel, got %q", unserved.errorMessage())
	}
}

func TestRoutingAnswersInJSON(t *testing.T) {
	f := newFixture(t)
	got := f.do(http.MethodDelete, "/v1/orders", "")
	expectStatus(t, "DELETE /v1/orders", got, http.StatusMethodNotAllowed)
	if got.header.Get("Allow") != http.MethodPost {
		t.Errorf("Allow: expected POST, got %q", got.header.Get("Allow"))
	}
	expectStatus(t, "PUT /v1/orders/x", f.do(http.MethodPut, "/v1/orders/x", ""), http.StatusMethodNotAllowed)
	expectStatus(t, "unknown route", f.do(http.MethodGet, "/v1/refunds", ""), http.StatusNotFound)
	expectStatus(t, "unknown order", f.do(http.MethodGet, "/v1/orders/nope", ""), http.StatusNotFound)
	expectStatus(t, "invalid order number", f.do(http.MethodGet, "/v1/orders/a%20b", ""), http.StatusNotFound)
}

func TestIdempotencyKeyReplaysTheFirstAnswer(t *testing.T) {
	f := newFixture(t)
	first := f.do(http.MethodPost, "/v1/orders", orderBody("ord-k", 500), HeaderIdempotencyKey, "checkout-1")
	expectStatus(t, "first request", first, http.StatusCreated)
	if first.header.Get(HeaderReplayed) != "" {
		t.Errorf("first request: expected no %s header, got %q", HeaderReplayed, first.header.Get(HeaderReplayed))
	}

	replay := f.do(http.MethodPost, "/v1/orders", orderBody("ord-k", 500), HeaderIdempotencyKey, "checkout-1")
	expectStatus(t, "same key and body", replay, http.StatusCreated)
	if !bytes.Equal(replay.body, first.body) || replay.header.Get(HeaderReplayed) != "true" {
		t.Errorf("same key and body: expected the first answer replayed byte for byte with %s: true, got %s %q", HeaderReplayed, replay.body, replay.header.Get(HeaderReplayed))
	}

	reused := f.do(http.MethodPost, "/v1/orders", orderBody("ord-k2", 500), HeaderIdempotencyKey, "checkout-1")
	expectStatus(t, "same key, different body", reused, http.StatusUnprocessableEntity)
	if !strings.Contains(reused.errorMessage(), "different request body") {
		t.Errorf("same key, different body: expected a message about the different body, got %q", reused.errorMessage())
	}
	if got := f.do(http.MethodGet, "/v1/orders/ord-k2", ""); got.code != http.StatusNotFound {
		t.Errorf("same key, different body: expected ord-k2 not created, got %d", got.code)
	}

	// A refusal is an answer too: it is replayed, not re-evaluated.
	bad := `{"order_no":"ord-bad","channel":"wx","merchant_id":"m","amount":1.5,"currency":"CNY"}`
	expectStatus(t, "invalid body with a key", f.do(http.MethodPost, "/v1/orders", bad, HeaderIdempotencyKey, "checkout-2"), http.StatusBadRequest)
	if got := f.do(http.MethodPost, "/v1/orders", bad, HeaderIdempotencyKey, "checkout-2"); got.code != http.StatusBadRequest || got.header.Get(HeaderReplayed) != "true" {
		t.Errorf("invalid body again with the key: expected the 400 replayed, got %d replayed=%q", got.code, got.header.Get(HeaderReplayed))
	}

	expectStatus(t, "empty key", f.do(http.MethodPost, "/v1/orders", orderBody("ord-e", 1), HeaderIdempotencyKey, ""), http.StatusBadRequest)
	expectStatus(t, "overlong key", f.do(http.MethodPost, "/v1/orders", orderBody("ord-e", 1), HeaderIdempotencyKey, strings.Repeat("k", 256)), http.StatusBadRequest)
}

// Concurrent requests with one key run the registration once; the others get the first answer
// replayed or a 409 "in progress", never a second execution.
func TestIdempotencyKeyUnderConcurrency(t *testing.T) {
	f := newFixture(t)
	const n = 12
	var created, replayed, inProgress, other atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := f.do(http.MethodPost, "/v1/orders", orderBody("ord-c", 700), HeaderIdempotencyKey, "same-click")
			switch {
			case got.code == http.StatusCreated && got.header.Get(HeaderReplayed) == "":
				created.Add(1)
			case got.code == http.StatusCreated:
				replayed.Add(1)
			case got.code == http.StatusConflict:
				inProgress.Add(1)
			default:
				other.Add(1)
				t.Errorf("concurrent request: unexpected answer %d %s", got.code, got.body)
			}
		}()
	}
	wg.Wait()
	if created.Load() != 1 {
		t.Errorf("executions: expected exactly 1 non-replayed 201, got %d (replayed %d, in progress %d, other %d)", created.Load(), replayed.Load(), inProgress.Load(), other.Load())
	}
	t.Logf("%d concurrent requests with one key: created=%d replayed=%d in-progress=%d", n, created.Load(), replayed.Load(), inProgress.Load())
}

// failingStore makes CreateOrder fail once, as a lost database connection would.
type failingStore struct {
	*store.Store
	failures atomic.Int32
}

func (s *failingStore) CreateOrder(ctx context.Context, o store.NewOrder) (store.Order, bool, error) {
	if s.failures.Add(-1) >= 0 {
		return store.Order{}, false, errors.New("store: create order: begin: connection refused")
	}
	return s.Store.CreateOrder(ctx, o)
}

// A transient failure answers 503 and is not remembered for the key: the retry runs again.
func TestIdempotencyKeyIsReleasedAfterATransientFailure(t *testing.T) {
	f := newFixture(t)
	fs := &failingStore{Store: f.store}
	fs.failures.Store(1)
	f.handler = newHandler(fs, NewStaticTokens(testToken), nil)

	failed := f.do(http.MethodPost, "/v1/orders", orderBody("ord-r", 300), HeaderIdempotencyKey, "retry-me")
	expectStatus(t, "request during the outage", failed, http.StatusServiceUnavailable)
	if failed.header.Get("Retry-After") == "" || strings.Contains(failed.errorMessage(), "connection refused") {
		t.Errorf("outage answer: expected Retry-After and no internal detail, got %v %q", failed.header, failed.errorMessage())
	}
	retried := f.do(http.MethodPost, "/v1/orders", orderBody("ord-r", 300), HeaderIdempotencyKey, "retry-me")
	expectStatus(t, "retry with the same key", retried, http.StatusCreated)
	if retried.header.Get(HeaderReplayed) != "" {
		t.Errorf("retry with the same key: expected a fresh execution, got a replay")
	}
}

func TestSubmitTokensAreSingleUse(t *testing.T) {
	f := newFixture(t)
	issue := func() string {
		got := f.do(http.MethodPost, "/v1/submit-tokens", "")
		expectStatus(t, "issue a submit token", got, http.StatusCreated)
		var v submitTokenView
		if err := json.Unmarshal(got.body, &v); err != nil || v.SubmitToken == "" {
			t.Fatalf("issue a submit token: expected {\"submit_token\": ...}, got %s", got.body)
		}
		return v.SubmitToken
	}

	token := issue()
	expectStatus(t, "first submit", f.do(http.MethodPost, "/v1/orders", orderBody("ord-s1", 100), HeaderSubmitToken, token), http.StatusCreated)
	second := f.do(http.MethodPost, "/v1/orders", orderBody("ord-s1", 100), HeaderSubmitToken, token)
	expectStatus(t, "second submit, same order", second, http.StatusConflict)
	if !strings.Contains(second.errorMessage(), "already submitted") {
		t.Errorf("second submit: expected \"already submitted\", got %q", second.errorMessage())
	}
	expectStatus(t, "second submit, another order", f.do(http.MethodPost, "/v1/orders", orderBody("ord-s2", 100), HeaderSubmitToken, token), http.StatusConflict)
	if got := f.do(http.MethodGet, "/v1/orders/ord-s2", ""); got.code != http.StatusNotFound {
		t.Errorf("second submit, another order: expected ord-s2 not created, got %d", got.code)
	}
	expectStatus(t, "unknown token", f.do(http.MethodPost, "/v1/orders", orderBody("ord-s3", 100), HeaderSubmitToken, "st_forged"), http.StatusBadRequest)
	expectStatus(t, "body on token issue", f.do(http.MethodPost, "/v1/submit-tokens", `{"n":2}`), http.StatusBadRequest)
	expectStatus(t, "empty object on token issue", f.do(http.MethodPost, "/v1/submit-tokens", `{}`), http.StatusCreated)

	// A user pressing "submit" many times at once: exactly one order.
	token = issue()
	const clicks = 10
	var created, refused atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < clicks; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := f.do(http.MethodPost, "/v1/orders", orderBody(fmt.Sprintf("ord-click-%d", i), 100), HeaderSubmitToken, token)
			switch got.code {
			case http.StatusCreated:
				created.Add(1)
			case http.StatusConflict:
				refused.Add(1)
			default:
				t.Errorf("concurrent submit: unexpected %d %s", got.code, got.body)
			}
		}()
	}
	wg.Wait()
	if created.Load() != 1 || refused.Load() != clicks-1 {
		t.Errorf("%d concurrent submits with one token: expected 1 created and %d already submitted, got %d and %d", clicks, clicks-1, created.Load(), refused.Load())
	}
	c, err := f.store.Counts(context.Background())
	if err != nil {
		t.Fatalf("counts: %v", err)
	}
	if c.Orders != 2 {
		t.Errorf("orders after all submits: expected 2 (ord-s1 and one click), got %d", c.Orders)
	}
}

func TestGetOrderShowsPaymentAndLedger(t *testing.T) {
	f := newFixture(t)
	expectStatus(t, "register", f.do(http.MethodPost, "/v1/orders", orderBody("ord-p", 1999)), http.StatusCreated)
	paidAt := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	res, err := f.store.Apply(context.Background(), notify.Notification{
		Channel: "wx", Provider: "standardwebhooks", MerchantID: "1900000109", OutTradeNo: "ord-p",
		Kind: notify.KindPayment, Status: notify.StatusSucceeded, Amount: 1999, Currency: "CNY",
		ProviderTxnID: "txn_42", NotifyID: "msg_1", OccurredAt: paidAt, BodyDigest: notify.Digest([]byte("{}")),
	})
	if err != nil || res.Outcome != store.Applied {
		t.Fatalf("apply the payment: expected applied, got %+v, %v", res, err)
	}
	got := f.do(http.MethodGet, "/v1/orders/ord-p", "")
	expectStatus(t, "GET the paid order", got, http.StatusOK)
	o := got.order(t)
	if o.Status != "PAID" || o.ProviderTxnID != "txn_42" || o.PaidAt == nil || o.RefundedAmount != 0 {
		t.Errorf("paid order: expected PAID with txn_42, a paid time and nothing refunded, got %+v", o)
	}
	if len(o.LedgerEntries) != 1 || o.LedgerEntries[0].Type != "payment" || o.LedgerEntries[0].Amount != 1999 || o.LedgerEntries[0].Currency != "CNY" {
		t.Errorf("ledger: expected one payment entry of 1999 CNY, got %+v", o.LedgerEntries)
	}
}

// lockedBuffer is a bytes.Buffer safe for a concurrent logger.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
