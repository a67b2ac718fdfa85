package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seed-1cff2221/callback-platform/callbackd/metrics"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
)

// answerAdapter answers in a recognizable dialect: 200 "SUCCESS", 503 "RETRY: msg", 400 "REJECT: msg".
type answerAdapter struct{}

func (answerAdapter) Provider() string { return "fake" }
func (answerAdapter) Parse(context.Context, *http.Request, []byte) (notify.Notification, error) {
	return notify.Notification{}, errors.New("not used")
}
func (answerAdapter) Respond(w http.ResponseWriter, v notify.Verdict, msg string) {
	switch v {
	case notify.Success:
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "SUCCESS")
	case notify.Retry:
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "RETRY: "+msg)
	default:
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, "REJECT: "+msg)
	}
}

// blockingPipeline processes callbacks of channel "wx"; while gate is non-nil each Process waits
// for it to close, so a test can hold requests in flight.
type blockingPipeline struct {
	m       *metrics.Metrics
	gate    chan struct{}
	entered chan struct{}
	bodies  atomic.Int64
	refused atomic.Int64
}

func (p *blockingPipeline) Adapter(ch string) (notify.Adapter, bool) {
	return answerAdapter{}, ch == "wx"
}

func (p *blockingPipeline) Process(ctx context.Context, _ string, _ *http.Request, body []byte) (notify.Verdict, string) {
	p.bodies.Add(1)
	if p.entered != nil {
		p.entered <- struct{}{}
	}
	if p.gate != nil {
		select {
		case <-p.gate:
		case <-ctx.Done():
			return notify.Retry, "timeout"
		}
	}
	return notify.Success, "ok"
}

func (p *blockingPipeline) Refuse(ch string, reason notify.Reason) (notify.Verdict, string) {
	p.refused.Add(1)
	p.m.Anomalies.WithLabelValues(ch, string(reason)).Inc()
	return notify.Reject, string(reason)
}

type switchPinger struct{ down atomic.Bool }

func (s *switchPinger) Ping(context.Context) error {
	if s.down.Load() {
		return errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	}
	return nil
}

func newTestServer(t *testing.T, p *blockingPipeline, mutate func(*Options)) (*Server, *metrics.Metrics) {
	t.Helper()
	m := metrics.New()
	p.m = m
	opts := Options{Pipeline: p, Metrics: m, Database: &switchPinger{}, MaxBodyBytes: 1024, MaxInFlight: 4,
		ReadyCacheTTL: time.Nanosecond}
	if mutate != nil {
		mutate(&opts)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, m
}

func post(t *testing.T, h http.Handler, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
	return rec
}

func TestOversizedBodyIsRejectedInTheProviderDialect(t *testing.T) {
	p := &blockingPipeline{}
	s, m := newTestServer(t, p, nil)
	rec := post(t, s.Handler(), "/notify/wx", strings.Repeat("x", 1025))
	if rec.Code != http.StatusBadRequest || rec.Body.String() != "REJECT: body_too_large" {
		t.Fatalf("oversized body: expected 400 \"REJECT: body_too_large\", got %d %q", rec.Code, rec.Body.String())
	}
	if p.bodies.Load() != 0 {
		t.Fatal("oversized body: expected the pipeline not to process it")
	}
	if got := testutil.ToFloat64(m.Anomalies.WithLabelValues("wx", metrics.AnomalyBodyTooLarge)); got != 1 {
		t.Fatalf("anomalies{reason=body_too_large}: expected 1, got %v", got)
	}
	// Exactly at the limit is accepted.
	if rec := post(t, s.Handler(), "/notify/wx", strings.Repeat("x", 1024)); rec.Code != http.StatusOK {
		t.Fatalf("body at the limit: expected 200, got %d %q", rec.Code, rec.Body.String())
	}
}

func TestUnknownChannelAndWrongMethod(t *testing.T) {
	s, m := newTestServer(t, &blockingPipeline{}, nil)
	if rec := post(t, s.Handler(), "/notify/nope", "{}"); rec.Code != http.StatusNotFound {
		t.Fatalf("unknown channel: expected 404, got %d", rec.Code)
	}
	if n := testutil.CollectAndCount(m.Callbacks); n != 0 {
		t.Fatalf("unknown channel: expected no metric series created, got %d", n)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/notify/wx", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("GET /notify/wx: expected 405, got %d", rec.Code)
	}
}

func TestOverloadIsAFastRetryNotAQueue(t *testing.T) {
	p := &blockingPipeline{gate: make(chan struct{}), entered: make(chan struct{}, 8)}
	s, m := newTestServer(t, p, func(o *Options) { o.MaxInFlight = 2 })
	h := s.Handler()

	var wg sync.WaitGroup
	held := make([]*httptest.ResponseRecorder, 2)
	for i := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			held[i] = post(t, h, "/notify/wx", "{}")
		}()
	}
	<-p.entered
	<-p.entered
	if got := testutil.ToFloat64(m.InFlight); got != 2 {
		t.Fatalf("inflight gauge with 2 held: expected 2, got %v", got)
	}

	start := time.Now()
	rec := post(t, h, "/notify/wx", "{}")
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Fatalf("overload answer: expected immediate, took %s", elapsed)
	}
	if rec.Code != http.StatusServiceUnavailable || rec.Body.String() != "RETRY: overloaded" || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("overload answer: expected 503 \"RETRY: overloaded\" with Retry-After, got %d %q", rec.Code, rec.Body.String())
	}
	if got := testutil.ToFloat64(m.OverloadRejections.WithLabelValues("wx")); got != 1 {
		t.Fatalf("overload_rejections: expected 1, got %v", got)
	}
	if got := p.bodies.Load(); got != 2 {
		t.Fatalf("pipeline calls while overloaded: expected 2, got %d", got)
	}

	close(p.gate)
	wg.Wait()
	for i, r := range held {
		if r.Code != http.StatusOK {
			t.Fatalf("held request %d: expected 200, got %d", i, r.Code)
		}
	}
	if got := testutil.ToFloat64(m.InFlight); got != 0 {
		t.Fatalf("inflight gauge after the requests: expected 0, got %v", got)
	}
	if rec := post(t, h, "/notify/wx", "{}"); rec.Code != http.StatusOK {
		t.Fatalf("after the load: expected 200, got %d", rec.Code)
	}
}

func TestReadyzFollowsTheDatabase(t *testing.T) {
	db := &switchPinger{}
	s, _ := newTestServer(t, &blockingPipeline{}, func(o *Options) { o.Database = db })
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Fatalf("database up: expected 200, got %d %q", code, body)
	}
	db.down.Store(true)
	code, body := get("/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "database unreachable") {
		t.Fatalf("database down: expected 503 \"database unreachable\", got %d %q", code, body)
	}
	if strings.Contains(body, "127.0.0.1") {
		t.Fatalf("readyz must not expose connection details, got %q", body)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("healthz with the database down: expected 200 (the process is up), got %d", code)
	}
	db.down.Store(false)
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Fatalf("database back: expected 200, got %d %q", code, body)
	}
}

type countingPinger struct{ n atomic.Int64 }

func (c *countingPinger) Ping(context.Context) error { c.n.Add(1); return nil }

func TestReadyzCachesThePing(t *testing.T) {
	db := &countingPinger{}
	s, _ := newTestServer(t, &blockingPipeline{}, func(o *Options) { o.Database = db; o.ReadyCacheTTL = time.Hour })
	for range 50 {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	}
	if got := db.n.Load(); got != 1 {
		t.Fatalf("50 probes within the cache TTL: expected 1 ping, got %d", got)
	}
}

func TestGracefulShutdownDrainsInFlightCallbacks(t *testing.T) {
	p := &blockingPipeline{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	s, _ := newTestServer(t, p, func(o *Options) { o.ShutdownTimeout = 10 * time.Second })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln, nil) }()
	url := "http://" + ln.Addr().String()

	answer := make(chan string, 1)
	go func() {
		resp, err := postJSON(http.DefaultClient, url+"/notify/wx")
		if err != nil {
			answer <- "error: " + err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answer <- resp.Status + " " + string(b)
	}()
	<-p.entered

	stop() // SIGTERM
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) while a callback was in flight; expected it to drain first", err)
	case <-time.After(200 * time.Millisecond):
	}
	if !s.ready.draining.Load() {
		t.Fatal("while draining: expected readiness to report shutting down")
	}
	close(p.gate)
	if got := <-answer; got != "200 OK SUCCESS" {
		t.Fatalf("the in-flight callback: expected \"200 OK SUCCESS\", got %q", got)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve after a complete drain: expected nil, got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after the drain")
	}
	if _, err := postJSON(http.DefaultClient, url+"/notify/wx"); err == nil {
		t.Fatal("after shutdown: expected new connections to be refused")
	}
}

