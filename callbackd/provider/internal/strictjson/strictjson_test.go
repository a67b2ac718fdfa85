package strictjson_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/seed-1cff2221/callback-platform/callbackd/provider/internal/strictjson"
)

func TestCheck(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	deepObj := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	cases := []struct {
		name string
		doc  string
		want error // nil: accepted
	}{
		{"a WeChat Pay envelope", `{"id":"x","resource":{"algorithm":"AEAD_AES_256_GCM","nonce":"n"},"summary":"支付成功"}`, nil},
		{"same name in different objects", `{"a":{"id":1},"b":{"id":2},"c":[{"id":3},{"id":4}]}`, nil},
		{"string values equal to names", `{"a":"a","b":"a","c":["a","a"]}`, nil},
		{"scalars and empty containers", `[1,-2.5e3,true,false,null,"s",{},[]]`, nil},
		{"exactly the depth limit", deep(8), nil},
		{"duplicate member", `{"resource":{},"resource":{}}`, strictjson.ErrDuplicateName},
		{"duplicate member in a nested object", `{"amount":{"total":1,"currency":"CNY","total":100}}`, strictjson.ErrDuplicateName},
		{"duplicate member inside an array", `[{"a":1},{"a":1,"a":2}]`, strictjson.ErrDuplicateName},
		{"duplicate member after a nested value", `{"a":{"b":[1,{"c":2}]},"d":3,"a":4}`, strictjson.ErrDuplicateName},
		{"duplicate through an escape", `{"out_trade_no":"1","out\u005ftrade_no":"2"}`, strictjson.ErrDuplicateName},
		{"one level too deep", deep(9), strictjson.ErrTooDeep},
		{"100,000 levels", deep(100000), strictjson.ErrTooDeep},
		{"deep objects", deepObj(1000), strictjson.ErrTooDeep},
		{"invalid byte", "{\"a\":\"\xff\"}", strictjson.ErrInvalidUTF8},
		{"overlong encoding", "{\"a\":\"\xc0\xaf\"}", strictjson.ErrInvalidUTF8},
		{"UTF-8 encoded surrogate", "{\"a\":\"\xed\xa0\x80\"}", strictjson.ErrInvalidUTF8},
		{"truncated sequence", "{\"a\":\"\xe6\xb5\"}", strictjson.ErrInvalidUTF8},
		{"trailing value", `{"a":1}{"a":2}`, strictjson.ErrSyntax},
		{"trailing garbage", `{"a":1} x`, strictjson.ErrSyntax},
		{"unterminated", `{"a":`, strictjson.ErrSyntax},
		{"empty", ``, strictjson.ErrSyntax},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, fold := range []bool{true, false} {
				want := tc.want
				err := strictjson.Check([]byte(tc.doc), strictjson.Options{MaxDepth: 8, FoldCase: fold})
				switch {
				case want == nil && err != nil:
					t.Errorf("FoldCase=%v: expected accepted, got %v", fold, err)
				case want != nil && !errors.Is(err, want):
					t.Errorf("FoldCase=%v: expected %v, got %v", fold, want, err)
				}
			}
		})
	}
}

// Names equal only under case folding are duplicates for struct decoding (FoldCase), distinct
// names for documents read as maps.
func TestCheckFoldCase(t *testing.T) {
	for _, doc := range []string{
		`{"resource":1,"Resource":2}`,
		`{"k":1,"` + "\u212a" + `":2}`, // Kelvin sign
		`{"s":1,"` + "\u017f" + `":2}`, // long s
	} {
		if err := strictjson.Check([]byte(doc), strictjson.Options{MaxDepth: 8, FoldCase: true}); !errors.Is(err, strictjson.ErrDuplicateName) {
			t.Errorf("%s with FoldCase: expected %v, got %v", doc, strictjson.ErrDuplicateName, err)
		}
		if err := strictjson.Check([]byte(doc), strictjson.Options{MaxDepth: 8}); err != nil {
			t.Errorf("%s without FoldCase: expected accepted, got %v", doc, err)
		}
	}
}

