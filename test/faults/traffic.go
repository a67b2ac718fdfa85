package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/internal/paysim"
)

// NewPayments returns n payment notifications for orders unique to this run (Redis success
// marks and keys outlive a test's database, so order numbers are never reused).
func (e *Env) NewPayments(prefix string, n int) []Notification {
	run := randomHex(e.T, 4)
	out := make([]Notification, n)
	for i := range out {
		no := fmt.Sprintf("%s-%s-%05d", prefix, run, i)
		out[i] = Notification{Channel: Channel, OrderNo: no, Kind: KindPayment, Amount: int64(100 + i),
			Currency: Currency, TxnID: "txn_" + no}
	}
	return out
}

// CloseOf is the close notification of a payment's order.
func CloseOf(p Notification) Notification {
	return Notification{Channel: p.Channel, OrderNo: p.OrderNo, Kind: KindClose, Amount: p.Amount, Currency: p.Currency}
}

// RegisterOrders registers the orders of ns through the merchant API of via (8 at a time),
// once per order, and fails the test unless each is created.
func (e *Env) RegisterOrders(via *Callbackd, ns []Notification) {
	t := e.T
	t.Helper()
	seen := map[string]bool{}
	var orders []Notification
	for _, n := range ns {
		if !seen[n.OrderNo] {
			seen[n.OrderNo] = true
			orders = append(orders, n)
		}
	}
	var mu sync.Mutex
	var errs []string
	Parallel(len(orders), 8, func(i int) {
		if err := e.registerOrder(via, orders[i]); err != nil {
			mu.Lock()
			errs = append(errs, err.Error())
			mu.Unlock()
		}
	})
	if len(errs) > 0 {
		t.Fatalf("register %d orders: %d failed, first: %s", len(orders), len(errs), errs[0])
	}
}

