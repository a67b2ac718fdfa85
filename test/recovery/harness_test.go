// Package recovery holds the end-to-end tests of callbackd's recovery paths — the active query,
// the reconciler of stuck orders and refunds — against real PostgreSQL and Redis servers, the
// fake provider query API on loopback and signed provider notifications from paysim.
package recovery

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/clock"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/gate"
	"github.com/seed-1cff2221/callback-platform/callbackd/metrics"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/pipeline"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider"
	"github.com/seed-1cff2221/callback-platform/callbackd/query"
	"github.com/seed-1cff2221/callback-platform/callbackd/reconciler"
	"github.com/seed-1cff2221/callback-platform/callbackd/store"
	"github.com/seed-1cff2221/callback-platform/internal/paysim"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/fakeprovider"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/keyset"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

const (
	mchID  = "1900000109"
	appID  = "wx8888888888888888"
	aliApp = "2021000000000001"
	seller = "2088102146225135"
	// The channels of every test environment.
	wxChannel  = "wx"
	aliChannel = "ali"
)

// pg and redisGroup are the package's servers; every test gets its own database and its own
// Redis key space (the test's order numbers are unique to it).
var (
	pg         *testenv.Postgres
	redisGroup *testenv.RedisGroup
	dbSeq      atomic.Int64
)

func TestMain(m *testing.M) {
	var err error
	pg, err = testenv.NewPostgres(
		testenv.WithoutFsync("recovery tests check exactly-once decisions, not crash durability"),
		testenv.WithSetting("max_connections", "200"),
	)
	if err != nil {
		fmt.Fprintf(os.Stderr, "recovery tests: %v\n", err)
		os.Exit(1)
	}
	redisGroup, err = testenv.NewRedis(testenv.RedisOptions{})
	if err != nil {
		_ = pg.Close()
		fmt.Fprintf(os.Stderr, "recovery tests: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := redisGroup.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "recovery tests: %v\n", err)
	}
	if err := pg.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "recovery tests: %v\n", err)
	}
	os.Exit(code)
}

// env is one callbackd's worth of recovery machinery on its own database: the store, the
// pipeline with the Redis gate and the window, the channels' adapters, the query clients
// pointing at a fake provider, the Syncer and a reconciler on a fake clock.
type env struct {
	st       *store.Store
	dsn      string
	pipe     *pipeline.Pipeline
	metrics  *metrics.Metrics
	syncer   *query.Syncer
	clock    *clock.Fake
	channels []config.Channel

	wechat, alipay *keyset.Set
	fake           *fakeprovider.Server
	// failures answers this many provider queries with HTTP 500 before the fake sees them.
	failures atomic.Int64
	// failed counts the queries answered 500.
	failed    atomic.Int64
	queryURL  string
	wechatSim *paysim.WeChatPay
	alipaySim *paysim.Alipay
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := t.Context()
	e := &env{clock: clock.NewFake(time.Now())}
	dsn := pg.NewDatabase(t, fmt.Sprintf("recovery_%d", dbSeq.Add(1)))
	if _, err := store.Migrate(ctx, dsn, nil); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	st, err := store.Open(ctx, dsn, store.Options{MaxConns: 32})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(st.Close)
	e.st, e.dsn = st, dsn

	if e.wechat, err = keyset.Generate(t.TempDir(), keyset.Spec{Channel: wxChannel, Provider: callbackdv1alpha1.ProviderWeChatPay,
		Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: mchID, AppID: appID}}); err != nil {
		t.Fatal(err)
	}
	if e.alipay, err = keyset.Generate(t.TempDir(), keyset.Spec{Channel: aliChannel, Provider: callbackdv1alpha1.ProviderAlipay,
		Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: aliApp, SellerID: seller}}); err != nil {
		t.Fatal(err)
	}
	if e.fake, err = fakeprovider.New([]*keyset.Set{e.wechat, e.alipay}, fakeprovider.Options{}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e.failures.Add(-1) >= 0 {
			e.failed.Add(1)
			http.Error(w, `{"code":"SYSTEM_ERROR","message":"provider outage"}`, http.StatusInternalServerError)
			return
		}
		e.fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	e.queryURL = srv.URL
	e.wechatSim = &paysim.WeChatPay{APIv3Key: e.wechat.APIv3Key, Serial: e.wechat.Manifest.WeChatSerial, Key: e.wechat.PlatformKey}
	e.alipaySim = &paysim.Alipay{AppID: aliApp, Key: e.alipay.AlipayKey}

	settings := callbackdv1alpha1.ChannelSettings{Reconciliation: callbackdv1alpha1.Reconciliation{
		QueryBaseURL:     srv.URL,
		PendingAfter:     metav1.Duration{Duration: 10 * time.Minute},
		QueriesPerSecond: 1000,
	}}
	e.channels = []config.Channel{e.wechat.Channel(settings), e.alipay.Channel(settings)}

	e.metrics = metrics.New()
	adapters := map[string]notify.Adapter{}
	var pchannels []pipeline.Channel
	for _, ch := range e.channels {
		a, err := provider.New(ctx, ch, nil, e.metrics.Registry)
		if err != nil {
			t.Fatalf("adapter of %s: %v", ch.Name, err)
		}
		adapters[ch.Name] = a
		pchannels = append(pchannels, pipeline.Channel{Name: ch.Name, Adapter: a,
			LockTTL: 10 * time.Second, SuccessTTL: time.Hour, WindowTTL: time.Minute})
	}
	client, err := gate.NewRedisClient(config.Redis{Addr: redisGroup.Nodes()[0].Addr})
	if err != nil {
		t.Fatalf("redis client: %v", err)
	}
	t.Cleanup(func() { _ = client.Close() })
	window, err := gate.NewWindow(gate.WindowOptions{MaxEntries: 100000})
	if err != nil {
		t.Fatal(err)
	}
	if e.pipe, err = pipeline.New(pipeline.Options{Channels: pchannels, Ledger: st, Metrics: e.metrics,
		Claims: gate.NewClaims(client, time.Second), Window: window}); err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	clients, err := query.NewClients(ctx, e.channels, e.pipe.Adapter, query.ClientOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("query clients: %v", err)
	}
	if e.syncer, err = query.NewSyncer(st, e.pipe, clients, query.SyncerOptions{Clock: e.clock}); err != nil {
		t.Fatalf("syncer: %v", err)
	}
	return e
}

