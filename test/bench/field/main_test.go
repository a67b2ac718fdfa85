package field_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/internal/paysim"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/keyset"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
	"github.com/seed-1cff2221/callback-platform/test/bench/field"
)

// The package's servers and keys, shared by every test: one PostgreSQL (fsync and synchronous
// commit on, as in the benchmark; each test gets its own database) and one plain Redis (each test
// uses its own transaction ids, so lock keys never collide).
var (
	pg     *testenv.Postgres
	rg     *testenv.RedisGroup
	keys   *keyset.Set
	verify field.VerifyFunc
)

// Merchant identity of the simulated WeChat Pay channel.
const (
	channel = "wx-field"
	mchID   = "1900000109"
	appID   = "wxd678efh567hg6787"
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var err error
	pg, err = testenv.NewPostgres(testenv.WithSetting("max_connections", "200"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "field tests: %v\n", err)
		return 1
	}
	defer closeOrReport("postgres", pg.Close)
	rg, err = testenv.NewRedis(testenv.RedisOptions{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "field tests: %v\n", err)
		return 1
	}
	defer closeOrReport("redis", rg.Close)
	dir, err := os.MkdirTemp("", "field-keys-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "field tests: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	keys, err = keyset.Generate(dir, keyset.Spec{
		Channel:  channel,
		Provider: callbackdv1alpha1.ProviderWeChatPay,
		Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: mchID, AppID: appID},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "field tests: %v\n", err)
		return 1
	}
	if verify, err = field.WeChatVerifier(ctx, keys); err != nil {
		fmt.Fprintf(os.Stderr, "field tests: %v\n", err)
		return 1
	}
	return m.Run()
}

func closeOrReport(what string, closeFn func() error) {
	if err := closeFn(); err != nil {
		fmt.Fprintf(os.Stderr, "field tests: close %s: %v\n", what, err)
	}
}

func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// env is one test's view: its own database, the shared Redis, the designs set up on them, and a
// loopback HTTP server per design.
type env struct {
	pool    *pgxpool.Pool
	rdb     redis.UniversalClient
	designs map[string]field.Design
	urls    map[string]string
	client  *http.Client
	prefix  string // unique per test: order numbers and transaction ids start with it
}

func newEnv(t testing.TB) *env {
	t.Helper()
	ctx := testContext(t)
	cfg, err := pgxpool.ParseConfig(pg.NewDatabase(t, ""))
	if err != nil {
		t.Fatalf("parse DSN: %v", err)
	}
	cfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	rdb := redis.NewClient(&redis.Options{Addr: rg.MasterAddr(), PoolSize: 64})
	t.Cleanup(func() { _ = rdb.Close() })
	e := &env{
		pool:    pool,
		rdb:     rdb,
		designs: map[string]field.Design{},
		urls:    map[string]string{},
		client: &http.Client{
			Timeout:   30 * time.Second,
			Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 128},
		},
		prefix: randomID(t),
	}
	t.Cleanup(e.client.CloseIdleConnections)
	for _, d := range field.Designs(pool, rdb, verify) {
		if err := d.Setup(ctx); err != nil {
			t.Fatalf("%s: Setup: %v", d.Name, err)
		}
		srv := httptest.NewServer(d.Handler)
		t.Cleanup(srv.Close)
		e.designs[d.Name] = d
		e.urls[d.Name] = srv.URL + "/notify/" + channel
	}
	return e
}

// randomID is a short random hex string.
func randomID(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("random id: %v", err)
	}
	return hex.EncodeToString(b)
}

// signer signs payment notifications as WeChat Pay does, with the package's key set.
func signer() *paysim.WeChatPay {
	return &paysim.WeChatPay{APIv3Key: keys.APIv3Key, Serial: keys.Manifest.WeChatSerial, Key: keys.PlatformKey}
}

// paid is a TRANSACTION.SUCCESS plaintext for orderNo.
func paid(orderNo, txnID string, amount int64) paysim.WeChatTransaction {
	return paysim.WeChatTransaction{
		MchID: mchID, AppID: appID, OutTradeNo: orderNo, TransactionID: txnID,
		TradeType: "JSAPI", TradeState: "SUCCESS", TradeStateDesc: "支付成功", BankType: "OTHERS",
		SuccessTime: paysim.WeChatTime(time.Now()), Payer: paysim.WeChatPayer{OpenID: "oUpF8uMuAJO_M2pxb1Q9zNjWeS6o"},
		Amount: paysim.WeChatAmount{Total: amount, PayerTotal: amount, Currency: "CNY", PayerCurrency: "CNY"},
	}
}

// payment signs one payment notification.
func payment(t testing.TB, orderNo, txnID string, amount int64) paysim.Notification {
	t.Helper()
	n, err := signer().Payment(paid(orderNo, txnID, amount), paysim.WeChatOptions{})
	if err != nil {
		t.Fatalf("sign payment notification: %v", err)
	}
	return n
}

// post sends n to url and returns the status code.
func (e *env) post(ctx context.Context, url string, n paysim.Notification) (int, error) {
	req, err := n.Request(ctx, url)
	if err != nil {
		return 0, err
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("post notification: %w", err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, nil
}

// ledgerCount is the number of ledger entries of orderNo in a design's schema.
func (e *env) ledgerCount(t testing.TB, schema, orderNo string) int64 {
	t.Helper()
	var n int64
	q := "SELECT count(*) FROM " + pgx.Identifier{schema, "ledger"}.Sanitize() + " WHERE order_no = $1"
	if err := e.pool.QueryRow(testContext(t), q, orderNo).Scan(&n); err != nil {
		t.Fatalf("count ledger entries of %s in %s: %v", orderNo, schema, err)
	}
	return n
}

// orderStatus is the status of orderNo in a design's schema.
func (e *env) orderStatus(t testing.TB, schema, orderNo string) string {
	t.Helper()
	var s string
	q := "SELECT status FROM " + pgx.Identifier{schema, "orders"}.Sanitize() + " WHERE order_no = $1"
	if err := e.pool.QueryRow(testContext(t), q, orderNo).Scan(&s); err != nil {
		t.Fatalf("read status of %s in %s: %v", orderNo, schema, err)
	}
	return s
}

// schemas maps each design to its schema (the tests read the tables directly).
var schemas = map[string]string{
	field.NameCheckThenAct:    "field_cta",
	field.NameUniqueIndexOnly: "field_unique",
	field.NameRedisLockOnly:   "field_lock",
}
