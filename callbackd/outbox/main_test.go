package outbox_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/outbox"
	"github.com/seed-1cff2221/callback-platform/callbackd/store"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// pg is the package's one PostgreSQL server; every test gets its own database on it.
var pg *testenv.Postgres

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChildDispatcher())
	}
	var err error
	pg, err = testenv.NewPostgres(
		testenv.WithoutFsync("outbox tests check claiming, scheduling and crash recovery of the dispatcher, not disk durability"),
		testenv.WithSetting("max_connections", "200"),
	)
	if err != nil {
		fmt.Fprintf(os.Stderr, "outbox tests: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := pg.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "outbox tests: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// testDB is a fresh migrated database with the store and a pool on it.
type testDB struct {
	dsn   string
	store *store.Store
}

func newTestDB(t testing.TB) *testDB {
	t.Helper()
	ctx := testContext(t)
	dsn := pg.NewDatabase(t, "")
	if _, err := store.Migrate(ctx, dsn, nil); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	s, err := store.Open(ctx, dsn, store.Options{MaxConns: 24})
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	t.Cleanup(s.Close)
	return &testDB{dsn: dsn, store: s}
}

func (db *testDB) pool() *pgxpool.Pool { return db.store.Pool() }

// newPool opens a second, independent pool on the database (another replica).
func (db *testDB) newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(testContext(t), db.dsn)
	if err != nil {
		t.Fatalf("pgxpool.New: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// payOrder registers an order and applies its payment through the real exactly-once pipeline,
// returning the outbox event id it produced.
func (db *testDB) payOrder(t *testing.T, channel, orderNo string) string {
	t.Helper()
	ctx := testContext(t)
	o := store.NewOrder{OrderNo: orderNo, Channel: channel, MerchantID: "mch-1", Amount: 100, Currency: "CNY"}
	if _, _, err := db.store.CreateOrder(ctx, o); err != nil {
		t.Fatalf("CreateOrder(%s): %v", orderNo, err)
	}
	res, err := db.store.Apply(ctx, notify.Notification{
		Channel: channel, Provider: "wechatpay", MerchantID: "mch-1", OutTradeNo: orderNo,
		Kind: notify.KindPayment, Status: notify.StatusSucceeded, Amount: 100, Currency: "CNY",
		ProviderTxnID: "txn-" + orderNo, NotifyID: "n-" + orderNo,
	})
	if err != nil || res.Outcome != store.Applied || res.EventID == "" {
		t.Fatalf("Apply(payment %s) = %+v, %v; want applied with an event", orderNo, res, err)
	}
	return res.EventID
}

// seedEvents inserts n outbox events of channel directly, as Apply writes them, in one statement
// (the volume tests need many events fast; the pipeline itself is store's to test). It returns
// their event ids.
func (db *testDB) seedEvents(t testing.TB, channel string, n int) []string {
	t.Helper()
	rows, err := db.pool().Query(testContext(t), `
INSERT INTO outbox_events (event_id, channel, order_no, event_type, payload)
SELECT 'evt_seed_' || i, $1, 'order-' || i, 'payment.succeeded',
       jsonb_build_object('event_id', 'evt_seed_' || i, 'type', 'payment.succeeded', 'order_no', 'order-' || i, 'amount', 100)
FROM generate_series(1, $2) AS i
RETURNING event_id`, channel, n)
	if err != nil {
		t.Fatalf("seed events: %v", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatalf("seed events: %v", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("seed events: %v", err)
	}
	return ids
}

// countDeliveries returns how many deliveries have the status.
func (db *testDB) countDeliveries(t testing.TB, status outbox.Status) int {
	t.Helper()
	var n int
	if err := db.pool().QueryRow(testContext(t),
		`SELECT count(*) FROM outbox_deliveries WHERE status = $1`, string(status)).Scan(&n); err != nil {
		t.Fatalf("count deliveries: %v", err)
	}
	return n
}

// newSecret returns a random Standard Webhooks secret, raw and as "whsec_<base64>".
func newSecret(t testing.TB) ([]byte, string) {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatalf("rand: %v", err)
	}
	return key, "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// channel builds a channel's configuration with the given endpoints and retry schedule.
func channel(name string, schedule []time.Duration, endpoints ...callbackdv1alpha1.DeliveryEndpoint) config.Channel {
	ch := config.Channel{Name: name}
	ch.Provider = callbackdv1alpha1.ProviderWeChatPay
	ch.Merchant.MerchantID = "mch-1"
	for _, d := range schedule {
		ch.Delivery.RetrySchedule = append(ch.Delivery.RetrySchedule, metav1.Duration{Duration: d})
	}
	ch.Delivery.Endpoints = endpoints
	ch.Delivery.Timeout = metav1.Duration{Duration: 2 * time.Second}
	return ch
}

// received is one request a sink got.
type received struct {
	webhookID string
	timestamp string
	signature string
	header    http.Header
	body      []byte
	status    int // what the sink answered
}

// sink is a real HTTP endpoint on loopback that records what it receives. respond decides the
// answer to the n-th request (1-based) carrying a webhook-id.
type sink struct {
	srv     *httptest.Server
	respond func(webhookID string, n int) int
	// around, when set, runs when a request arrives; the function it returns runs before the
	// answer is written.
	around func(r *http.Request) func()

	mu       sync.Mutex
	requests []received
	perID    map[string]int
}

func newSink(t testing.TB, respond func(webhookID string, n int) int) *sink {
	t.Helper()
	return newSinkWith(t, respond, nil)
}

func newSinkWith(t testing.TB, respond func(webhookID string, n int) int, around func(*http.Request) func()) *sink {
	t.Helper()
	s := &sink{respond: respond, around: around, perID: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.around != nil {
			defer s.around(r)()
		}
		body, _ := io.ReadAll(r.Body)
		id := r.Header.Get("webhook-id")
		s.mu.Lock()
		s.perID[id]++
		status := s.respond(id, s.perID[id])
		s.requests = append(s.requests, received{webhookID: id, timestamp: r.Header.Get("webhook-timestamp"),
			signature: r.Header.Get("webhook-signature"), header: r.Header.Clone(), body: body, status: status})
		s.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sink) got() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.requests...)
}

func (s *sink) setRespond(f func(webhookID string, n int) int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.respond = f
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func contextWithCancel(t testing.TB) (context.Context, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(testContext(t))
	t.Cleanup(cancel)
	return ctx, cancel
}

func always(status int) func(string, int) int { return func(string, int) int { return status } }

func unixString(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }
