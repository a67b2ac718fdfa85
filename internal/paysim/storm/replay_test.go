package storm_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/storm"
)

// scriptedServer answers each order's attempts from a script (status, body), the last entry
// repeating, and records when each attempt arrived. The order is told apart by the body's
// out_trade_no through the script's match function.
type scriptedServer struct {
	*httptest.Server
	mu       sync.Mutex
	arrivals map[string][]time.Time
}

type answer struct {
	status int
	body   string
}

func newScriptedServer(t *testing.T, orderOf func(*http.Request) string, scripts map[string][]answer) *scriptedServer {
	t.Helper()
	s := &scriptedServer{arrivals: map[string][]time.Time{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		order := orderOf(r)
		s.mu.Lock()
		s.arrivals[order] = append(s.arrivals[order], time.Now())
		n := len(s.arrivals[order])
		s.mu.Unlock()
		script := scripts[order]
		if len(script) == 0 {
			t.Errorf("unexpected order %q", order)
			w.WriteHeader(http.StatusTeapot)
			return
		}
		a := script[min(n, len(script))-1]
		w.WriteHeader(a.status)
		_, _ = w.Write([]byte(a.body))
	}))
	t.Cleanup(s.Close)
	return s
}

func formOrder(r *http.Request) string {
	if err := r.ParseForm(); err != nil {
		return ""
	}
	return r.PostForm.Get("out_trade_no")
}

// TestReplayRetriesOnlyWhenTheAnswerSaysSo replays Alipay's schedule against scripted answers:
// Alipay resends on anything but the exact body "success" (a 200 "fail", a 500, a 400, a
// "success\n"), stops at the first "success", and gives up after the last interval.
func TestReplayRetriesOnlyWhenTheAnswerSaysSo(t *testing.T) {
	set := keySet(t, callbackdv1alpha1.ProviderAlipay)
	ok := answer{200, "success"}
	scripts := map[string][]answer{
		"A-first":      {ok},
		"A-after-fail": {{200, "fail"}, {500, "fail"}, ok},
		"A-reject":     {{400, "fail"}, ok},
		"A-newline":    {{200, "success\n"}, ok},
		"A-never":      {{500, "fail"}},
	}
	srv := newScriptedServer(t, formOrder, scripts)
	sender := newSender(t, set, srv.URL+"/notify/ali")

	schedule := []time.Duration{4 * time.Minute, 10 * time.Minute, 10 * time.Minute, time.Hour}
	const compress = 12000 // 4m → 20ms, 1h → 300ms
	var trades []storm.Trade
	for _, no := range []string{"A-first", "A-after-fail", "A-reject", "A-newline", "A-never"} {
		trades = append(trades, storm.Trade{OrderNo: no, Amount: 100, Currency: "CNY", TransactionID: "T" + no, PaidAt: paidAt})
	}
	res, err := sender.Replay(context.Background(), storm.ReplayConfig{Trades: trades, Schedule: schedule, Compress: compress, Concurrency: 5})
	if err != nil {
		t.Fatal(err)
	}

	wantAttempts := map[string]int{"A-first": 1, "A-after-fail": 3, "A-reject": 2, "A-newline": 2, "A-never": 5}
	for _, tr := range res.Trades {
		if got := len(srv.arrivals[tr.OrderNo]); got != wantAttempts[tr.OrderNo] || len(tr.Outcomes) != got {
			t.Errorf("%s: expected %d attempts, server saw %d, replay recorded %v", tr.OrderNo, wantAttempts[tr.OrderNo], got, tr.Outcomes)
		}
		if wantAck := tr.OrderNo != "A-never"; tr.Acknowledged != wantAck {
			t.Errorf("%s: expected acknowledged=%v, got %v", tr.OrderNo, wantAck, tr.Acknowledged)
		}
		// The waits follow the schedule, compressed, and the server saw them.
		arr := srv.arrivals[tr.OrderNo]
		for i := 1; i < len(arr); i++ {
			want := time.Duration(float64(schedule[i-1]) / compress)
			if tr.Waits[i-1] != want {
				t.Errorf("%s: wait %d: expected %v, got %v", tr.OrderNo, i, want, tr.Waits[i-1])
			}
			if gap := arr[i].Sub(arr[i-1]); gap < want {
				t.Errorf("%s: resend %d came %v after the previous attempt, before the scheduled %v", tr.OrderNo, i, gap, want)
			}
		}
	}
	if got := res.Trades[2].Outcomes; !slices.Equal(got, []storm.Outcome{storm.OutcomeReject, storm.OutcomeSuccess}) {
		t.Errorf("A-reject: expected [reject success], got %v", got)
	}
	if res.Acknowledged != 4 || res.GaveUp != 1 {
		t.Errorf("expected 4 acknowledged and 1 given up, got %d and %d", res.Acknowledged, res.GaveUp)
	}
	wantHist := map[int]int{1: 1, 2: 2, 3: 1}
	for k, v := range wantHist {
		if res.AttemptsToAcknowledge[k] != v {
			t.Errorf("attempts to acknowledge: expected %v, got %v", wantHist, res.AttemptsToAcknowledge)
			break
		}
	}
	if res.Summary.Sent != 13 || res.Summary.Answers.Success != 4 {
		t.Errorf("expected 13 attempts with 4 successes, got %+v", res.Summary)
	}
}

// TestReplayWeChatPayStatusDecides: WeChat Pay reads only the status: a 200 carrying FAIL is
// an acknowledgement, a 202 is not.
func TestReplayWeChatPayStatusDecides(t *testing.T) {
	set := keySet(t, callbackdv1alpha1.ProviderWeChatPay)
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		attempt := n
		mu.Unlock()
		if attempt == 1 {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"code":"FAIL","message":"ignored by WeChat Pay"}`))
	}))
	defer srv.Close()
	res, err := newSender(t, set, srv.URL).Replay(context.Background(), storm.ReplayConfig{
		Trades:   []storm.Trade{{OrderNo: "W1", Amount: 1, Currency: "CNY", TransactionID: "T", PaidAt: paidAt}},
		Schedule: []time.Duration{15 * time.Second, 15 * time.Second}, Compress: 1000, Concurrency: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Trades[0].Outcomes; !slices.Equal(got, []storm.Outcome{storm.OutcomeRetry, storm.OutcomeSuccess}) {
		t.Fatalf("expected [retry success], got %v", got)
	}
}

// TestReplayStopsOnCancel: cancelling the context ends a replay in its wait.
func TestReplayStopsOnCancel(t *testing.T) {
	set := keySet(t, callbackdv1alpha1.ProviderStandardWebhooks)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) }))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := newSender(t, set, srv.URL).Replay(ctx, storm.ReplayConfig{
		Trades:   storm.NewTrades("C", 2, "CNY", paidAt),
		Schedule: []time.Duration{time.Hour}, Compress: 1, Concurrency: 2,
	})
	if err == nil {
		t.Fatal("expected the context's error")
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Fatalf("expected the replay to stop soon after the cancel, it took %v", elapsed)
	}
}
