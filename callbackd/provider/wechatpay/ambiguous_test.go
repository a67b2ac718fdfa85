package wechatpay_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/internal/paysim"
)

// Regression (issue 9, hostile input suite): validly signed notifications whose bytes different
// readers interpret differently were accepted — encoding/json keeps the last of two equal member
// names (matched case-insensitively) and turns invalid UTF-8 into U+FFFD, and the verification
// read the first of several Wechatpay-* headers. Each of these paid an order end to end against
// a real callbackd; each must be refused as malformed.
func TestParseRefusesAmbiguousInput(t *testing.T) {
	f := keyMaterial(t)
	cert := signer(f, false)
	signRaw := func(body []byte) paysim.Notification {
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		const nonce = "5K8264ILTKCH16CQ2502SI8ZNMTM67VS"
		sig, err := paysim.SignWeChat(f.certKey, ts, nonce, body)
		if err != nil {
			t.Fatal(err)
		}
		n := must(t)(cert.Payment(paidTx("A1", 100), paysim.WeChatOptions{}))
		n.Header.Set("Wechatpay-Timestamp", ts)
		n.Header.Set("Wechatpay-Nonce", nonce)
		n.Header.Set("Wechatpay-Signature", sig)
		return paysim.Notification{Header: n.Header, Body: body}
	}
	plainOf := func(outTradeNo string) string {
		b, err := json.Marshal(paidTx(outTradeNo, 100))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	resource := func(plain string) string {
		const nonce = "0123456789ab"
		ct, err := paysim.SealWeChatResource(f.apiV3Key, nonce, "transaction", []byte(plain))
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf(`{"algorithm":"AEAD_AES_256_GCM","ciphertext":%q,"nonce":%q,"associated_data":"transaction","original_type":"transaction"}`, ct, nonce)
	}
	envelope := func(summary, members string) []byte {
		return []byte(`{"id":"EV-1","create_time":"2026-01-01T10:00:00+08:00","resource_type":"encrypt-resource",` +
			`"event_type":"TRANSACTION.SUCCESS","summary":"` + summary + `",` + members + `}`)
	}
	withHeader := func(name, value string) paysim.Notification {
		n := must(t)(cert.Payment(paidTx("A1", 100), paysim.WeChatOptions{}))
		n.Header.Add(name, value)
		return n
	}

	tests := []struct {
		name  string
		build func() paysim.Notification
	}{
		{"two resource members", func() paysim.Notification {
			return signRaw(envelope("支付成功", `"resource":`+resource(plainOf("A1"))+`,"resource":`+resource(plainOf("B2"))))
		}},
		{"resource and Resource", func() paysim.Notification {
			return signRaw(envelope("支付成功", `"resource":`+resource(plainOf("A1"))+`,"Resource":`+resource(plainOf("B2"))))
		}},
		{"two out_trade_no in the plaintext", func() paysim.Notification {
			return signRaw(envelope("支付成功", `"resource":`+resource(strings.Replace(plainOf("A1"), `{`, `{"out_trade_no":"B2",`, 1))))
		}},
		{"out_trade_no twice, once escaped", func() paysim.Notification {
			return signRaw(envelope("支付成功", `"resource":`+resource(strings.Replace(plainOf("A1"), `{`, `{"out\u005ftrade_no":"B2",`, 1))))
		}},
		{"invalid UTF-8 in the envelope", func() paysim.Notification {
			return signRaw(envelope("支付\xff成功", `"resource":`+resource(plainOf("A1"))))
		}},
		{"invalid UTF-8 in the plaintext", func() paysim.Notification {
			return signRaw(envelope("支付成功", `"resource":`+resource(strings.Replace(plainOf("A1"), `"attach":""`, "\"attach\":\"\xe6\xb5\"", 1))))
		}},
		{"nesting deeper than any WeChat Pay body", func() paysim.Notification {
			return signRaw(envelope("支付成功", `"x":`+strings.Repeat(`{"a":`, 100)+`1`+strings.Repeat(`}`, 100)+`,"resource":`+resource(plainOf("A1"))))
		}},
		{"a second Wechatpay-Signature", func() paysim.Notification { return withHeader("Wechatpay-Signature", "AAAA") }},
		{"a second Wechatpay-Timestamp", func() paysim.Notification {
			return withHeader("Wechatpay-Timestamp", strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10))
		}},
		{"a second Wechatpay-Serial", func() paysim.Notification { return withHeader("Wechatpay-Serial", testPubKeyID) }},
		{"a second Wechatpay-Nonce", func() paysim.Notification { return withHeader("Wechatpay-Nonce", "other") }},
		{"a second Wechatpay-Signature-Type", func() paysim.Notification {
			n := withHeader("Wechatpay-Signature-Type", "WECHATPAY2-SHA256-RSA2048")
			n.Header.Add("Wechatpay-Signature-Type", "WECHATPAY2-SHA256-RSA2048")
			return n
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parse(newAdapter(t, f, adapterOptions{}), tc.build())
			if err == nil || notify.ReasonOf(err) != notify.ReasonMalformed {
				t.Fatalf("expected refusal %s, got %v (notification %+v)", notify.ReasonMalformed, err, got)
			}
		})
	}

	// The control: the same construction without the ambiguity is accepted.
	t.Run("control", func(t *testing.T) {
		n, err := parse(newAdapter(t, f, adapterOptions{}), signRaw(envelope("支付成功", `"resource":`+resource(plainOf("A1")))))
		if err != nil || n.OutTradeNo != "A1" {
			t.Fatalf("expected A1 accepted, got %+v, %v", n, err)
		}
	})
}
