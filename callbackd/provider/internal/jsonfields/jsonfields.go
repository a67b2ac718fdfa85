// Package jsonfields reads the business fields of a generic (Stripe-style or Standard Webhooks)
// JSON notification from the dot-separated paths a channel configures, and classifies the event.
// Amounts must be JSON integers of minor units: a float, a string or an exponent is malformed,
// never rounded.
package jsonfields

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/internal/strictjson"
)

// maxDepth bounds the nesting of a path, so a configuration typo cannot make lookups expensive.
const maxDepth = 16

// maxBodyDepth bounds the nesting of a body: generic providers' events are a dozen levels deep
// at most.
const maxBodyDepth = 64

// Fields are resolved field paths and event-type sets.
type Fields struct {
	orderNo, amount, currency, eventType, transactionID, refundNo, account []string
	paid, refund, closed                                                   map[string]bool
}

// Resolve merges the channel's configured paths over the provider's defaults: every empty path
// and every empty event list takes the default. account is the path of the merchant account in
// the body; empty means the body carries none and no account check is made.
func Resolve(configured *callbackdv1alpha1.GenericFields, defaults callbackdv1alpha1.GenericFields, account string) (Fields, error) {
	g := defaults
	if c := configured; c != nil {
		pick := func(dst *string, v string) {
			if v != "" {
				*dst = v
			}
		}
		pick(&g.OrderNo, c.OrderNo)
		pick(&g.Amount, c.Amount)
		pick(&g.Currency, c.Currency)
		pick(&g.EventType, c.EventType)
		pick(&g.TransactionID, c.TransactionID)
		pick(&g.RefundNo, c.RefundNo)
		if len(c.PaidEvents) > 0 {
			g.PaidEvents = c.PaidEvents
		}
		if len(c.RefundEvents) > 0 {
			g.RefundEvents = c.RefundEvents
		}
		if len(c.ClosedEvents) > 0 {
			g.ClosedEvents = c.ClosedEvents
		}
	}
	var f Fields
	for _, p := range []struct {
		name     string
		value    string
		dst      *[]string
		optional bool
	}{
		{"generic.orderNo", g.OrderNo, &f.orderNo, false},
		{"generic.amount", g.Amount, &f.amount, false},
		{"generic.currency", g.Currency, &f.currency, true},
		{"generic.eventType", g.EventType, &f.eventType, false},
		{"generic.transactionID", g.TransactionID, &f.transactionID, true},
		{"generic.refundNo", g.RefundNo, &f.refundNo, true},
		{"generic.account", account, &f.account, true},
	} {
		if p.value == "" {
			if p.optional {
				continue
			}
			return Fields{}, fmt.Errorf("jsonfields: %s: a path is required", p.name)
		}
		parts := strings.Split(p.value, ".")
		if len(parts) > maxDepth || slicesContainsEmpty(parts) {
			return Fields{}, fmt.Errorf("jsonfields: %s: invalid path %q", p.name, p.value)
		}
		*p.dst = parts
	}
	f.paid, f.refund, f.closed = set(g.PaidEvents), set(g.RefundEvents), set(g.ClosedEvents)
	if len(f.paid) == 0 {
		return Fields{}, fmt.Errorf("jsonfields: generic.paidEvents: at least one event type is required")
	}
	if len(f.refund) > 0 && f.refundNo == nil {
		return Fields{}, fmt.Errorf("jsonfields: generic.refundNo: a path is required when refund events are configured")
	}
	return f, nil
}

func slicesContainsEmpty(parts []string) bool {
	for _, p := range parts {
		if p == "" {
			return true
		}
	}
	return false
}

func set(items []string) map[string]bool {
	m := make(map[string]bool, len(items))
	for _, it := range items {
		m[it] = true
	}
	return m
}

