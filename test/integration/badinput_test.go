package integration_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/internal/promtext"
)

// Acceptance 5 (issue 3): bad input gets the right failure answer, writes nothing (row counts
// before and after are equal) but the anomaly count on /metrics, and leaves a log line that
// carries no secret. Afterwards a correct notification for the same order still takes effect,
// which proves not even a receipt was written for the refused ones.
func TestBadInputIsRefusedAndLeavesNoTrace(t *testing.T) {
	const bodyLimit = 16 << 10
	s := newStack(t, sharedPostgres(t), "badinput", stackOptions{maxBodyBytes: bodyLimit})
	a := s.start(t, "a")

	ps := newPayments(t, "bad", 2)
	good, foreign := ps[0], ps[1]
	s.registerOrder(t, a, good, merchantID)
	s.registerOrder(t, a, foreign, "acct_someone_else") // registered for another merchant

	forger := newWebhookSigner(t)
	signed := func(body []byte) (http.Header, []byte) {
		return s.signer.headers("msg_"+randomHex(t, 8), time.Now(), body), body
	}
	withBody := func(p payment, mutate func(map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(p.body(), &m); err != nil {
			t.Fatalf("decode test body: %v", err)
		}
		mutate(m["data"].(map[string]any))
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("encode test body: %v", err)
		}
		return b
	}
	unknown := payment{OrderNo: "never-registered-" + randomHex(t, 4), Amount: 100, Currency: currency, TxnID: "txn_unknown"}

	cases := []struct {
		name    string
		request func() (http.Header, []byte)
	}{
		{"wrong signature", func() (http.Header, []byte) {
			b := good.body()
			return forger.headers("msg_forged", time.Now(), b), b
		}},
		{"stale timestamp", func() (http.Header, []byte) {
			b := good.body()
			return s.signer.headers("msg_stale", time.Now().Add(-10*time.Minute), b), b
		}},
		{"timestamp from the future", func() (http.Header, []byte) {
			b := good.body()
			return s.signer.headers("msg_future", time.Now().Add(10*time.Minute), b), b
		}},
		{"missing signature headers", func() (http.Header, []byte) {
			h := http.Header{}
			h.Set("Content-Type", "application/json")
			return h, good.body()
		}},
		{"amount mismatch", func() (http.Header, []byte) {
			return signed(withBody(good, func(d map[string]any) { d["amount"] = good.Amount + 1000 }))
		}},
		{"currency mismatch", func() (http.Header, []byte) {
			return signed(withBody(good, func(d map[string]any) { d["currency"] = "USD" }))
		}},
		{"unknown order", func() (http.Header, []byte) { return signed(unknown.body()) }},
		{"merchant mismatch", func() (http.Header, []byte) { return signed(foreign.body()) }},
		{"malformed body", func() (http.Header, []byte) { return signed([]byte(`{"type":"payment.succeeded","data":{"order_no":`)) }},
		{"amount as a decimal", func() (http.Header, []byte) {
			return signed(withBody(good, func(d map[string]any) { d["amount"] = 19.99 }))
		}},
		{"oversized body", func() (http.Header, []byte) {
			return signed(withBody(good, func(d map[string]any) { d["padding"] = strings.Repeat("x", 2*bodyLimit) }))
		}},
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rowsBefore := s.counts(t)
			metricsBefore := s.scrape(t, a)
			logBefore := len(a.log(t))

			h, body := tc.request()
			ans := s.notifyRaw(context.Background(), a, body, h)
			if ans.verdict != rejected {
				t.Errorf("answer: expected a refusal (4xx), got %d %s (%s)", ans.code, ans.verdict, s.redact(ans.body))
			}

			if rowsAfter := s.counts(t); rowsAfter != rowsBefore {
				t.Errorf("rows: expected nothing written\n  before %s\n  after  %s", rowsBefore, rowsAfter)
			}
			metricsAfter := s.scrape(t, a)
			anomalies := promtext.Delta(metricsBefore.ByLabel("callbackd_anomalies_total", "reason", nil), metricsAfter.ByLabel("callbackd_anomalies_total", "reason", nil))
			var total float64
			reason := ""
			for r, d := range anomalies {
				total += d
				reason = r
			}
			if total != 1 {
				t.Errorf("callbackd_anomalies_total: expected +1, got %s", promtext.Format(anomalies))
			}

			// The log line can be written just after the answer: give it a moment.
			var newLog string
			for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if newLog = a.log(t)[logBefore:]; reason == "" || strings.Contains(newLog, reason) {
					break
				}
			}
			switch {
			case strings.TrimSpace(newLog) == "":
				t.Errorf("callbackd log: expected a line about the refusal, got nothing")
			case reason != "" && !strings.Contains(newLog, reason):
				t.Errorf("callbackd log: expected a line naming the anomaly reason %q, got:\n%s", reason, s.redact(newLog))
			}
			for _, f := range s.signer.secretFragments() {
				if strings.Contains(newLog, f) {
					t.Errorf("callbackd log carries the webhook secret (a fragment of %d characters)", len(f))
				}
			}
			t.Logf("answer %d, anomalies %s, log: %s", ans.code, promtext.Format(anomalies), firstLine(s.redact(newLog)))
		})
	}

	t.Run("a correct notification still takes effect afterwards", func(t *testing.T) {
		if d := s.deliver(context.Background(), a, good, "msg_good", 20); !d.succeeded {
			t.Fatalf("correct notification for %s: expected success, got none after %d attempts (%d refusals)", good.OrderNo, d.attempts, d.rejects)
		}
		got := s.counts(t)
		want := dbCounts{Orders: 2, Pending: 1, Paid: 1, Receipts: 1, Ledger: 1, Outbox: 1}
		if got != want {
			t.Errorf("database: expected %s, got %s", want, got)
		}
	})

	t.Run("the whole log carries no secret", func(t *testing.T) {
		log := a.log(t)
		for _, f := range append(s.signer.secretFragments(), forger.secretFragments()...) {
			if strings.Contains(log, f) {
				t.Errorf("callbackd log carries a webhook secret (a fragment of %d characters)", len(f))
			}
		}
		if strings.Contains(log, s.apiToken) {
			t.Errorf("callbackd log carries the merchant API token")
		}
	})
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}
