package hostile

import (
	"bytes"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/text/encoding/simplifiedchinese"

	"github.com/seed-1cff2221/callback-platform/internal/paysim"
)

// JSON with duplicate keys, validly signed by the provider: parsers disagree about which of two
// equal keys counts (Go's encoding/json takes the last and matches keys case-insensitively,
// others take the first), so a body with two "resource" or two "out_trade_no" means different
// things to different readers of the same signed bytes. The adapters must refuse it; Alipay's
// form with a field twice likewise. Two registered orders are involved in each case, so any
// reading that pays either of them shows in the database.
func TestDuplicateKeys(t *testing.T) {
	e := suite
	cases := []struct {
		name    string
		channel string
		build   func(a, b order) paysim.Notification
	}{
		{"WeChat Pay envelope with two resource members", wxChannel, func(a, b order) paysim.Notification {
			return e.wxSigned(t, wxEnvelope("支付成功", `"resource":`+e.wxResource(t, []byte(wxPlain(t, a)))+
				`,"resource":`+e.wxResource(t, []byte(wxPlain(t, b)))))
		}},
		{"WeChat Pay envelope with two event_type members", wxChannel, func(a, _ order) paysim.Notification {
			return e.wxSigned(t, wxEnvelope("支付成功", `"event_type":"TRANSACTION.SUCCESS","resource":`+e.wxResource(t, []byte(wxPlain(t, a)))))
		}},
		{"WeChat Pay envelope with resource and Resource (case variants)", wxChannel, func(a, b order) paysim.Notification {
			return e.wxSigned(t, wxEnvelope("支付成功", `"resource":`+e.wxResource(t, []byte(wxPlain(t, a)))+
				`,"Resource":`+e.wxResource(t, []byte(wxPlain(t, b)))))
		}},
		{"WeChat Pay plaintext with two out_trade_no", wxChannel, func(a, b order) paysim.Notification {
			plain := strings.Replace(wxPlain(t, b), `{`, `{"out_trade_no":"`+a.no+`",`, 1)
			return e.wxSigned(t, wxEnvelope("支付成功", `"resource":`+e.wxResource(t, []byte(plain))))
		}},
		{"WeChat Pay plaintext with out_trade_no and an escaped out\\u005ftrade_no", wxChannel, func(a, b order) paysim.Notification {
			// The first key is written with a JSON escape: equal to out_trade_no once unescaped.
			plain := strings.Replace(wxPlain(t, a), `{`, `{"out\u005ftrade_no":"`+b.no+`",`, 1)
			return e.wxSigned(t, wxEnvelope("支付成功", `"resource":`+e.wxResource(t, []byte(plain))))
		}},
		{"WeChat Pay plaintext with two amount objects", wxChannel, func(a, _ order) paysim.Notification {
			plain := strings.Replace(wxPlain(t, a), `{`, `{"amount":{"total":1,"currency":"CNY"},`, 1)
			return e.wxSigned(t, wxEnvelope("支付成功", `"resource":`+e.wxResource(t, []byte(plain))))
		}},
		{"Alipay form with two out_trade_no", aliChannel, func(a, b order) paysim.Notification {
			return e.aliSigned(t, aliFields(a), "&out_trade_no="+url.QueryEscape(b.no))
		}},
		{"Alipay form with two total_amount", aliChannel, func(a, _ order) paysim.Notification {
			return e.aliSigned(t, aliFields(a), "&total_amount=0.01")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := e.register(t, tc.channel, "dupkey-a", 1500)
			b := e.register(t, tc.channel, "dupkey-b", 1500)
			n := tc.build(a, b)
			e.expectRefused(t, refusal{channel: tc.channel, what: tc.name + " (validly signed)",
				send: func() answer { return e.send(tc.channel, n) }, reason: "malformed"})
			for _, o := range []order{a, b} {
				if got := e.order(t, o.no); got.Status != "PENDING" || got.Receipts != 0 {
					t.Errorf("order %s: expected PENDING without receipt, got %+v", o.no, got)
				}
			}
		})
	}
}