func TestShutdownTimeoutIsReported(t *testing.T) {
	p := &blockingPipeline{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	s, _ := newTestServer(t, p, func(o *Options) { o.ShutdownTimeout = 100 * time.Millisecond; o.RequestTimeout = 4 * time.Second })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln, nil) }()
	go func() {
		resp, err := postJSON(http.DefaultClient, "http://"+ln.Addr().String()+"/notify/wx")
		if err == nil {
			resp.Body.Close()
		}
	}()
	<-p.entered
	stop()
	select {
	case err := <-served:
		if err == nil || !strings.Contains(err.Error(), "shutdown") {
			t.Fatalf("a drain past ShutdownTimeout: expected a shutdown error, got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not give up after ShutdownTimeout")
	}
	close(p.gate)
}

func TestSeparateOpsListener(t *testing.T) {
	s, _ := newTestServer(t, &blockingPipeline{}, nil)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	opsLn, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln, opsLn) }()
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: expected a clean stop, got %v", err)
		}
	}()

	status := func(addr, path string) int {
		resp, err := getURL(http.DefaultClient, "http://"+addr+path)
		if err != nil {
			t.Fatalf("GET %s%s: %v", addr, path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status(opsLn.Addr().String(), "/metrics"); got != http.StatusOK {
		t.Fatalf("/metrics on the ops listener: expected 200, got %d", got)
	}
	if got := status(ln.Addr().String(), "/metrics"); got != http.StatusNotFound {
		t.Fatalf("/metrics on the main listener when ops listen apart: expected 404, got %d", got)
	}
	if got := status(ln.Addr().String(), "/healthz"); got != http.StatusOK {
		t.Fatalf("/healthz on the main listener: expected 200, got %d", got)
	}
}

func TestNewValidatesOptions(t *testing.T) {
	m := metrics.New()
	p := &blockingPipeline{}
	cases := map[string]Options{
		"no pipeline":  {Metrics: m, Database: &switchPinger{}, MaxBodyBytes: 1, MaxInFlight: 1},
		"no metrics":   {Pipeline: p, Database: &switchPinger{}, MaxBodyBytes: 1, MaxInFlight: 1},
		"no database":  {Pipeline: p, Metrics: m, MaxBodyBytes: 1, MaxInFlight: 1},
		"no body size": {Pipeline: p, Metrics: m, Database: &switchPinger{}, MaxInFlight: 1},
		"no in-flight": {Pipeline: p, Metrics: m, Database: &switchPinger{}, MaxBodyBytes: 1},
	}
	for name, o := range cases {
		if _, err := New(o); err == nil {
			t.Errorf("%s: expected an error, got none", name)
		}
	}
}

func TestDrainDelayKeepsServingWhileNotReady(t *testing.T) {
	s, _ := newTestServer(t, &blockingPipeline{}, func(o *Options) { o.DrainDelay = 500 * time.Millisecond })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln, nil) }()
	url := "http://" + ln.Addr().String()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	stop()
	time.Sleep(100 * time.Millisecond)

	resp, err := getURL(client, url+"/readyz")
	if err != nil {
		t.Fatalf("readyz during the drain delay: expected an answer, got %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("readyz during the drain delay: expected 503, got %d", resp.StatusCode)
	}
	resp, err = postJSON(client, url+"/notify/wx")
	if err != nil {
		t.Fatalf("a callback during the drain delay: expected it served, got %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a callback during the drain delay: expected 200, got %d", resp.StatusCode)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: expected nil, got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after the drain delay")
	}
}

func postJSON(c *http.Client, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader("{}"))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.Do(req)
}

func getURL(c *http.Client, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	return c.Do(req)
}