// Extract decodes body and fills the business fields of n: Kind, Status, OutTradeNo, Amount,
// Currency (upper case), ProviderTxnID, OutRefundNo. A verified event of a type the channel does
// not act on gets StatusIgnored, so the provider stops resending it. When an account path is
// configured, the body's account must equal n.MerchantID. Errors are *notify.Error values.
func (f Fields) Extract(body []byte, n *notify.Notification) error {
	// Signed bytes that parsers read differently (a name twice: decoding into a map keeps the
	// last, other readers the first; invalid UTF-8) are refused. Names are looked up exactly,
	// so names differing only by case are distinct and allowed.
	if err := strictjson.Check(body, strictjson.Options{MaxDepth: maxBodyDepth}); err != nil {
		return &notify.Error{Reason: notify.ReasonMalformed, Detail: "body is not strict JSON", Err: err}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return notify.Errorf(notify.ReasonMalformed, "body is not JSON")
	}
	if dec.More() {
		return notify.Errorf(notify.ReasonMalformed, "trailing data after the JSON body")
	}
	eventType, err := stringAt(doc, f.eventType, "event type", true)
	if err != nil {
		return err
	}
	if f.account != nil {
		account, err := stringAt(doc, f.account, "account", true)
		if err != nil {
			return err
		}
		if account != n.MerchantID {
			return notify.Errorf(notify.ReasonMerchantMismatch, "notification is for another account")
		}
	}
	switch {
	case f.paid[eventType]:
		n.Kind, n.Status = notify.KindPayment, notify.StatusSucceeded
	case f.refund[eventType]:
		n.Kind, n.Status = notify.KindRefund, notify.StatusSucceeded
	case f.closed[eventType]:
		n.Kind, n.Status = notify.KindClose, notify.StatusSucceeded
	default:
		// Verified, but not an event this channel acts on: acknowledge it and record nothing.
		n.Kind, n.Status = notify.KindPayment, notify.StatusIgnored
		n.OutTradeNo, _ = stringAt(doc, f.orderNo, "order number", false)
		return nil
	}
	if n.OutTradeNo, err = stringAt(doc, f.orderNo, "order number", true); err != nil {
		return err
	}
	if n.Kind == notify.KindRefund {
		if n.OutRefundNo, err = stringAt(doc, f.refundNo, "refund number", true); err != nil {
			return err
		}
	}
	if n.Kind != notify.KindClose {
		if n.Amount, err = amountAt(doc, f.amount); err != nil {
			return err
		}
	}
	if f.currency != nil {
		cur, err := stringAt(doc, f.currency, "currency", false)
		if err != nil {
			return err
		}
		if cur != "" && !isCurrency(cur) {
			return notify.Errorf(notify.ReasonMalformed, "currency is not an ISO 4217 code")
		}
		n.Currency = strings.ToUpper(cur)
	}
	if f.transactionID != nil {
		if n.ProviderTxnID, err = stringAt(doc, f.transactionID, "transaction id", false); err != nil {
			return err
		}
	}
	return nil
}

// lookup follows path through objects (by key) and arrays (by decimal index).
func lookup(doc any, path []string) (any, bool) {
	cur := doc
	for _, p := range path {
		switch v := cur.(type) {
		case map[string]any:
			next, ok := v[p]
			if !ok {
				return nil, false
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(v) {
				return nil, false
			}
			cur = v[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// stringAt returns the non-empty string at path. A missing or null field is an error only when
// required; a field of another JSON type is always malformed.
func stringAt(doc any, path []string, what string, required bool) (string, error) {
	v, ok := lookup(doc, path)
	if !ok || v == nil {
		if required {
			return "", notify.Errorf(notify.ReasonMalformed, "%s missing at %s", what, strings.Join(path, "."))
		}
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", notify.Errorf(notify.ReasonMalformed, "%s at %s is not a string", what, strings.Join(path, "."))
	}
	if s == "" && required {
		return "", notify.Errorf(notify.ReasonMalformed, "%s at %s is empty", what, strings.Join(path, "."))
	}
	return s, nil
}

// amountAt returns the non-negative JSON integer at path. Floats (even 100.0), exponents,
// strings and negative numbers are malformed: money is never guessed.
func amountAt(doc any, path []string) (int64, error) {
	v, ok := lookup(doc, path)
	if !ok || v == nil {
		return 0, notify.Errorf(notify.ReasonMalformed, "amount missing at %s", strings.Join(path, "."))
	}
	num, ok := v.(json.Number)
	if !ok {
		return 0, notify.Errorf(notify.ReasonMalformed, "amount at %s is not a JSON number", strings.Join(path, "."))
	}
	s := num.String()
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, notify.Errorf(notify.ReasonMalformed, "amount at %s is not a non-negative integer of minor units", strings.Join(path, "."))
		}
	}
	a, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, notify.Errorf(notify.ReasonMalformed, "amount at %s is out of range", strings.Join(path, "."))
	}
	return a, nil
}

func isCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		c := s[i] | 0x20 // ASCII lower case
		if c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}