func (e *Env) registerOrder(via *Callbackd, n Notification) error {
	b, err := json.Marshal(map[string]any{
		"order_no": n.OrderNo, "channel": n.Channel, "merchant_id": MerchantID,
		"amount": n.Amount, "currency": n.Currency,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, via.Base+"/v1/orders", bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+e.apiToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		return fmt.Errorf("register %s: %w", n.OrderNo, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("register %s: expected 201, got %d %s", n.OrderNo, resp.StatusCode, body)
	}
	return nil
}

// Send delivers one signed attempt of n to target (webhook-id msgID, fresh timestamp and
// signature), records it in the history under phase and returns the op.
func (e *Env) Send(ctx context.Context, target *Callbackd, n Notification, msgID, phase string) Op {
	op := Op{Key: n.Key(), Channel: n.Channel, OrderNo: n.OrderNo, Kind: n.Kind, MsgID: msgID,
		Instance: target.Name, Phase: phase, Sent: time.Now()}
	signer := paysim.StandardWebhooks{Secrets: []string{e.secret}}
	note, err := signer.Event(msgID, n.Body())
	if err == nil {
		var req *http.Request
		if req, err = note.Request(ctx, target.Base+"/notify/"+n.Channel); err == nil {
			var resp *http.Response
			if resp, err = httpClient.Do(req); err == nil {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
				resp.Body.Close()
				op.Status, op.Class, op.Body = resp.StatusCode, ClassOf(resp.StatusCode), string(b)
			}
		}
	}
	op.Answered = time.Now()
	if err != nil {
		op.Class, op.Err = Transport, e.Redact(err.Error())
	}
	return e.History.Record(op)
}

// StormOptions shape a storm.
type StormOptions struct {
	// Targets receive the requests in turn, as through a load balancer.
	Targets []*Callbackd
	// Copies is how often each notification is delivered (duplicates; default 1).
	Copies int
	// Concurrency is the number of requests in flight (default 16).
	Concurrency int
	// Pace is the wait between starting two requests (0: as fast as possible).
	Pace time.Duration
	// Phase labels the requests in the history (default "storm").
	Phase string
	// Started, when set, counts the requests started so far (so a test can inject a fault a
	// fraction of the way in).
	Started *atomic.Int64
}

// Storm delivers every notification Copies times, in random order, once each (no retry), and
// returns the ops. It ends early when ctx ends.
func (e *Env) Storm(ctx context.Context, ns []Notification, o StormOptions) []Op {
	if o.Copies <= 0 {
		o.Copies = 1
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 16
	}
	if o.Phase == "" {
		o.Phase = "storm"
	}
	if o.Started == nil {
		o.Started = &atomic.Int64{}
	}
	type job struct{ n, copy int }
	jobs := make([]job, 0, len(ns)*o.Copies)
	for i := range ns {
		for c := range o.Copies {
			jobs = append(jobs, job{i, c})
		}
	}
	rand.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	var next atomic.Uint64
	var mu sync.Mutex
	var ops []Op
	var pace <-chan time.Time
	if o.Pace > 0 {
		tk := time.NewTicker(o.Pace)
		defer tk.Stop()
		pace = tk.C
	}
	Parallel(len(jobs), o.Concurrency, func(k int) {
		if ctx.Err() != nil {
			return
		}
		if pace != nil {
			select {
			case <-pace:
			case <-ctx.Done():
				return
			}
		}
		o.Started.Add(1)
		j := jobs[k]
		n := ns[j.n]
		target := o.Targets[int(next.Add(1)-1)%len(o.Targets)]
		op := e.Send(ctx, target, n, fmt.Sprintf("msg_%s_%s_%d", n.OrderNo, n.Kind, j.copy), o.Phase)
		mu.Lock()
		ops = append(ops, op)
		mu.Unlock()
	})
	return ops
}

// RetryResult counts what the provider's retries took.
type RetryResult struct {
	// Resent is the number of notifications that needed at least one retry; Attempts the
	// requests sent; Unfinished the notifications still without a success answer at the end.
	Resent, Attempts, Unfinished int
}

// ProviderRetries plays the provider after the faults healed: every notification that has no
// success answer in the history yet is resent (to the targets in turn, with a short back-off)
// until it gets one or maxAttempts are used. A refusal stops the retries of that notification,
// as it stops a provider.
func (e *Env) ProviderRetries(ctx context.Context, ns []Notification, targets []*Callbackd, maxAttempts int) RetryResult {
	done := e.History.Succeeded()
	var todo []Notification
	for _, n := range ns {
		if !done[n.Key()] {
			todo = append(todo, n)
		}
	}
	var attempts, unfinished atomic.Int64
	Parallel(len(todo), 16, func(i int) {
		n := todo[i]
		for a := range maxAttempts {
			if ctx.Err() != nil {
				break
			}
			attempts.Add(1)
			op := e.Send(ctx, targets[(i+a)%len(targets)], n, fmt.Sprintf("msg_%s_%s_retry", n.OrderNo, n.Kind), "retries")
			if op.Class == Success || op.Class == Rejected {
				if op.Class == Rejected {
					unfinished.Add(1)
				}
				return
			}
			time.Sleep(time.Duration(20+10*min(a, 20)) * time.Millisecond)
		}
		unfinished.Add(1)
	})
	return RetryResult{Resent: len(todo), Attempts: int(attempts.Load()), Unfinished: int(unfinished.Load())}
}

// Parallel runs fn(0..n-1) on at most workers goroutines and waits for all of them.
func Parallel(n, workers int, fn func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// WaitReady waits until every given callbackd answers /readyz with 200.
func WaitReady(t testing.TB, timeout time.Duration, cs ...*Callbackd) {
	t.Helper()
	for _, c := range cs {
		waitFor(t, timeout, "callbackd "+c.Name+" ready", func() bool {
			code, err := c.Get("/readyz")
			return err == nil && code == http.StatusOK
		})
	}
}
