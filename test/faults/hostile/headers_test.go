package hostile

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/internal/paysim"
)

// Header injection, sent as raw bytes (Go's HTTP client refuses to put most of these on the
// wire): CR, LF and NUL inside header values, an obs-fold continuation line, duplicate signature
// headers (a valid one and another, in either order: a proxy and callbackd could each believe a
// different one), duplicate Content-Length, and oversized headers. Every request carries an
// otherwise genuine, validly signed WeChat Pay notification of a registered order, so an
// injection that got through would pay it; each is refused and writes nothing.
func TestHeaderInjection(t *testing.T) {
	e := suite
	stale := fmt.Sprint(time.Now().Add(-time.Hour).Unix())
	cases := []struct {
		name string
		// edit changes the header lines of the genuine request (Host and Content-Length included).
		edit      func(lines []string, n paysim.Notification) []string
		reason    string
		anyReason bool
		status    int // the exact status when the HTTP server itself refuses; 0: any 4xx
	}{
		{"CR inside Wechatpay-Nonce", func(l []string, n paysim.Notification) []string {
			return replaceHeader(l, "Wechatpay-Nonce", n.Header.Get("Wechatpay-Nonce")+"\rX-Injected: 1")
		}, "", false, 400},
		{"LF inside Wechatpay-Nonce, injecting a second Wechatpay-Signature", func(l []string, n paysim.Notification) []string {
			return replaceHeader(l, "Wechatpay-Nonce", n.Header.Get("Wechatpay-Nonce")+"\nWechatpay-Signature: AAAA")
		}, "", true, 0},
		{"NUL inside Wechatpay-Signature", func(l []string, n paysim.Notification) []string {
			return replaceHeader(l, "Wechatpay-Signature", n.Header.Get("Wechatpay-Signature")+"\x00")
		}, "", false, 400},
		{"obs-fold: Wechatpay-Signature continued on a second line", func(l []string, n paysim.Notification) []string {
			sig := n.Header.Get("Wechatpay-Signature")
			return replaceHeader(l, "Wechatpay-Signature", sig[:20]+"\r\n "+sig[20:])
		}, "", true, 0},
		{"two Wechatpay-Signature headers, the valid one first", func(l []string, _ paysim.Notification) []string {
			return append(l, "Wechatpay-Signature: "+strings.Repeat("A", 344))
		}, "malformed", false, 0},
		{"two Wechatpay-Signature headers, the valid one last", func(l []string, n paysim.Notification) []string {
			return append(replaceHeader(l, "Wechatpay-Signature", strings.Repeat("A", 344)), "Wechatpay-Signature: "+n.Header.Get("Wechatpay-Signature"))
		}, "malformed", false, 0},
		{"two Wechatpay-Timestamp headers (the signed one and a stale one)", func(l []string, _ paysim.Notification) []string {
			return append(l, "Wechatpay-Timestamp: "+stale)
		}, "malformed", false, 0},
		{"two Wechatpay-Serial headers", func(l []string, n paysim.Notification) []string {
			return append(l, "Wechatpay-Serial: "+n.Header.Get("Wechatpay-Serial"))
		}, "malformed", false, 0},
		{"two Wechatpay-Nonce headers", func(l []string, _ paysim.Notification) []string {
			return append(l, "Wechatpay-Nonce: "+randomHex(16))
		}, "malformed", false, 0},
		{"two different Content-Length headers", func(l []string, n paysim.Notification) []string {
			return append(l, fmt.Sprintf("Content-Length: %d", len(n.Body)-1))
		}, "", false, 400},
		{"1 MiB of extra headers", func(l []string, _ paysim.Notification) []string {
			for i := 0; i < 1024; i++ {
				l = append(l, fmt.Sprintf("X-Pad-%04d: %s", i, strings.Repeat("p", 1000)))
			}
			return l
		}, "", false, 431},
		{"a 100 KiB Wechatpay-Signature value", func(l []string, _ paysim.Notification) []string {
			return replaceHeader(l, "Wechatpay-Signature", strings.Repeat("A", 100<<10))
		}, "", false, 431},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := e.register(t, wxChannel, "headers", 2100)
			n := e.mustWx(t, wxPayment(o), paysim.WeChatOptions{})
			lines := withoutHeader(headerLines(n.Header), "Content-Length")
			lines = append(lines, "Host: "+e.addr, fmt.Sprintf("Content-Length: %d", len(n.Body)))
			lines = tc.edit(lines, n)
			head := requestHead("/notify/"+wxChannel, lines)
			a := e.expectRefused(t, refusal{channel: wxChannel, what: fmt.Sprintf("%s (%d header bytes)", tc.name, len(head)),
				reason: tc.reason, anyReason: tc.anyReason,
				send: func() answer {
					r := e.rawExchange(head, bytes.NewReader(n.Body), 10*time.Second, false)
					return answer{code: r.code, body: r.body, elapsed: r.answered, err: errIfNoAnswer(r)}
				}})
			if tc.status != 0 && a.code != tc.status {
				t.Errorf("status: expected %d, got %s", tc.status, a)
			}
			if got := e.order(t, o.no); got.Status != "PENDING" || got.Receipts != 0 {
				t.Errorf("order: expected PENDING without receipt, got %+v", got)
			}
		})
	}

	// The control: the same raw request without the injection is applied, so each refusal above
	// is about the injected bytes.
	t.Run("control: the genuine raw request is applied", func(t *testing.T) {
		o := e.register(t, wxChannel, "headers-ok", 2100)
		n := e.mustWx(t, wxPayment(o), paysim.WeChatOptions{})
		lines := withoutHeader(headerLines(n.Header), "Content-Length")
		lines = append(lines, "Host: "+e.addr, fmt.Sprintf("Content-Length: %d", len(n.Body)))
		r := e.rawExchange(requestHead("/notify/"+wxChannel, lines), bytes.NewReader(n.Body), 10*time.Second, false)
		if r.code != 204 && r.code != 200 {
			t.Fatalf("genuine raw request: expected 204, got %s", r)
		}
		if got := e.order(t, o.no); got.Status != "PAID" {
			t.Errorf("order: expected PAID, got %+v", got)
		}
	})
}

// replaceHeader sets the value of one header line (case-insensitive name) to value, verbatim.
func replaceHeader(lines []string, name, value string) []string {
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		if strings.HasPrefix(strings.ToLower(l), strings.ToLower(name)+":") {
			l = name + ": " + value
		}
		out = append(out, l)
	}
	return out
}
