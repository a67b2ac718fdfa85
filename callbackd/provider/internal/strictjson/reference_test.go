package strictjson_test

// The token-based implementation Check had before it became a byte scanner, kept verbatim as the
// reference FuzzCheck compares Check with: it is slow (encoding/json's Decoder.Token allocates per
// token) but its grammar is encoding/json's own.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/seed-1cff2221/callback-platform/callbackd/provider/internal/strictjson"
)

// referenceFrame is one open object or array.
type referenceFrame struct {
	object    bool
	expectKey bool // in an object: the next string token is a member name
	names     map[string]struct{}
}

// referenceCheck returns nil when b is one JSON value, valid UTF-8, with no duplicate member names and
// no more than o.MaxDepth nested objects and arrays. Errors never quote the document.
func referenceCheck(b []byte, o strictjson.Options) error {
	if !utf8.Valid(b) {
		return strictjson.ErrInvalidUTF8
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var stack []*referenceFrame
	for {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("%w: %w", strictjson.ErrSyntax, err)
		}
		var top *referenceFrame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				if top != nil && top.object {
					top.expectKey = true // this value completes the member
				}
				if len(stack) >= o.MaxDepth {
					return fmt.Errorf("%w: more than %d levels", strictjson.ErrTooDeep, o.MaxDepth)
				}
				f := &referenceFrame{object: v == '{', expectKey: v == '{'}
				if f.object {
					f.names = map[string]struct{}{}
				}
				stack = append(stack, f)
				continue
			default: // '}' or ']'
				stack = stack[:len(stack)-1]
			}
		case string:
			if top != nil && top.object && top.expectKey {
				name := v
				if o.FoldCase {
					name = referenceFold(v)
				}
				if _, dup := top.names[name]; dup {
					return fmt.Errorf("%w: %q", strictjson.ErrDuplicateName, referenceTruncate(v))
				}
				top.names[name] = struct{}{}
				top.expectKey = false
				continue
			}
			if top != nil && top.object {
				top.expectKey = true
			}
		default: // number, bool, null
			if top != nil && top.object {
				top.expectKey = true
			}
		}
		if len(stack) == 0 {
			break // the top-level value is complete
		}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: data after the value", strictjson.ErrSyntax)
	}
	return nil
}

// fold maps a name to one representative of its Unicode simple case-folding class, the
// equivalence encoding/json uses to match member names to struct fields (so "K", "k" and the
// Kelvin sign are one name, and "ſ" is "s").
func referenceFold(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

// truncate keeps attacker-controlled names short in errors and logs.
func referenceTruncate(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