// Deeply nested JSON: 100,000 levels (larger than the body limit, refused before parsing), and
// as deep as fits under the limit, validly signed, in the envelope and inside the encrypted
// plaintext. Refused without a stack blow-up, quickly, and callbackd stays up and bounded.
func TestDeeplyNestedJSON(t *testing.T) {
	e := suite
	nest := func(levels int) string { return strings.Repeat(`[`, levels) + strings.Repeat(`]`, levels) }
	nestObj := func(levels int) string { return strings.Repeat(`{"a":`, levels) + `1` + strings.Repeat(`}`, levels) }
	cases := []struct {
		name   string
		reason string
		build  func(o order) paysim.Notification
	}{
		{"100,000 levels of arrays in the envelope (over the body limit)", "body_too_large", func(o order) paysim.Notification {
			return e.wxSigned(t, wxEnvelope("支付成功", `"x":`+nest(100000)+`,"resource":`+e.wxResource(t, []byte(wxPlain(t, o)))))
		}},
		{"30,000 levels of arrays in the envelope", "malformed", func(o order) paysim.Notification {
			return e.wxSigned(t, wxEnvelope("支付成功", `"x":`+nest(30000)+`,"resource":`+e.wxResource(t, []byte(wxPlain(t, o)))))
		}},
		{"9,000 levels of objects in the envelope", "malformed", func(o order) paysim.Notification {
			return e.wxSigned(t, wxEnvelope("支付成功", `"x":`+nestObj(9000)+`,"resource":`+e.wxResource(t, []byte(wxPlain(t, o)))))
		}},
		{"20,000 levels of arrays inside the encrypted plaintext", "malformed", func(o order) paysim.Notification {
			plain := strings.Replace(wxPlain(t, o), `{`, `{"promotion_detail":`+nest(20000)+`,`, 1)
			return e.wxSigned(t, wxEnvelope("支付成功", `"resource":`+e.wxResource(t, []byte(plain))))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := e.register(t, wxChannel, "nested", 1700)
			n := tc.build(o)
			_, peakBefore := e.memory(t)
			a := e.expectRefused(t, refusal{channel: wxChannel, what: fmt.Sprintf("%s, %d bytes, validly signed", tc.name, len(n.Body)),
				send: func() answer { return e.send(wxChannel, n) }, reason: tc.reason})
			_, peakAfter := e.memory(t)
			if a.elapsed > quickRefusal {
				t.Errorf("answer time: expected under %v, got %v", quickRefusal, a.elapsed)
			}
			if got := e.order(t, o.no); got.Status != "PENDING" || got.Receipts != 0 {
				t.Errorf("order: expected PENDING without receipt, got %+v", got)
			}
			t.Logf("evidence: answered in %v; callbackd peak RSS %d KiB → %d KiB", a.elapsed.Round(time.Millisecond), peakBefore, peakAfter)
		})
	}
}