// newReconciler builds a reconciler of the environment's channels on its own metrics registry.
func (e *env) newReconciler(t *testing.T, qps int32) (*reconciler.Reconciler, *prometheus.Registry) {
	t.Helper()
	channels := append([]config.Channel(nil), e.channels...)
	for i := range channels {
		channels[i].Reconciliation.QueriesPerSecond = qps
	}
	reg := prometheus.NewRegistry()
	r, err := reconciler.New(e.st.Pool(), e.syncer, channels, reconciler.Options{Clock: e.clock, Registerer: reg})
	if err != nil {
		t.Fatalf("reconciler: %v", err)
	}
	return r, reg
}

// registerOrder registers an order as the merchant does before the user pays.
func (e *env) registerOrder(t *testing.T, channel, orderNo string, amount int64, expiresAt *time.Time) store.Order {
	t.Helper()
	merchant := map[string]string{wxChannel: mchID, aliChannel: aliApp}[channel]
	o, _, err := e.st.CreateOrder(t.Context(), store.NewOrder{OrderNo: orderNo, Channel: channel, MerchantID: merchant,
		Amount: amount, Currency: "CNY", ExpiresAt: expiresAt})
	if err != nil {
		t.Fatalf("register order %s: %v", orderNo, err)
	}
	return o
}

// providerName is the fake provider's name of a channel's provider.
func providerOf(channel string) callbackdv1alpha1.Provider {
	if channel == aliChannel {
		return callbackdv1alpha1.ProviderAlipay
	}
	return callbackdv1alpha1.ProviderWeChatPay
}

// pay tells the fake provider that the user paid the order (the provider's side of a payment).
func (e *env) pay(channel, orderNo, txn string, amount int64) {
	merchant := map[string]string{wxChannel: mchID, aliChannel: aliApp}[channel]
	e.fake.Put(fakeprovider.Trade{Provider: providerOf(channel), MerchantID: merchant, OutTradeNo: orderNo,
		TransactionID: txn, Amount: amount, Currency: "CNY", PaidAt: time.Now().Add(-time.Minute).Truncate(time.Second)})
}

// paymentCallback is the provider's signed payment notification of an order paid with pay.
func (e *env) paymentCallback(t *testing.T, channel, orderNo, txn string, amount int64) paysim.Notification {
	t.Helper()
	var (
		n   paysim.Notification
		err error
	)
	if channel == aliChannel {
		n, err = e.alipaySim.Trade(paysim.AlipayTrade{OutTradeNo: orderNo, TradeNo: txn, TradeStatus: paysim.AlipayTradeSuccess,
			TotalAmount: yuan(amount), SellerID: seller, GmtPayment: time.Now()}, paysim.AlipayOptions{})
	} else {
		n, err = e.wechatSim.Payment(paysim.WeChatTransaction{MchID: mchID, AppID: appID, OutTradeNo: orderNo, TransactionID: txn,
			TradeType: "JSAPI", TradeState: "SUCCESS", SuccessTime: paysim.WeChatTime(time.Now()),
			Amount: paysim.WeChatAmount{Total: amount, PayerTotal: amount, Currency: "CNY", PayerCurrency: "CNY"}}, paysim.WeChatOptions{})
	}
	if err != nil {
		t.Fatalf("build payment notification: %v", err)
	}
	return n
}

