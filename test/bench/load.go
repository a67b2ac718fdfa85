package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed-1cff2221/callback-platform/internal/paysim"
)

// Latencies collects request latencies. It keeps every sample (a run holds at most a few hundred
// thousand), so percentiles are exact rather than bucketed.
type Latencies struct {
	mu      sync.Mutex
	samples []time.Duration
}

// Add records one latency.
func (l *Latencies) Add(d time.Duration) {
	l.mu.Lock()
	l.samples = append(l.samples, d)
	l.mu.Unlock()
}

// merge appends a worker's samples in one lock.
func (l *Latencies) merge(ds []time.Duration) {
	l.mu.Lock()
	l.samples = append(l.samples, ds...)
	l.mu.Unlock()
}

// Count is the number of samples.
func (l *Latencies) Count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.samples)
}

// Quantile returns the q-quantile (0 < q ≤ 1) with the nearest-rank method; 0 without samples.
func (l *Latencies) Quantile(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.samples) == 0 {
		return 0
	}
	if !slices.IsSorted(l.samples) {
		slices.Sort(l.samples)
	}
	rank := int(q*float64(len(l.samples))+0.999999) - 1
	rank = max(0, min(rank, len(l.samples)-1))
	return l.samples[rank]
}

// Request is one prepared request: the exact bytes and headers of a signed notification and the
// URL it goes to. Preparing (signing) happens before the timed run.
type Request struct {
	URL          string
	Notification paysim.Notification
}

// LoadResult is what a load run measured.
type LoadResult struct {
	// Sent is the number of requests answered or failed; OK the ones answered 2xx.
	Sent, OK int
	// Statuses counts answers by HTTP status (0: transport error).
	Statuses map[int]int
	// Elapsed is the run's wall time, from the first send to the last answer.
	Elapsed time.Duration
	// Throughput is Sent / Elapsed, in requests per second.
	Throughput float64
	// P50 and P99 are latency percentiles. In an open-loop run they are measured from each
	// request's scheduled send time, so a server that falls behind is charged for the queue.
	P50, P99 time.Duration
	// FirstError is one transport error, for diagnosis.
	FirstError string
}

// String summarizes the run on one line, for progress output.
func (r LoadResult) String() string {
	return fmt.Sprintf("%d requests (%d ok) in %.2fs: %.0f/s, p50 %.2f ms, p99 %.2f ms",
		r.Sent, r.OK, r.Elapsed.Seconds(), r.Throughput, ms(r.P50), ms(r.P99))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// NewLoadClient is the load generator's HTTP client: persistent connections to loopback only,
// as many idle connections kept as there are requests in flight, no proxy, no redirects.
func NewLoadClient(conns int, timeout time.Duration) *http.Client {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				host, _, err := net.SplitHostPort(addr)
				if err != nil {
					return nil, err
				}
				if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
					return nil, fmt.Errorf("dial %s: the benchmark only sends to loopback", addr)
				}
				return dialer.DialContext(ctx, network, addr)
			},
			MaxIdleConns:        conns + 16,
			MaxIdleConnsPerHost: conns + 16,
			IdleConnTimeout:     60 * time.Second,
			DisableCompression:  true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// tally is one worker's private counters, merged at the end.
type tally struct {
	sent, ok  int
	statuses  map[int]int
	latencies []time.Duration
	firstErr  string
}

func (t *tally) send(ctx context.Context, client *http.Client, r Request, from time.Time) {
	status := 0
	req, err := r.Notification.Request(ctx, r.URL)
	if err == nil {
		var resp *http.Response
		resp, err = client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			status = resp.StatusCode
		}
	}
	t.latencies = append(t.latencies, time.Since(from))
	t.sent++
	if t.statuses == nil {
		t.statuses = map[int]int{}
	}
	t.statuses[status]++
	if status >= 200 && status < 300 {
		t.ok++
	}
	if err != nil && t.firstErr == "" {
		t.firstErr = err.Error()
	}
}

func merge(tallies []*tally, elapsed time.Duration) LoadResult {
	res := LoadResult{Statuses: map[int]int{}, Elapsed: elapsed}
	var lat Latencies
	for _, t := range tallies {
		res.Sent += t.sent
		res.OK += t.ok
		for s, n := range t.statuses {
			res.Statuses[s] += n
		}
		lat.merge(t.latencies)
		if res.FirstError == "" {
			res.FirstError = t.firstErr
		}
	}
	if elapsed > 0 {
		res.Throughput = float64(res.Sent) / elapsed.Seconds()
	}
	res.P50, res.P99 = lat.Quantile(0.50), lat.Quantile(0.99)
	return res
}

// ClosedLoop sends every request once with exactly concurrency requests in flight (each worker
// sends its next request as soon as the previous one is answered): the maximum throughput.
// Latency is measured per request from its send.
func ClosedLoop(ctx context.Context, client *http.Client, reqs []Request, concurrency int) LoadResult {
	var next atomic.Int64
	tallies := make([]*tally, concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range concurrency {
		t := &tally{latencies: make([]time.Duration, 0, len(reqs)/concurrency+1)}
		tallies[w] = t
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(reqs) {
					return
				}
				t.send(ctx, client, reqs[i], time.Now())
			}
		})
	}
	wg.Wait()
	return merge(tallies, time.Since(start))
}

// OpenLoop sends the requests at a fixed rate (requests per second) whatever the answers, as
// independent providers do. Each request has a scheduled send time; its latency runs from that
// time, not from when a worker got round to it, so a server that falls behind shows its queue in
// the percentiles (no coordinated omission). maxInFlight bounds the workers.
func OpenLoop(ctx context.Context, client *http.Client, reqs []Request, rate float64, maxInFlight int) LoadResult {
	if rate <= 0 || len(reqs) == 0 {
		return LoadResult{Statuses: map[int]int{}}
	}
	interval := time.Duration(float64(time.Second) / rate)
	var next atomic.Int64
	tallies := make([]*tally, maxInFlight)
	var wg sync.WaitGroup
	start := time.Now().Add(20 * time.Millisecond)
	for w := range maxInFlight {
		t := &tally{}
		tallies[w] = t
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(reqs) {
					return
				}
				at := start.Add(time.Duration(i) * interval)
				if d := time.Until(at); d > 0 {
					time.Sleep(d)
				}
				t.send(ctx, client, reqs[i], at)
			}
		})
	}
	wg.Wait()
	return merge(tallies, time.Since(start))
}
