package hostile

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/internal/paysim"
)

// An enormous body (50 MiB), declared with Content-Length and sent chunked without one: callbackd
// reads at most server.maxBodyBytes (64 KiB by default), answers the provider's failure form at
// once and closes the connection, without holding the body in memory. Evidence: the answer's
// status and time, how much of the body the server let us send before it answered, and
// callbackd's resident memory and its peak (VmHWM) before and after.
func TestEnormousBody(t *testing.T) {
	e := suite
	const size = 50 << 20
	// The body limit is 64 KiB and the server discards at most 256 KiB more before closing the
	// connection; allow generous headroom for buffers, but far below the body's 50 MiB.
	const maxPeakGrowthKiB = 24 << 10
	for _, channel := range []string{wxChannel, aliChannel} {
		for _, chunked := range []bool{false, true} {
			name := fmt.Sprintf("%s Content-Length", channel)
			if chunked {
				name = fmt.Sprintf("%s chunked", channel)
			}
			t.Run(name, func(t *testing.T) {
				o := e.register(t, channel, "huge", 100)
				var n paysim.Notification
				if channel == wxChannel {
					n = e.mustWx(t, wxPayment(o), paysim.WeChatOptions{})
				} else {
					n = e.mustAli(t, e.ali, aliTrade(o))
				}
				lines := withoutHeader(headerLines(n.Header), "Content-Length")
				lines = append(lines, "Host: "+e.addr)
				if chunked {
					lines = append(lines, "Transfer-Encoding: chunked")
				} else {
					lines = append(lines, fmt.Sprintf("Content-Length: %d", size))
				}
				rssBefore, peakBefore := e.memory(t)
				var res rawResult
				a := e.expectRefused(t, refusal{channel: channel, reason: "body_too_large",
					what: fmt.Sprintf("a validly signed notification padded to 50 MiB (%s)", name),
					send: func() answer {
						var body = &zeros{n: size}
						var r rawReaderFunc
						if chunked {
							r = chunk(body)
						} else {
							r = body.Read
						}
						res = e.rawExchange(requestHead("/notify/"+channel, lines), r, 30*time.Second, true)
						return answer{code: res.code, body: res.body, elapsed: res.answered, err: errIfNoAnswer(res)}
					}})
				rssAfter, peakAfter := e.memory(t)
				if a.elapsed > quickRefusal {
					t.Errorf("answer time: expected under %v, got %v", quickRefusal, a.elapsed)
				}
				if res.sent >= size {
					t.Errorf("bytes accepted: expected the server to stop reading long before 50 MiB, it took all %d", res.sent)
				}
				if peakAfter-peakBefore > maxPeakGrowthKiB {
					t.Errorf("callbackd peak RSS: expected growth under %d KiB, got %d KiB → %d KiB", maxPeakGrowthKiB, peakBefore, peakAfter)
				}
				t.Logf("evidence: %s; callbackd RSS %d KiB → %d KiB, peak %d KiB → %d KiB", res, rssBefore, rssAfter, peakBefore, peakAfter)
			})
		}
	}
}

// rawReaderFunc adapts a Read method to io.Reader.
type rawReaderFunc func(p []byte) (int, error)

func (f rawReaderFunc) Read(p []byte) (int, error) { return f(p) }

// chunk frames r in HTTP/1.1 chunked encoding (no final chunk: the body never ends on its own
// before r does).
func chunk(r *zeros) rawReaderFunc {
	var pending []byte
	done := false
	return func(p []byte) (int, error) {
		if len(pending) == 0 {
			if done {
				return 0, errEOF
			}
			buf := make([]byte, 32<<10)
			k, err := r.Read(buf)
			if k > 0 {
				pending = append([]byte(fmt.Sprintf("%x\r\n", k)), buf[:k]...)
				pending = append(pending, "\r\n"...)
			}
			if err != nil {
				pending = append(pending, "0\r\n\r\n"...)
				done = true
			}
		}
		n := copy(p, pending)
		pending = pending[n:]
		return n, nil
	}
}

// The slowloris attack: a request whose body (or headers) arrives one byte per second. The
// server's read timeouts must hold — the connection is closed within the configured timeout,
// measured here — and the genuine notifications sent meanwhile on other connections are served
// normally.
func TestSlowloris(t *testing.T) {
	e := suite
	cases := []struct {
		name    string
		head    func(n paysim.Notification) []byte
		body    func() rawReaderFunc
		timeout time.Duration
	}{
		{"body one byte per second", func(n paysim.Notification) []byte {
			lines := withoutHeader(headerLines(n.Header), "Content-Length")
			return requestHead("/notify/"+wxChannel, append(lines, "Host: "+e.addr, fmt.Sprintf("Content-Length: %d", len(n.Body))))
		}, func() rawReaderFunc { return (&trickle{n: 60, interval: time.Second}).Read }, readTimeout},
		{"headers one byte per second", func(paysim.Notification) []byte {
			return []byte("POST /notify/" + wxChannel + " HTTP/1.1\r\nHost: " + e.addr + "\r\n")
		}, func() rawReaderFunc { return (&trickle{n: 60, interval: time.Second}).Read }, readHeaderTimeout},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const attackers = 4
			victim := e.register(t, wxChannel, "slowloris-victim", 100)
			hostile := e.mustWx(t, wxPayment(victim), paysim.WeChatOptions{})
			before := e.state(t)

			results := make([]rawResult, attackers)
			var wg sync.WaitGroup
			for i := range results {
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[i] = e.rawExchange(tc.head(hostile), tc.body(), 30*time.Second, true)
				}()
			}
			// Meanwhile: genuine notifications, one every 250 ms, on other connections.
			var genuine []answer
			var orders []order
			deadline := time.Now().Add(tc.timeout + time.Second)
			for time.Now().Before(deadline) {
				ch := []string{wxChannel, aliChannel}[len(orders)%2]
				o := e.register(t, ch, "slowloris-genuine", 100+int64(len(orders)))
				var n paysim.Notification
				if ch == wxChannel {
					n = e.mustWx(t, wxPayment(o), paysim.WeChatOptions{})
				} else {
					n = e.mustAli(t, e.ali, aliTrade(o))
				}
				genuine = append(genuine, e.send(ch, n))
				orders = append(orders, o)
				time.Sleep(250 * time.Millisecond)
			}
			wg.Wait()

			var worst time.Duration
			for i, r := range results {
				worst = max(worst, r.closed)
				if r.closed > tc.timeout+1500*time.Millisecond {
					t.Errorf("attacker %d: expected the connection closed within the %v timeout (+1.5s), got %s", i, tc.timeout, r)
				}
				if r.code != 0 && r.code < 400 {
					t.Errorf("attacker %d: expected no answer or a failure, got %s", i, r)
				}
			}
			var slowest time.Duration
			for i, a := range genuine {
				slowest = max(slowest, a.elapsed)
				if !isSuccess(orders[i].channel, a) {
					t.Errorf("genuine notification %d (%s) during the attack: expected success, got %s", i, orders[i].channel, a)
				}
				if a.elapsed > providerDeadline {
					t.Errorf("genuine notification %d during the attack: expected an answer within the provider's %v, got %v", i, providerDeadline, a.elapsed)
				}
			}
			if got := e.order(t, victim.no); got.Status != "PENDING" || got.Receipts != 0 {
				t.Errorf("the trickled notification's order: expected PENDING without receipt, got %+v", got)
			}
			after := e.state(t)
			if after.Paid-before.Paid != int64(len(orders)) || after.Ledger-before.Ledger != int64(len(orders)) {
				t.Errorf("database: expected exactly %d more paid orders and ledger entries (the genuine ones)\n  before %s\n  after  %s", len(orders), before, after)
			}
			e.alive(t)
			t.Logf("%d connections trickling 1 byte/s (%s): first %s; all closed within %v (timeout %v); meanwhile %d genuine notifications all succeeded, slowest %v",
				attackers, tc.name, results[0], worst.Round(time.Millisecond), tc.timeout, len(genuine), slowest.Round(time.Millisecond))
		})
	}
}

// Slowloris connections beyond the in-flight limit. callbackd took its in-flight slot before
// reading the body, so maxInFlight connections trickling bodies held every slot until the read
// timeout and every genuine notification meanwhile was shed as "overloaded" (found here: 36 such
// connections at maxInFlight=32 shed every notification for the whole 3 s read timeout; fixed
// in callbackd/server by reading the body first). Now the genuine notifications are served
// throughout, and the trickling connections are closed at the read timeout.
func TestSlowlorisBeyondInFlightLimit(t *testing.T) {
	e := suite
	attackers := maxInFlight + 8
	victim := e.register(t, wxChannel, "slowloris-limit", 100)
	hostile := e.mustWx(t, wxPayment(victim), paysim.WeChatOptions{})
	lines := withoutHeader(headerLines(hostile.Header), "Content-Length")
	head := requestHead("/notify/"+wxChannel, append(lines, "Host: "+e.addr, fmt.Sprintf("Content-Length: %d", len(hostile.Body))))
	before, mBefore := e.state(t), e.scrape(t)

	start := time.Now()
	results := make([]rawResult, attackers)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = e.rawExchange(head, &trickle{n: 60, interval: time.Second}, 30*time.Second, true)
		}()
	}
	time.Sleep(500 * time.Millisecond)
	var genuine []answer
	var orders []order
	for time.Since(start) < readTimeout {
		o := e.register(t, aliChannel, "slowloris-limit-genuine", 100+int64(len(orders)))
		genuine = append(genuine, e.send(aliChannel, e.mustAli(t, e.ali, aliTrade(o))))
		orders = append(orders, o)
		time.Sleep(200 * time.Millisecond)
	}
	wg.Wait()

	var slowest, worst time.Duration
	for i, a := range genuine {
		slowest = max(slowest, a.elapsed)
		if !isSuccess(aliChannel, a) {
			t.Errorf("genuine notification %d during the attack: expected \"success\", got %s", i, a)
		}
	}
	for i, r := range results {
		worst = max(worst, r.closed)
		if r.closed > readTimeout+1500*time.Millisecond {
			t.Errorf("trickling connection %d: expected closed within the %v read timeout (+1.5s), got %s", i, readTimeout, r)
		}
	}
	if got := e.order(t, victim.no); got.Status != "PENDING" || got.Receipts != 0 {
		t.Errorf("the trickled notification's order: expected PENDING without receipt, got %+v", got)
	}
	after := e.state(t)
	if after.Paid-before.Paid != int64(len(orders)) || after.Ledger-before.Ledger != int64(len(orders)) {
		t.Errorf("database: expected exactly %d more paid orders and ledger entries (the genuine ones)\n  before %s\n  after  %s", len(orders), before, after)
	}
	over := e.scrape(t).Sum("callbackd_overload_rejections_total", nil) - mBefore.Sum("callbackd_overload_rejections_total", nil)
	if over != 0 {
		t.Errorf("callbackd_overload_rejections_total: expected +0 (trickling bodies hold no slot), got +%g", over)
	}
	e.alive(t)
	t.Logf("%d connections trickling bodies 1 byte/s against maxInFlight=%d: %d genuine notifications meanwhile, all succeeded, slowest %v; overload rejections +%g; trickling connections all closed by %v (first: %s)",
		attackers, maxInFlight, len(genuine), slowest.Round(time.Millisecond), over, worst.Round(time.Millisecond), results[0])
}