// refundCallback is the provider's signed notification of a successful refund: WeChat Pay's
// REFUND.SUCCESS, or Alipay's trade notification carrying out_biz_no and refund_fee (with
// TRADE_CLOSED once the trade is fully refunded).
func (e *env) refundCallback(t *testing.T, channel, orderNo, txn, refundNo string, total, refund int64, full bool) paysim.Notification {
	t.Helper()
	var (
		n   paysim.Notification
		err error
	)
	if channel == aliChannel {
		status := paysim.AlipayTradeSuccess
		if full {
			status = paysim.AlipayTradeClosed
		}
		n, err = e.alipaySim.Trade(paysim.AlipayTrade{OutTradeNo: orderNo, TradeNo: txn, TradeStatus: status,
			TotalAmount: yuan(total), SellerID: seller, OutBizNo: refundNo, RefundFee: yuan(refund), GmtRefund: time.Now()},
			paysim.AlipayOptions{})
	} else {
		n, err = e.wechatSim.Refund(paysim.WeChatRefund{MchID: mchID, OutTradeNo: orderNo, TransactionID: txn, OutRefundNo: refundNo,
			RefundID: "50300" + refundNo, RefundStatus: "SUCCESS", SuccessTime: paysim.WeChatTime(time.Now()),
			UserReceivedAccount: "支付用户零钱",
			Amount:              paysim.WeChatRefundAmount{Total: total, Refund: refund, PayerTotal: total, PayerRefund: refund}}, paysim.WeChatOptions{})
	}
	if err != nil {
		t.Fatalf("build refund notification: %v", err)
	}
	return n
}

// deliver sends a provider notification through the pipeline, as POST /notify/{channel} does.
func (e *env) deliver(ctx context.Context, channel string, n paysim.Notification) (notify.Verdict, error) {
	req, err := n.Request(ctx, "http://127.0.0.1/notify/"+channel)
	if err != nil {
		return notify.Reject, err
	}
	v, _ := e.pipe.Process(ctx, channel, req, n.Body)
	return v, nil
}

// orderState is what the database holds about one order.
type orderState struct {
	status         store.OrderStatus
	refunded       int64
	payments       int
	refunds        int
	outboxEvents   int64
	exceptions     int64
	exceptionKinds []string
}

func (e *env) state(t *testing.T, orderNo string) orderState {
	t.Helper()
	ctx := t.Context()
	d, err := e.st.GetOrder(ctx, orderNo)
	if err != nil {
		t.Fatalf("get order %s: %v", orderNo, err)
	}
	s := orderState{status: d.Status, refunded: d.RefundedAmount}
	for _, l := range d.Ledger {
		switch l.Type {
		case "payment":
			s.payments++
		case "refund":
			s.refunds++
		}
	}
	if err := e.st.Pool().QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE order_no = $1`, orderNo).Scan(&s.outboxEvents); err != nil {
		t.Fatalf("count outbox events: %v", err)
	}
	rows, err := e.st.Pool().Query(ctx, `SELECT kind FROM payment_exceptions WHERE order_no = $1 ORDER BY id`, orderNo)
	if err != nil {
		t.Fatalf("read exceptions: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		s.exceptionKinds = append(s.exceptionKinds, k)
		s.exceptions++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return s
}

// counter reads one sample of a counter or gauge from a registry (0 when absent).
func counter(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, labels) {
				if m.Counter != nil {
					return m.Counter.GetValue()
				}
				return m.Gauge.GetValue()
			}
		}
	}
	return 0
}

func matches(m *dto.Metric, labels map[string]string) bool {
	if len(m.GetLabel()) != len(labels) {
		return false
	}
	for _, l := range m.GetLabel() {
		if labels[l.GetName()] != l.GetValue() {
			return false
		}
	}
	return true
}

func yuan(fen int64) string { return fmt.Sprintf("%d.%02d", fen/100, fen%100) }

// uniq makes order numbers unique across the package's tests (they share one Redis).
func uniq(t *testing.T, prefix string) string {
	return prefix + "-" + strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()) + "-" + fmt.Sprint(time.Now().UnixNano()%1e9)
}
