package strictjson_test

import (
	"errors"
	"strings"
	"testing"

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

func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":1,"a":2}`, `[[[]]]`, `{"a":{"b":[1,2,{"c":null}]}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = strictjson.Check(b, strictjson.Options{MaxDepth: 16, FoldCase: true}) // must not panic or hang
	})
}
