// Package storm delivers simulated provider notifications to a callbackd on loopback: one
// notification, a storm (N orders × D duplicates at concurrency C, optionally shuffled), or a
// provider's retry schedule replayed with compressed time, resending only when the answer asks
// for it, exactly as the provider does. Several replicas of a channel can be targeted in turn, as
// through a load balancer. It also plays the merchant's part around a storm: registering the
// orders and pressing "check payment" (Merchant). Every run ends in a Summary (sent, answers by outcome,
// latency percentiles, throughput) that prints for people or encodes as JSON for tests and
// benchmarks.
package storm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed-1cff2221/callback-platform/internal/paysim"
)

// DefaultTimeout is the answer deadline of one delivery attempt: WeChat Pay waits 5 s.
const DefaultTimeout = 5 * time.Second

// maxAnswerBody bounds how much of an answer is read and kept.
const maxAnswerBody = 4 << 10

// Sender delivers one channel's notifications to its targets, as the provider would.
type Sender struct {
	notifier Notifier
	targets  []string
	next     atomic.Uint64
	client   *http.Client
}

// NewSender returns a sender posting notifier's notifications to target (the channel's notify
// URL, e.g. http://127.0.0.1:8080/notify/wechat). target must be on loopback. client may be
// nil: NewClient(64, DefaultTimeout) is used.
func NewSender(notifier Notifier, target string, client *http.Client) (*Sender, error) {
	return NewBalancedSender(notifier, []string{target}, client)
}

// NewBalancedSender is NewSender for several replicas of the same channel: requests go to the
// targets in turn, as through a round-robin load balancer, so that the duplicates of one
// notification reach different replicas.
func NewBalancedSender(notifier Notifier, targets []string, client *http.Client) (*Sender, error) {
	if len(targets) == 0 {
		return nil, errors.New("storm: at least one target is required")
	}
	for _, t := range targets {
		if _, err := CheckTarget(t); err != nil {
			return nil, err
		}
	}
	if client == nil {
		client = NewClient(64, DefaultTimeout)
	}
	return &Sender{notifier: notifier, targets: append([]string(nil), targets...), client: client}, nil
}

// target picks the target of the next request.
func (s *Sender) target() string {
	return s.targets[(s.next.Add(1)-1)%uint64(len(s.targets))]
}

// targetNames describes the targets in a summary.
func (s *Sender) targetNames() string { return strings.Join(s.targets, ",") }

// Attempt is the result of one delivery attempt.
type Attempt struct {
	Outcome Outcome       `json:"outcome"`
	Status  int           `json:"status,omitempty"`
	Body    string        `json:"body,omitempty"`
	Latency time.Duration `json:"latency_ns"`
	// Err is the transport error of an OutcomeTransportError.
	Err error `json:"-"`
}

// Send signs and delivers one attempt of t's notification.
func (s *Sender) Send(ctx context.Context, t Trade) (Attempt, error) {
	n, err := s.notifier.Notification(t)
	if err != nil {
		return Attempt{}, err
	}
	return s.post(ctx, n), nil
}

// post delivers a signed notification and classifies the answer.
func (s *Sender) post(ctx context.Context, n paysim.Notification) Attempt {
	req, err := n.Request(ctx, s.target())
	if err != nil {
		return Attempt{Outcome: OutcomeTransportError, Err: err}
	}
	start := time.Now()
	resp, err := s.client.Do(req)
	if err != nil {
		return Attempt{Outcome: OutcomeTransportError, Latency: time.Since(start), Err: err}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBody))
	_, _ = io.Copy(io.Discard, resp.Body) // drain, so the connection is reused
	resp.Body.Close()
	latency := time.Since(start)
	if err != nil {
		return Attempt{Outcome: OutcomeTransportError, Status: resp.StatusCode, Latency: latency, Err: err}
	}
	return Attempt{
		Outcome: Classify(s.notifier.Provider(), resp.StatusCode, body),
		Status:  resp.StatusCode,
		Body:    string(body),
		Latency: latency,
	}
}

// Config shapes a storm.
type Config struct {
	// Trades are the paid orders whose notifications are sent.
	Trades []Trade
	// Duplicates is how many times each notification is delivered (at least 1): the first
	// delivery and its resends, all at once, as in a provider's retry storm.
	Duplicates int
	// Concurrency is the number of requests in flight (at least 1).
	Concurrency int
	// Shuffle sends the deliveries in random order instead of trade by trade.
	Shuffle bool
}

// Storm delivers every trade's notification Duplicates times at Concurrency. Every delivery is
// signed afresh (new timestamp, nonce and signature, same notification id) before the storm
// starts, so the timing measures callbackd, not the signer. A cancelled ctx stops the storm;
// the summary of what was sent is returned with ctx's error.
func (s *Sender) Storm(ctx context.Context, cfg Config) (Summary, error) {
	if cfg.Duplicates < 1 || cfg.Concurrency < 1 {
		return Summary{}, fmt.Errorf("storm: duplicates and concurrency must be at least 1, got %d and %d", cfg.Duplicates, cfg.Concurrency)
	}
	summary := Summary{Provider: s.notifier.Provider(), Target: s.targetNames(), Orders: len(cfg.Trades)}
	jobs := make([]int, 0, len(cfg.Trades)*cfg.Duplicates) // indexes into cfg.Trades
	for i := range cfg.Trades {
		for range cfg.Duplicates {
			jobs = append(jobs, i)
		}
	}
	if cfg.Shuffle {
		rand.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	}
	signed, err := s.signAll(ctx, cfg.Trades, jobs)
	if err != nil {
		return summary, err
	}

	var rec recorder
	acked := make([]bool, len(cfg.Trades))
	var mu sync.Mutex
	start := time.Now()
	forEach(ctx, len(signed), cfg.Concurrency, func(i int) {
		a := s.post(ctx, signed[i])
		if ctx.Err() != nil && a.Outcome == OutcomeTransportError {
			return // cancelled, not an answer
		}
		rec.record(a.Outcome, a.Latency)
		if a.Outcome == OutcomeSuccess {
			mu.Lock()
			acked[jobs[i]] = true
			mu.Unlock()
		}
	})
	summary = rec.summary(summary, time.Since(start))
	for i, ok := range acked {
		if ok {
			summary.OrdersAcknowledged++
		} else {
			summary.Unacknowledged = append(summary.Unacknowledged, cfg.Trades[i].OrderNo)
		}
	}
	return summary, ctx.Err()
}

// signAll signs one notification per job (an index into trades) on every CPU.
func (s *Sender) signAll(ctx context.Context, trades []Trade, jobs []int) ([]paysim.Notification, error) {
	out := make([]paysim.Notification, len(jobs))
	var mu sync.Mutex
	var firstErr error
	forEach(ctx, len(jobs), runtime.GOMAXPROCS(0), func(i int) {
		n, err := s.notifier.Notification(trades[jobs[i]])
		if err != nil {
			mu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
			return
		}
		out[i] = n
	})
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("storm: sign notifications: %w", err)
	}
	return out, nil
}

// forEach runs fn(0..n-1) on at most workers goroutines, stopping early when ctx is done.
func forEach(ctx context.Context, n, workers int, fn func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, max(n, 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i)
			}
		}()
	}
feed:
	for i := 0; i < n; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
}

// errNoSchedule is returned by Replay without a schedule.
var errNoSchedule = errors.New("storm: replay: the retry schedule is empty")
