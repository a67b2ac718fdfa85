// Package strictjson checks a JSON document before an adapter decodes it, for what Go's
// encoding/json lets through silently and other parsers read differently:
//
//   - invalid UTF-8 (encoding/json replaces it with U+FFFD, so two different signed byte strings
//     would mean the same thing);
//   - an object with two members of the same name, compared after unescaping, and optionally
//     under Unicode case folding (encoding/json keeps the last of two equal names and, decoding
//     into a struct, matches fields case-insensitively; other parsers keep the first: the same
//     signed bytes would mean different things to different readers);
//   - nesting deeper than the caller allows (provider bodies are a few levels deep);
//   - anything after the first value.
//
// The check walks the tokens iteratively, so no input can make it recurse.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Errors returned by Check, wrapped with detail.
var (
	ErrInvalidUTF8   = errors.New("not valid UTF-8")
	ErrDuplicateName = errors.New("duplicate member name")
	ErrTooDeep       = errors.New("nested too deeply")
	ErrSyntax        = errors.New("not a single JSON value")
)

// frame is one open object or array.
type frame struct {
	object    bool
	expectKey bool // in an object: the next string token is a member name
	names     map[string]struct{}
}

// Options say how strict Check is.
type Options struct {
	// MaxDepth is the deepest nesting of objects and arrays accepted.
	MaxDepth int
	// FoldCase also refuses names equal under Unicode case folding: use it for documents
	// decoded into structs by encoding/json, which match field names that way. Documents read
	// as maps (exact names) need not refuse names that differ only by case.
	FoldCase bool
}

// Check returns nil when b is one JSON value, valid UTF-8, with no duplicate member names and
// no more than o.MaxDepth nested objects and arrays. Errors never quote the document.
func Check(b []byte, o Options) error {
	if !utf8.Valid(b) {
		return ErrInvalidUTF8
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("%w: %w", ErrSyntax, err)
		}
		var top *frame
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
					return fmt.Errorf("%w: more than %d levels", ErrTooDeep, o.MaxDepth)
				}
				f := &frame{object: v == '{', expectKey: v == '{'}
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
					name = fold(v)
				}
				if _, dup := top.names[name]; dup {
					return fmt.Errorf("%w: %q", ErrDuplicateName, truncate(v))
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
		return fmt.Errorf("%w: data after the value", ErrSyntax)
	}
	return nil
}

// fold maps a name to one representative of its Unicode simple case-folding class, the
// equivalence encoding/json uses to match member names to struct fields (so "K", "k" and the
// Kelvin sign are one name, and "ſ" is "s").
func fold(s string) string {
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
func truncate(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
