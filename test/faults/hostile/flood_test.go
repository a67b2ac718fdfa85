package hostile

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/internal/paysim"
	"github.com/seed-1cff2221/callback-platform/internal/promtext"
)

// 10,000 forged callbacks per second for a few seconds, mixed with genuine ones, loopback only.
// The forgeries are real-format notifications for the very orders being paid (other
// transaction ids and amounts), signed with an attacker's RSA key under WeChat Pay's real key
// serial, with garbage signatures, and Alipay forms signed with the attacker's key. The genuine
// notifications, sent at the same time with a provider's retries, must all take effect exactly
// once; the forgeries must change nothing; every forgery that reached verification must be
// counted as a signature failure; the rest were shed by the in-flight limit with the retryable
// answer.
func TestForgedFlood(t *testing.T) {
	e := suite
	const (
		targetRate = 10000
		duration   = 3 * time.Second
		workers    = 32
		// pipelineDepth is how many requests a connection sends ahead of the answers.
		pipelineDepth = 32
		genuineN      = 40
		// minForged is the least the flood must send for the test to mean anything.
		minForged = 5000
	)

	orders := make([]order, genuineN)
	for i := range orders {
		orders[i] = e.register(t, []string{wxChannel, aliChannel}[i%2], "flood", 3000+int64(i))
	}
	attacker, err := paysim.NewRSAKey()
	if err != nil {
		t.Fatal(err)
	}
	type forgery struct {
		channel string
		n       paysim.Notification
	}
	var forged []forgery
	for i := 0; i < 64; i++ {
		o := orders[i%genuineN]
		o.txn, o.amount = "42000"+randomDigits(23), 1
		if o.channel == wxChannel {
			fake := &paysim.WeChatPay{APIv3Key: e.wx.APIv3Key, Serial: e.wx.Serial, Key: attacker}
			n, err := fake.Payment(wxPayment(o), paysim.WeChatOptions{})
			if err != nil {
				t.Fatal(err)
			}
			forged = append(forged, forgery{wxChannel, n})
			garbage := e.mustWx(t, wxPayment(o), paysim.WeChatOptions{})
			garbage.Header.Set("Wechatpay-Signature", "Zm9yZ2VkIHNpZ25hdHVyZQ==")
			forged = append(forged, forgery{wxChannel, garbage})
		} else {
			fake := &paysim.Alipay{AppID: aliApp, Key: attacker}
			forged = append(forged, forgery{aliChannel, e.mustAli(t, fake, aliTrade(o))})
		}
	}

	// Each forgery is sent as prepared bytes on keep-alive loopback connections, one per worker,
	// which costs the client far less CPU than net/http does (the machine is shared).
	wire := make([][]byte, len(forged))
	for i, f := range forged {
		lines := withoutHeader(headerLines(f.n.Header), "Content-Length")
		lines = append(lines, "Host: "+e.addr, fmt.Sprintf("Content-Length: %d", len(f.n.Body)))
		wire[i] = append(requestHead("/notify/"+f.channel, lines), f.n.Body...)
	}

	before, mBefore := e.state(t), e.scrape(t)
	var (
		sent, rejected, shed, succeeded, other, transport, backlog atomic.Int64
		perChannelRejected                                         [2]atomic.Int64
	)
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	jobs := make(chan int, workers*pipelineDepth)
	classify := func(i int, resp *http.Response) {
		switch {
		case resp.StatusCode == http.StatusBadRequest:
			rejected.Add(1)
			if forged[i%len(forged)].channel == wxChannel {
				perChannelRejected[0].Add(1)
			} else {
				perChannelRejected[1].Add(1)
			}
		case resp.StatusCode == http.StatusInternalServerError:
			shed.Add(1)
		case resp.StatusCode < 300:
			succeeded.Add(1)
		default:
			other.Add(1)
		}
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One connection per worker, HTTP/1.1-pipelined: a writer sends up to
			// pipelineDepth requests ahead, a reader takes the answers in order.
			conn, err := net.DialTimeout("tcp", e.addr, 5*time.Second)
			if err != nil {
				transport.Add(1)
				return
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(duration + 15*time.Second))
			inflight := make(chan int, pipelineDepth)
			readerDone := make(chan struct{})
			go func() {
				defer close(readerDone)
				br := bufio.NewReader(conn)
				for i := range inflight {
					resp, err := http.ReadResponse(br, nil)
					if err == nil {
						_, err = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					if err != nil {
						transport.Add(1 + int64(len(inflight)))
						conn.Close()
						for range inflight {
						}
						return
					}
					classify(i, resp)
				}
			}()
			defer func() {
				close(inflight)
				<-readerDone
			}()
			for {
				var i int
				select {
				case <-ctx.Done():
					return
				case i = <-jobs:
				}
				select {
				case inflight <- i:
				case <-readerDone:
					return
				}
				sent.Add(1)
				if _, err := conn.Write(wire[i%len(wire)]); err != nil {
					return
				}
			}
		}()
	}
	// The pacer: 10 forgeries every millisecond; what the workers cannot take is counted, not sent.
	start := time.Now()
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		i := 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			due := int(time.Since(start)*targetRate/time.Second) - i
			for ; due > 0; due-- {
				select {
				case jobs <- i:
				default:
					backlog.Add(1)
				}
				i++
			}
		}
	}()

	// The genuine notifications, started one every 75 ms during the flood, each resent (fresh
	// signature) until it succeeds, as the provider would.
	type outcome struct {
		attempts int
		ok       bool
		took     time.Duration
	}
	outcomes := make([]outcome, genuineN)
	var gw sync.WaitGroup
	for i := range orders {
		gw.Add(1)
		go func() {
			defer gw.Done()
			time.Sleep(time.Duration(i) * 75 * time.Millisecond)
			t0 := time.Now()
			for outcomes[i].attempts < 200 && time.Since(t0) < 30*time.Second {
				outcomes[i].attempts++
				var n paysim.Notification
				var err error
				if orders[i].channel == wxChannel {
					n, err = e.wx.Payment(wxPayment(orders[i]), paysim.WeChatOptions{})
				} else {
					n, err = e.ali.Trade(aliTrade(orders[i]), paysim.AlipayOptions{})
				}
				if err != nil {
					return
				}
				if a := e.send(orders[i].channel, n); isSuccess(orders[i].channel, a) {
					outcomes[i].ok, outcomes[i].took = true, time.Since(t0)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	floodTook := time.Since(start)
	gw.Wait()

	mAfter := e.scrape(t)
	after := e.state(t)
	e.alive(t)

	var attempts, failedGenuine int
	var slowest time.Duration
	for i, o := range outcomes {
		attempts += o.attempts
		slowest = max(slowest, o.took)
		if !o.ok {
			failedGenuine++
			t.Errorf("genuine notification of %s: expected success, none after %d attempts", orders[i].no, o.attempts)
		}
		if got := e.order(t, orders[i].no); got.Status != "PAID" || got.Ledger != 1 || got.Receipts != 1 || got.Outbox != 1 || got.Excps != 0 {
			t.Errorf("order %s: expected PAID exactly once (1 receipt, 1 ledger entry, 1 outbox event, no exception), got %+v", orders[i].no, got)
		}
	}
	want := before
	want.Pending -= genuineN
	want.Paid += genuineN
	want.Receipts += genuineN
	want.Ledger += genuineN
	want.Outbox += genuineN
	want.Fingerprint = after.Fingerprint
	if after != want {
		t.Errorf("database: expected only the %d genuine payments added\n  expected %s\n  got      %s", genuineN, want, after)
	}
	if succeeded.Load() != 0 || other.Load() != 0 {
		t.Errorf("forged answers: expected only 400 (refused) or 500 (shed), got %d successes and %d others", succeeded.Load(), other.Load())
	}
	// Every forgery that reached verification is counted as a signature failure.
	for ci, ch := range []string{wxChannel, aliChannel} {
		badSig := promtext.Delta(anomalies(mBefore, ch), anomalies(mAfter, ch))["bad_signature"]
		if int64(badSig) != perChannelRejected[ci].Load() {
			t.Errorf("%s: callbackd_anomalies_total{reason=bad_signature}: expected +%d (the forgeries refused), got +%g", ch, perChannelRejected[ci].Load(), badSig)
		}
		verif := mAfter.Sum("callbackd_key_verifications_total", map[string]string{"channel": ch, "result": "bad_signature"}) -
			mBefore.Sum("callbackd_key_verifications_total", map[string]string{"channel": ch, "result": "bad_signature"})
		if int64(verif) != perChannelRejected[ci].Load() {
			t.Errorf("%s: callbackd_key_verifications_total{result=bad_signature}: expected +%d, got +%g", ch, perChannelRejected[ci].Load(), verif)
		}
	}
	// The rate reached depends on the machine (2 shared cores here); the flood must at least be
	// a flood.
	if sent.Load() < minForged {
		t.Errorf("forgeries sent: expected at least %d in %v, got %d", minForged, duration, sent.Load())
	}
	overload := mAfter.Sum("callbackd_overload_rejections_total", nil) - mBefore.Sum("callbackd_overload_rejections_total", nil)
	rate := float64(sent.Load()) / floodTook.Seconds()
	t.Logf("flood: %d forgeries sent in %v (%.0f/s; target %d/s, %d not sent as the client fell behind), %d workers: "+
		"refused 400=%d (wx %d, ali %d), shed 500=%d, transport errors=%d, successes=%d",
		sent.Load(), floodTook.Round(time.Millisecond), rate, targetRate, backlog.Load(), workers,
		rejected.Load(), perChannelRejected[0].Load(), perChannelRejected[1].Load(), shed.Load(), transport.Load(), succeeded.Load())
	t.Logf("genuine: %d notifications, %d attempts in all (resent after shedding), %d failed, slowest success after %v; overload rejections +%g",
		genuineN, attempts, failedGenuine, slowest.Round(time.Millisecond), overload)
	t.Logf("signature failures counted: wx %s, ali %s; database %s → %s",
		promtext.Format(promtext.Delta(anomalies(mBefore, wxChannel), anomalies(mAfter, wxChannel))),
		promtext.Format(promtext.Delta(anomalies(mBefore, aliChannel), anomalies(mAfter, aliChannel))), before, after)
}
