package store

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// pg is the package's one PostgreSQL server; every test gets its own database on it.
var pg *testenv.Postgres

// templateDB is a migrated database that newStore clones (CREATE DATABASE ... TEMPLATE), which
// is much faster than migrating a fresh database for every test.
const templateDB = "store_template"

var dbSeq atomic.Int64

func TestMain(m *testing.M) {
	var err error
	// The server runs without fsync for speed: these tests are about transaction logic and
	// concurrency, not crash durability. callbackd's sessions still force synchronous_commit
	// on (TestOpenSessionSettings checks it against this very server default).
	pg, err = testenv.NewPostgres(
		testenv.WithoutFsync("store tests check transaction logic and concurrency, not crash durability"),
		testenv.WithSetting("max_connections", "300"),
	)
	if err != nil {
		fmt.Fprintf(os.Stderr, "store tests: %v\n", err)
		os.Exit(1)
	}
	code := 1
	if err := prepareTemplate(); err != nil {
		fmt.Fprintf(os.Stderr, "store tests: %v\n", err)
	} else {
		code = m.Run()
	}
	if err := pg.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "store tests: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func prepareTemplate() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn, err := pg.CreateDatabase(ctx, templateDB)
	if err != nil {
		return err
	}
	if _, err := Migrate(ctx, dsn, nil); err != nil {
		return fmt.Errorf("migrate the template database: %w", err)
	}
	return nil
}

// dsnOf returns the DSN of database name on the test server.
func dsnOf(t testing.TB, name string) string {
	t.Helper()
	u, err := url.Parse(pg.DSN())
	if err != nil {
		t.Fatalf("parse the server DSN: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// adminExec runs a statement on the server's default database.
func adminExec(t testing.TB, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.DSN())
	if err != nil {
		t.Fatalf("connect to the test server: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// migratedDatabase clones the migrated template into a database of the test's own and returns
// its DSN. It is not dropped: the whole server is thrown away after the run.
func migratedDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("store_%d", dbSeq.Add(1))
	adminExec(t, "CREATE DATABASE "+name+" TEMPLATE "+templateDB+" STRATEGY FILE_COPY")
	return dsnOf(t, name)
}

// emptyDatabase creates an empty database of the test's own and returns its DSN.
func emptyDatabase(t testing.TB) string {
	t.Helper()
	return pg.NewDatabase(t, fmt.Sprintf("empty_%d", dbSeq.Add(1)))
}

// newStore returns a store on a fresh, migrated database of its own.
func newStore(t testing.TB) *Store {
	t.Helper()
	ctx := testContext(t)
	dsn := migratedDatabase(t)
	s, err := Open(ctx, dsn, Options{MaxConns: 32})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// testOrder is an order of 100 (minor units) CNY on channel "wx" of merchant "mch-1".
func testOrder(orderNo string) NewOrder {
	return NewOrder{OrderNo: orderNo, Channel: "wx", MerchantID: "mch-1", Amount: 100, Currency: "CNY"}
}

func mustCreate(t *testing.T, s *Store, o NewOrder) Order {
	t.Helper()
	got, created, err := s.CreateOrder(testContext(t), o)
	if err != nil || !created {
		t.Fatalf("CreateOrder(%s) = created %v, err %v; want a new order", o.OrderNo, created, err)
	}
	return got
}

func paymentOf(o NewOrder, txn string) notify.Notification {
	return notify.Notification{
		Channel: o.Channel, Provider: "wechatpay", MerchantID: o.MerchantID, SubMerchantID: o.SubMerchantID,
		OutTradeNo: o.OrderNo, Kind: notify.KindPayment, Status: notify.StatusSucceeded,
		Amount: o.Amount, Currency: o.Currency, ProviderTxnID: txn, NotifyID: "n-" + txn,
		OccurredAt: time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC), BodyDigest: notify.Digest([]byte(txn)),
	}
}

func closeOf(o NewOrder) notify.Notification {
	return notify.Notification{
		Channel: o.Channel, Provider: "wechatpay", MerchantID: o.MerchantID, SubMerchantID: o.SubMerchantID,
		OutTradeNo: o.OrderNo, Kind: notify.KindClose, Status: notify.StatusSucceeded,
	}
}

func refundOf(o NewOrder, txn, refundNo string, amount int64) notify.Notification {
	return notify.Notification{
		Channel: o.Channel, Provider: "wechatpay", MerchantID: o.MerchantID, SubMerchantID: o.SubMerchantID,
		OutTradeNo: o.OrderNo, Kind: notify.KindRefund, OutRefundNo: refundNo, Status: notify.StatusSucceeded,
		Amount: amount, Currency: o.Currency, ProviderTxnID: txn, ProviderRefundID: "r-" + refundNo,
	}
}

func mustApply(t *testing.T, s *Store, n notify.Notification, want Outcome) Result {
	t.Helper()
	res, err := s.Apply(testContext(t), n)
	if err != nil {
		t.Fatalf("Apply(%s %s) error: %v", n.Kind, n.OutTradeNo, err)
	}
	if res.Outcome != want {
		t.Fatalf("Apply(%s %s) outcome = %q (%s), want %q", n.Kind, n.OutTradeNo, res.Outcome, res.Detail, want)
	}
	return res
}

func mustCounts(t *testing.T, s *Store) Counts {
	t.Helper()
	c, err := s.Counts(testContext(t))
	if err != nil {
		t.Fatalf("Counts: %v", err)
	}
	return c
}

// sameCounts compares two snapshots field by field.
func sameCounts(a, b Counts) bool {
	if a.Orders != b.Orders || a.Receipts != b.Receipts || a.LedgerEntries != b.LedgerEntries ||
		a.LedgerPayments != b.LedgerPayments || a.LedgerRefunds != b.LedgerRefunds ||
		a.OutboxEvents != b.OutboxEvents || a.Exceptions != b.Exceptions {
		return false
	}
	for _, st := range OrderStatuses {
		if a.OrdersByStatus[st] != b.OrdersByStatus[st] {
			return false
		}
	}
	return true
}

func mustOrder(t *testing.T, s *Store, orderNo string) OrderDetails {
	t.Helper()
	d, err := s.GetOrder(testContext(t), orderNo)
	if err != nil {
		t.Fatalf("GetOrder(%s): %v", orderNo, err)
	}
	return d
}
