package jsonfields

import (
	"strings"
	"testing"

	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
)

// Regression (issue 9, hostile input suite): a body with a name twice was read with the last
// value (decoding into a map), while other readers of the same signed bytes take the first, so
// a Stripe or Standard Webhooks event could name two orders or two amounts at once; invalid
// UTF-8 was turned into U+FFFD. Both are refused as malformed. Names that differ only by case
// stay distinct (lookups are exact), so a merchant's metadata with such keys is still accepted.
func TestExtractRefusesAmbiguousBodies(t *testing.T) {
	f, err := Resolve(nil, defaults, "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		body string
		ok   bool
	}{
		{"plain", `{"type":"paid","data":{"order_no":"O-1","amount":100}}`, true},
		{"names differing by case", `{"type":"paid","data":{"order_no":"O-1","Order_no":"O-2","amount":100}}`, true},
		{"order_no twice", `{"type":"paid","data":{"order_no":"O-1","order_no":"O-2","amount":100}}`, false},
		{"amount twice", `{"type":"paid","data":{"order_no":"O-1","amount":1,"amount":100}}`, false},
		{"data twice", `{"type":"paid","data":{"order_no":"O-1","amount":100},"data":{"order_no":"O-2","amount":100}}`, false},
		{"type twice, once escaped", `{"type":"ignored","typ\u0065":"paid","data":{"order_no":"O-1","amount":100}}`, false},
		{"invalid UTF-8", "{\"type\":\"paid\",\"data\":{\"order_no\":\"O-1\xff\",\"amount\":100}}", false},
		{"100,000 levels", `{"type":"paid","x":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `,"data":{"order_no":"O-1","amount":100}}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var n notify.Notification
			err := f.Extract([]byte(tc.body), &n)
			switch {
			case tc.ok && err != nil:
				t.Fatalf("expected accepted, got %v", err)
			case !tc.ok && (err == nil || notify.ReasonOf(err) != notify.ReasonMalformed):
				t.Fatalf("expected refusal %s, got %v (%+v)", notify.ReasonMalformed, err, n)
			}
		})
	}
}
