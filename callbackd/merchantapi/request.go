package merchantapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Limits of the merchant API's input. Order numbers follow the strictest provider (WeChat Pay's
// out_trade_no alphabet) at Alipay's length, so one order number is valid on every channel.
const (
	// MaxBodyBytes is the largest accepted request body.
	MaxBodyBytes = 64 << 10
	maxOrderNo   = 64
	maxIdentity  = 64
	maxChannel   = 63
	// maxIdempotencyKey bounds the Idempotency-Key header.
	maxIdempotencyKey = 255
)

// createOrderRequest is the body of POST /v1/orders. Amount is decoded by hand (see parseAmount)
// so that a float, a string or an out-of-range number gets a precise message instead of being
// rounded or wrapped.
type createOrderRequest struct {
	OrderNo       string          `json:"order_no"`
	Channel       string          `json:"channel"`
	MerchantID    string          `json:"merchant_id"`
	SubMerchantID string          `json:"sub_merchant_id,omitempty"`
	Amount        json.RawMessage `json:"amount"`
	Currency      string          `json:"currency"`
	ExpiresAt     *string         `json:"expires_at,omitempty"`
}

// orderInput is a validated createOrderRequest.
type orderInput struct {
	OrderNo       string
	Channel       string
	MerchantID    string
	SubMerchantID string
	Amount        int64
	Currency      string
	ExpiresAt     *time.Time
}

// inputError is a client mistake; its message is shown to the caller as is, so it must never
// quote secrets (request bodies hold none here).
type inputError struct{ msg string }

func (e *inputError) Error() string { return e.msg }

func badInput(format string, args ...any) error {
	return &inputError{msg: fmt.Sprintf(format, args...)}
}

// decodeStrict decodes exactly one JSON object from body into v: unknown fields, trailing data
// and a top-level value that is not an object are refused.
func decodeStrict(body []byte, v any) error {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return badInput("request body is empty; a JSON object is expected")
	}
	if trimmed[0] != '{' {
		return badInput("request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badInput("invalid JSON body: %s", describeJSONError(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badInput("invalid JSON body: unexpected data after the JSON object")
	}
	return nil
}

// describeJSONError turns encoding/json's errors into a message for API callers.
func describeJSONError(err error) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("malformed JSON at byte %d", syntax.Offset)
	case errors.As(err, &typ):
		if typ.Field != "" {
			return fmt.Sprintf("field %q must be a JSON %s, not %s", typ.Field, jsonTypeName(typ.Type.Kind().String()), typ.Value)
		}
		return fmt.Sprintf("unexpected JSON %s", typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	default:
		return "malformed JSON"
	}
}

func jsonTypeName(kind string) string {
	switch kind {
	case "string":
		return "string"
	case "ptr":
		return "string"
	case "int64", "int", "int32":
		return "integer"
	default:
		return kind
	}
}

// validate checks every field and returns the first problem, naming the field.
func (r createOrderRequest) validate() (orderInput, error) {
	in := orderInput{
		OrderNo:       r.OrderNo,
		Channel:       r.Channel,
		MerchantID:    r.MerchantID,
		SubMerchantID: r.SubMerchantID,
		Currency:      r.Currency,
	}
	if err := validateOrderNo(r.OrderNo); err != nil {
		return orderInput{}, err
	}
	if err := validateName("channel", r.Channel, maxChannel, true); err != nil {
		return orderInput{}, err
	}
	if err := validateName("merchant_id", r.MerchantID, maxIdentity, true); err != nil {
		return orderInput{}, err
	}
	if err := validateName("sub_merchant_id", r.SubMerchantID, maxIdentity, false); err != nil {
		return orderInput{}, err
	}
	amount, err := parseAmount(r.Amount)
	if err != nil {
		return orderInput{}, err
	}
	in.Amount = amount
	if err := validateCurrency(r.Currency); err != nil {
		return orderInput{}, err
	}
	if r.ExpiresAt != nil {
		t, err := time.Parse(time.RFC3339Nano, *r.ExpiresAt)
		if err != nil {
			return orderInput{}, badInput("expires_at must be an RFC 3339 time such as 2026-01-02T15:04:05Z")
		}
		t = t.UTC()
		in.ExpiresAt = &t
	}
	return in, nil
}

// validateOrderNo accepts 1 to 64 characters of [A-Za-z0-9_-|*], the out_trade_no alphabet every
// supported provider accepts.
func validateOrderNo(s string) error {
	if s == "" {
		return badInput("order_no is required")
	}
	if len(s) > maxOrderNo {
		return badInput("order_no must be at most %d characters", maxOrderNo)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '_' && c != '-' && c != '|' && c != '*' {
			return badInput("order_no may only hold letters, digits and _ - | *")
		}
	}
	return nil
}

// validateName accepts printable ASCII without spaces, as provider identities are.
func validateName(field, s string, maxLen int, required bool) error {
	if s == "" {
		if required {
			return badInput("%s is required", field)
		}
		return nil
	}
	if len(s) > maxLen {
		return badInput("%s must be at most %d characters", field, maxLen)
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return badInput("%s may only hold printable ASCII characters without spaces", field)
		}
	}
	return nil
}

func validateCurrency(s string) error {
	if s == "" {
		return badInput("currency is required (an ISO 4217 code such as CNY)")
	}
	if len(s) != 3 || !isUpper(s[0]) || !isUpper(s[1]) || !isUpper(s[2]) {
		return badInput("currency must be an ISO 4217 code of three upper-case letters, such as CNY or USD")
	}
	return nil
}

// parseAmount accepts only a JSON integer literal of minor units that is positive and fits an
// int64. Decimals are refused rather than rounded: 19.99 is a caller bug (major units), never
// 1999 or 2000 minor units.
func parseAmount(raw json.RawMessage) (int64, error) {
	s := strings.TrimSpace(string(raw))
	switch {
	case s == "" || s == "null":
		return 0, badInput("amount is required (an integer of minor units, e.g. 1999 for 19.99)")
	case s[0] == '"':
		return 0, badInput("amount must be a JSON integer of minor units, not a string")
	case s == "true" || s == "false" || s[0] == '{' || s[0] == '[':
		return 0, badInput("amount must be a JSON integer of minor units")
	case strings.ContainsAny(s, ".eE"):
		return 0, badInput("amount must be an integer of minor units (e.g. 1999 for 19.99), not a decimal number")
	case s[0] == '-':
		return 0, badInput("amount must be positive")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		var numErr *strconv.NumError
		if errors.As(err, &numErr) && errors.Is(numErr.Err, strconv.ErrRange) {
			return 0, badInput("amount is too large")
		}
		return 0, badInput("amount must be a JSON integer of minor units")
	}
	if n <= 0 {
		return 0, badInput("amount must be positive")
	}
	return n, nil
}

// validateIdempotencyKey accepts 1 to 255 printable ASCII characters.
func validateIdempotencyKey(s string) error {
	if len(s) > maxIdempotencyKey {
		return badInput("Idempotency-Key must be at most %d characters", maxIdempotencyKey)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return badInput("Idempotency-Key may only hold printable ASCII characters")
		}
	}
	return nil
}

func isAlnum(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || isUpper(c) }
func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }
