package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// FlakyFront is an HTTP proxy in front of callbackd replicas (a load balancer that misbehaves)
// which fails a fraction of the requests at random, in the two ways that matter to exactly-once:
//
//   - drop-request: the connection is reset before the request reaches callbackd (nothing
//     happened; the provider sees no answer);
//   - drop-answer: the request is forwarded, callbackd answers, and the connection is reset
//     instead of relaying the answer (callbackd may have committed and answered success; the
//     provider sees no answer and resends).
//
// Requests are spread over the targets in turn. Counters are kept per kind and, for dropped
// answers, per callbackd status class, so a test can prove that acknowledged effects were lost
// on the way back.
type FlakyFront struct {
	targets []string
	// failPermille is the share of requests failed, in thousandths; half of the failures drop
	// the request, half the answer.
	failPermille atomic.Int64
	next         atomic.Uint64

	srv    *http.Server
	ln     net.Listener
	client *http.Client

	mu     sync.Mutex
	rng    *rand.Rand
	counts map[string]int64
}

// The FlakyFront counters.
const (
	FrontRequests       = "requests"
	FrontForwarded      = "forwarded"
	FrontDropRequest    = "drop-request"
	FrontDropAnswer     = "drop-answer"
	FrontDropAnswer2xx  = "drop-answer-2xx" // callbackd had answered success
	FrontUpstreamErrors = "upstream-error"
)

// NewFlakyFront listens on a free loopback port and forwards to the targets (base URLs such as
// http://127.0.0.1:8080), failing failRate of the requests. seed makes the choice of failed
// requests reproducible.
func NewFlakyFront(targets []string, failRate float64, seed uint64) (*FlakyFront, error) {
	if len(targets) == 0 {
		return nil, errors.New("flaky front: at least one target is required")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("flaky front: listen: %w", err)
	}
	f := &FlakyFront{
		targets: append([]string(nil), targets...),
		ln:      ln,
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		counts:  map[string]int64{},
		client: &http.Client{
			Timeout: 20 * time.Second,
			Transport: &http.Transport{
				Proxy:               nil, // loopback only
				MaxIdleConns:        256,
				MaxIdleConnsPerHost: 128,
				IdleConnTimeout:     30 * time.Second,
			},
		},
	}
	f.SetFailRate(failRate)
	f.srv = &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

// URL is the proxy's base URL.
func (f *FlakyFront) URL() string { return "http://" + f.ln.Addr().String() }

// SetFailRate changes the share of failed requests (0 heals the front).
func (f *FlakyFront) SetFailRate(rate float64) {
	f.failPermille.Store(int64(rate * 1000))
}

// Count returns one counter.
func (f *FlakyFront) Count(name string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[name]
}

// Counts returns every counter.
func (f *FlakyFront) Counts() map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.counts)
}

// Close stops the proxy and closes every connection.
func (f *FlakyFront) Close() error {
	err := f.srv.Close()
	f.client.CloseIdleConnections()
	return err
}

func (f *FlakyFront) add(name string) {
	f.mu.Lock()
	f.counts[name]++
	f.mu.Unlock()
}

// decide draws the fate of one request: "", FrontDropRequest or FrontDropAnswer.
func (f *FlakyFront) decide() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[FrontRequests]++
	n := f.rng.Int64N(2000)
	fail := f.failPermille.Load()
	switch {
	case n < fail:
		return FrontDropRequest
	case n < 2*fail:
		return FrontDropAnswer
	}
	return ""
}

// ServeHTTP forwards one request, or fails it.
func (f *FlakyFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fate := f.decide()
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		resetHTTPConn(w)
		return
	}
	if fate == FrontDropRequest {
		f.add(FrontDropRequest)
		resetHTTPConn(w)
		return
	}
	target := f.targets[(f.next.Add(1)-1)%uint64(len(f.targets))]
	req, err := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		resetHTTPConn(w)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := f.client.Do(req)
	if err != nil {
		f.add(FrontUpstreamErrors)
		resetHTTPConn(w)
		return
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if err != nil {
		f.add(FrontUpstreamErrors)
		resetHTTPConn(w)
		return
	}
	if fate == FrontDropAnswer {
		f.add(FrontDropAnswer)
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			f.add(FrontDropAnswer2xx)
		}
		resetHTTPConn(w)
		return
	}
	f.add(FrontForwarded)
	maps.Copy(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

// resetHTTPConn resets the client's connection (TCP RST) without answering.
func resetHTTPConn(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler) // the server closes the connection without an answer
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