// Invalid UTF-8 and invalid GBK, validly signed. A WeChat Pay body is UTF-8 JSON: invalid bytes
// in the envelope or in the decrypted plaintext (which Go's JSON decoder would silently turn
// into U+FFFD) are refused. An Alipay body declares its charset: bytes invalid in it are refused
// (GBK decoders, too, silently substitute U+FFFD unless checked). All 400, nothing written.
func TestInvalidEncoding(t *testing.T) {
	e := suite
	gbk := func(s string) string {
		b, err := simplifiedchinese.GBK.NewEncoder().String(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name    string
		channel string
		build   func(o order) paysim.Notification
	}{
		{"WeChat Pay envelope: summary with a 0xFF byte", wxChannel, func(o order) paysim.Notification {
			return e.wxSigned(t, wxEnvelope("支付\xff成功", `"resource":`+e.wxResource(t, []byte(wxPlain(t, o)))))
		}},
		{"WeChat Pay envelope: summary in GBK instead of UTF-8", wxChannel, func(o order) paysim.Notification {
			return e.wxSigned(t, wxEnvelope(gbk("支付成功"), `"resource":`+e.wxResource(t, []byte(wxPlain(t, o)))))
		}},
		{"WeChat Pay envelope: overlong UTF-8 encoding of '/' (C0 AF)", wxChannel, func(o order) paysim.Notification {
			return e.wxSigned(t, wxEnvelope("\xc0\xaf", `"resource":`+e.wxResource(t, []byte(wxPlain(t, o)))))
		}},
		{"WeChat Pay plaintext: attach with a truncated UTF-8 sequence", wxChannel, func(o order) paysim.Notification {
			plain := strings.Replace(wxPlain(t, o), `"attach":""`, "\"attach\":\"a\xe6\xb5\"", 1)
			return e.wxSigned(t, wxEnvelope("支付成功", `"resource":`+e.wxResource(t, []byte(plain))))
		}},
		{"WeChat Pay plaintext: UTF-16 surrogate encoded in UTF-8 (ED A0 80)", wxChannel, func(o order) paysim.Notification {
			plain := strings.Replace(wxPlain(t, o), `"attach":""`, "\"attach\":\"\xed\xa0\x80\"", 1)
			return e.wxSigned(t, wxEnvelope("支付成功", `"resource":`+e.wxResource(t, []byte(plain))))
		}},
		{"Alipay utf-8: subject with a 0xFF byte", aliChannel, func(o order) paysim.Notification {
			f := aliFields(o)
			f["subject"] = "测试\xff"
			return e.aliSigned(t, f, "")
		}},
		{"Alipay utf-8 declared, subject in GBK", aliChannel, func(o order) paysim.Notification {
			f := aliFields(o)
			f["subject"] = gbk("测试订单")
			return e.aliSigned(t, f, "")
		}},
		{"Alipay gbk: subject with a lead byte and an invalid trail byte (81 7F)", aliChannel, func(o order) paysim.Notification {
			f := aliFields(o)
			f["charset"] = "gbk"
			f["subject"] = gbk("测试") + "\x81\x7f"
			return e.aliSigned(t, f, "")
		}},
		{"Alipay gbk: subject ending in a lone lead byte (0x81)", aliChannel, func(o order) paysim.Notification {
			f := aliFields(o)
			f["charset"] = "gbk"
			f["subject"] = gbk("测试") + "\x81"
			return e.aliSigned(t, f, "")
		}},
		{"Alipay gbk: subject with 0xFF", aliChannel, func(o order) paysim.Notification {
			f := aliFields(o)
			f["charset"] = "gbk"
			f["subject"] = "\xff" + gbk("订单")
			return e.aliSigned(t, f, "")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := e.register(t, tc.channel, "encoding", 1900)
			n := tc.build(o)
			e.expectRefused(t, refusal{channel: tc.channel, what: tc.name + " (validly signed)",
				send: func() answer { return e.send(tc.channel, n) }, reason: "malformed"})
			if got := e.order(t, o.no); got.Status != "PENDING" || got.Receipts != 0 {
				t.Errorf("order: expected PENDING without receipt, got %+v", got)
			}
		})
	}

	// The control: valid GBK (Chinese subject) is accepted, so the refusals above are about the
	// bytes, not about GBK.
	t.Run("control: valid gbk is applied", func(t *testing.T) {
		o := e.register(t, aliChannel, "encoding-ok", 1900)
		n := e.mustAli(t, e.aliGBK, aliTrade(o))
		if !bytes.Contains(n.Body, []byte("charset=gbk")) {
			t.Fatalf("control body does not declare gbk")
		}
		if a := e.send(aliChannel, n); !isSuccess(aliChannel, a) {
			t.Fatalf("valid gbk notification: expected success, got %s", a)
		}
		if got := e.order(t, o.no); got.Status != "PAID" {
			t.Errorf("order: expected PAID, got %+v", got)
		}
	})
}