// seeds are the documents FuzzCheck starts from and TestCheckMatchesReference checks: the
// cases above, real provider bodies, escapes that unescape to equal names, and broken input.
func seeds() []string {
	many := func(n int, last string) string { // an object of n members, then one more
		var b strings.Builder
		b.WriteString("{")
		for i := range n {
			fmt.Fprintf(&b, `"m%d":%d,`, i, i)
		}
		return b.String() + last + "}"
	}
	return []string{
		`{"a":1}`, `{"a":1,"a":2}`, `[[[]]]`, `{"a":{"b":[1,2,{"c":null}]}}`,
		wechatOuter, wechatResource,
		`{"id":"evt_1","object":"event","data":{"object":{"id":"pi_1","amount":2000,"currency":"usd","metadata":{}}},"livemode":false,"type":"payment_intent.succeeded"}`,
		`{"out_trade_no":"1","out\u005ftrade_no":"2"}`,
		`{"\ud83d\ude00":1,"😀":2}`,            // a surrogate pair is the rune
		`{"\ud800":1,"\udc00":2}`,             // lone surrogates both decode to U+FFFD
		`{"\ud800":1,"` + "\ufffd" + `":2}`,   // ... and equal a literal U+FFFD
		`{"\ud800\ud800":1,"\ufffd\ufffd":2}`, // a high surrogate does not pair with a high one
		`{"\udc00\ud800":1}`, `{"\ud800\u0041":1,"\ufffdA":2}`, `{"\ud800\u00":1}`, `{"\uDEAD\uBEEF":1}`,
		`{"a\"b":1,"a\u0022b":2}`, `{"\/":1,"/":2}`, `{"\b\f\n\r\t":1,"\u0008\u000c\u000a\u000d\u0009":2}`,
		`{"K":1,"\u212a":2}`, `{"s":1,"\u017F":2}`, `{"ǅ":1,"ǆ":2,"Ǆ":3}`, `{"ß":1,"ẞ":2}`, `{"ΣΑΣ":1,"σας":2}`,
		`{"a":1,"A":2}`, `{"":1,"":2}`, `{"a":{"a":{"a":1}},"b":{"a":1,"a":1}}`,
		many(16, `"m3":0`), many(17, `"m16":0`), many(40, `"M39":0`), many(40, `"m\u0033\u0039":0`), many(40, `"x":0`),
		`{"\u212a":1,` + many(20, `"k":0`)[1:],
		`1`, `-0.5e+10`, `"x"`, `true`, `null`, ` [ 1 , { "a" : [ ] } ] `, "\t{\r\n}\n",
		`01`, `-`, `1.`, `.5`, `1e`, `1e+`, `+1`, `[1,]`, `{"a":1,}`, `{,}`, `[,1]`, `{"a"}`, `{"a":}`, `{1:2}`,
		`tru`, `nul`, `falsey`, `[1 2]`, `{"a":1 "b":2}`, `"\x"`, `"\u12G4"`, "\"\x01\"", `"abc`, `"\`,
		`{"a":1}{"a":2}`, `{"a":1} x`, `[] []`, `1 2`, `{"a":`, ``, ` `, "\xef\xbb\xbf{}",
		"{\"a\":\"\xff\"}", "{\"a\":\"\xc0\xaf\"}", "{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\xe6\xb5\"}", "[1,2,\xff",
		strings.Repeat("[", 17) + strings.Repeat("]", 17), strings.Repeat(`{"a":`, 16) + "1" + strings.Repeat("}", 16),
		strings.Repeat("[", 20) + "x", `{"a":1,"a":` + strings.Repeat("[", 40),
		strings.Repeat("[", 16) + `{"a":1,"a":2}`,
	}
}

// errorClass names which of Check's errors err is, for comparing two implementations.
func errorClass(err error) string {
	for _, e := range []error{strictjson.ErrInvalidUTF8, strictjson.ErrDuplicateName, strictjson.ErrTooDeep, strictjson.ErrSyntax} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	if err == nil {
		return "accepted"
	}
	return "unknown error " + err.Error()
}

// agree fails t unless Check and the token-based reference give b the same verdict, and Check
// accepts exactly what encoding/json calls valid (and valid UTF-8) without duplicates or depth.
func agree(t *testing.T, b []byte, o strictjson.Options) {
	t.Helper()
	got, want := strictjson.Check(b, o), referenceCheck(b, o)
	if errorClass(got) != errorClass(want) {
		t.Fatalf("%q with %+v: expected %v (reference), got %v", b, o, want, got)
	}
	grammatical := json.Valid(b) && utf8.Valid(b)
	switch {
	case got == nil && !grammatical:
		t.Fatalf("%q with %+v: accepted, but json.Valid or utf8.Valid refuses it", b, o)
	case grammatical && errors.Is(got, strictjson.ErrSyntax):
		t.Fatalf("%q with %+v: json.Valid accepts it, got %v", b, o, got)
	}
	if got != nil && len(got.Error()) > 200 {
		t.Fatalf("%q with %+v: expected a short error, got %d bytes", b, o, len(got.Error()))
	}
}

func TestCheckMatchesReference(t *testing.T) {
	for _, doc := range seeds() {
		for _, depth := range []int{0, 1, 8, 16} {
			for _, fold := range []bool{false, true} {
				agree(t, []byte(doc), strictjson.Options{MaxDepth: depth, FoldCase: fold})
			}
		}
	}
}

// The common path, names without escapes (ASCII when folding case), allocates nothing.
func TestCheckAllocations(t *testing.T) {
	for _, doc := range []string{wechatOuter, wechatResource} {
		for _, fold := range []bool{false, true} {
			b, o := []byte(doc), strictjson.Options{MaxDepth: 16, FoldCase: fold}
			if n := testing.AllocsPerRun(100, func() { _ = strictjson.Check(b, o) }); n != 0 {
				t.Errorf("FoldCase=%v: expected 0 allocations, got %v", fold, n)
			}
		}
	}
}

// FuzzCheck compares Check with the token-based reference implementation.
func FuzzCheck(f *testing.F) {
	for _, s := range seeds() {
		f.Add([]byte(s), uint8(16), true)
		f.Add([]byte(s), uint8(4), false)
	}
	f.Fuzz(func(t *testing.T, b []byte, depth uint8, fold bool) {
		agree(t, b, strictjson.Options{MaxDepth: int(depth % 40), FoldCase: fold})
	})
}
