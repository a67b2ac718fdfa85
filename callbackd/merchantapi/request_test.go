package merchantapi

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseAmount(t *testing.T) {
	cases := []struct {
		raw     string
		want    int64
		wantErr string // substring of the message; empty: no error
	}{
		{`1999`, 1999, ""},
		{`1`, 1, ""},
		{`9223372036854775807`, 9223372036854775807, ""},
		{`9223372036854775808`, 0, "too large"},
		{`0`, 0, "positive"},
		{`-5`, 0, "positive"},
		{`19.99`, 0, "not a decimal"},
		{`1999.0`, 0, "not a decimal"},
		{`2e3`, 0, "not a decimal"},
		{`"1999"`, 0, "not a string"},
		{`null`, 0, "required"},
		{``, 0, "required"},
		{`true`, 0, "integer"},
		{`[1]`, 0, "integer"},
	}
	for _, tc := range cases {
		got, err := parseAmount(json.RawMessage(tc.raw))
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("parseAmount(%s): expected %d, got error %v", tc.raw, tc.want, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("parseAmount(%s): expected an error containing %q, got %d, %v", tc.raw, tc.wantErr, got, err)
		case tc.wantErr == "" && got != tc.want:
			t.Errorf("parseAmount(%s): expected %d, got %d", tc.raw, tc.want, got)
		}
	}
}

func TestCreateOrderRequestValidation(t *testing.T) {
	valid := `{"order_no":"ord-1","channel":"wx","merchant_id":"1900000109","amount":1999,"currency":"CNY"}`
	cases := []struct {
		name    string
		body    string
		wantErr string
	}{
		{"valid", valid, ""},
		{"valid with sub-merchant and expiry", `{"order_no":"ord_1|a*b","channel":"wx","merchant_id":"m","sub_merchant_id":"s","amount":1,"currency":"USD","expires_at":"2030-01-02T03:04:05+08:00"}`, ""},
		{"unknown field", `{"order_no":"o","channel":"wx","merchant_id":"m","amount":1,"currency":"CNY","amuont":2}`, `unknown field "amuont"`},
		{"trailing data", valid + `{}`, "after the JSON object"},
		{"not an object", `[1]`, "JSON object"},
		{"empty", ``, "empty"},
		{"malformed", `{"order_no":`, "JSON"},
		{"order_no missing", `{"channel":"wx","merchant_id":"m","amount":1,"currency":"CNY"}`, "order_no is required"},
		{"order_no with a slash", `{"order_no":"a/b","channel":"wx","merchant_id":"m","amount":1,"currency":"CNY"}`, "order_no may only hold"},
		{"order_no too long", `{"order_no":"` + strings.Repeat("a", 65) + `","channel":"wx","merchant_id":"m","amount":1,"currency":"CNY"}`, "at most 64"},
		{"order_no a number", `{"order_no":12,"channel":"wx","merchant_id":"m","amount":1,"currency":"CNY"}`, `"order_no" must be a JSON string`},
		{"channel missing", `{"order_no":"o","merchant_id":"m","amount":1,"currency":"CNY"}`, "channel is required"},
		{"merchant_id missing", `{"order_no":"o","channel":"wx","amount":1,"currency":"CNY"}`, "merchant_id is required"},
		{"merchant_id with a space", `{"order_no":"o","channel":"wx","merchant_id":"a b","amount":1,"currency":"CNY"}`, "printable ASCII"},
		{"amount a float", `{"order_no":"o","channel":"wx","merchant_id":"m","amount":19.99,"currency":"CNY"}`, "not a decimal"},
		{"amount a string", `{"order_no":"o","channel":"wx","merchant_id":"m","amount":"1999","currency":"CNY"}`, "not a string"},
		{"amount negative", `{"order_no":"o","channel":"wx","merchant_id":"m","amount":-1,"currency":"CNY"}`, "positive"},
		{"amount zero", `{"order_no":"o","channel":"wx","merchant_id":"m","amount":0,"currency":"CNY"}`, "positive"},
		{"currency lower case", `{"order_no":"o","channel":"wx","merchant_id":"m","amount":1,"currency":"cny"}`, "three upper-case letters"},
		{"currency missing", `{"order_no":"o","channel":"wx","merchant_id":"m","amount":1}`, "currency is required"},
		{"expires_at not RFC 3339", `{"order_no":"o","channel":"wx","merchant_id":"m","amount":1,"currency":"CNY","expires_at":"tomorrow"}`, "RFC 3339"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var req createOrderRequest
			err := decodeStrict([]byte(tc.body), &req)
			if err == nil {
				_, err = req.validate()
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("expected a valid request, got %v", err)
			case tc.wantErr != "" && err == nil:
				t.Errorf("expected an error containing %q, got none", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Errorf("expected an error containing %q, got %q", tc.wantErr, err)
			}
		})
	}
}

func TestValidateIdempotencyKey(t *testing.T) {
	for _, ok := range []string{"a", "checkout-7f3a", strings.Repeat("k", 255)} {
		if err := validateIdempotencyKey(ok); err != nil {
			t.Errorf("validateIdempotencyKey(%q): expected valid, got %v", ok, err)
		}
	}
	for _, bad := range []string{strings.Repeat("k", 256), "tab\there", "é"} {
		if err := validateIdempotencyKey(bad); err == nil {
			t.Errorf("validateIdempotencyKey(%q): expected an error, got none", bad)
		}
	}
}
