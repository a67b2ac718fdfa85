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
// The check is one pass of a byte scanner with an explicit stack, so no input can make it
// recurse. It validates the JSON grammar itself (the grammar encoding/json accepts) and, on the
// common path (names without escapes, ASCII names when folding case), allocates nothing.
package strictjson

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Errors returned by Check, wrapped with detail.
var (
	ErrInvalidUTF8   = errors.New("not valid UTF-8")
	ErrDuplicateName = errors.New("duplicate member name")
	ErrTooDeep       = errors.New("nested too deeply")
	ErrSyntax        = errors.New("not a single JSON value")
)

// Options say how strict Check is.
type Options struct {
	// MaxDepth is the deepest nesting of objects and arrays accepted.
	MaxDepth int
	// FoldCase also refuses names equal under Unicode case folding: use it for documents
	// decoded into structs by encoding/json, which match field names that way. Documents read
	// as maps (exact names) need not refuse names that differ only by case.
	FoldCase bool
}

// mapAfter is how many member names an object keeps in its slice, compared linearly, before
// they move to a map: provider objects have a dozen members, a hostile one may have millions.
const mapAfter = 16

// frame is one open object or array.
type frame struct {
	object bool
	// names[first:] are this object's member names while it has at most mapAfter of them;
	// arena[arenaStart:] holds the ones that had to be unescaped or folded.
	first, arenaStart int
	set               map[string]struct{} // this object's names once it has more than mapAfter
}

// name is one member name in the form names are compared in: key is the unescaped name, or
// its simple case folding under FoldCase; upper says key is raw ASCII still to be upper-cased
// (ASCII folds to its upper case, which is the least rune of each folding class).
type name struct {
	key   []byte
	upper bool
}

// scanner states: what the next token must be.
const (
	wantValue = iota // any value
	wantName         // a member name (after '{' or ',' in an object)
	wantMore         // ',' or the closing bracket, or the end of the input at the top level
)

// Check returns nil when b is one JSON value, valid UTF-8, with no duplicate member names and
// no more than o.MaxDepth nested objects and arrays. Errors never quote the document, except a
// duplicate name cut to 64 bytes.
func Check(b []byte, o Options) error {
	if !utf8.Valid(b) {
		return ErrInvalidUTF8
	}
	// The stacks start in arrays on this function's stack: provider bodies never outgrow them.
	// The arena of unescaped and folded names is allocated only when a name needs it (names
	// refer into it, so it cannot live on this stack).
	var (
		framesBuf [16]frame
		namesBuf  [48]name
		arena     []byte
	)
	frames, names := framesBuf[:0], namesBuf[:0]
	i, state := skipSpace(b, 0), wantValue
	for {
		switch state {
		case wantValue:
			if i >= len(b) {
				return syntaxError(i, "unexpected end of input")
			}
			switch c := b[i]; c {
			case '{', '[':
				if len(frames) >= o.MaxDepth {
					return fmt.Errorf("%w: more than %d levels", ErrTooDeep, o.MaxDepth)
				}
				frames = append(frames, frame{object: c == '{', first: len(names), arenaStart: len(arena)})
				i = skipSpace(b, i+1)
				switch {
				case i < len(b) && b[i] == c+2: // '}' is '{'+2, ']' is '['+2
					frames, names, arena = pop(frames, names, arena)
					i, state = i+1, wantMore
				case c == '{':
					state = wantName
				}
				continue
			case '"':
				end, _, _, err := scanString(b, i)
				if err != nil {
					return err
				}
				i = end
			case 't':
				if !hasPrefix(b[i:], "true") {
					return syntaxError(i, "invalid literal")
				}
				i += 4
			case 'f':
				if !hasPrefix(b[i:], "false") {
					return syntaxError(i, "invalid literal")
				}
				i += 5
			case 'n':
				if !hasPrefix(b[i:], "null") {
					return syntaxError(i, "invalid literal")
				}
				i += 4
			default:
				end, err := scanNumber(b, i)
				if err != nil {
					return err
				}
				i = end
			}
			state = wantMore
		case wantName:
			if i >= len(b) || b[i] != '"' {
				return syntaxError(i, "expected a member name")
			}
			end, escaped, nonASCII, err := scanString(b, i)
			if err != nil {
				return err
			}
			raw := b[i+1 : end-1]
			top := &frames[len(frames)-1]
			n := name{key: raw, upper: o.FoldCase}
			if escaped || (o.FoldCase && nonASCII) {
				start := len(arena)
				arena = unescape(arena, raw)
				if o.FoldCase {
					unescaped := len(arena)
					arena = fold(arena, arena[start:unescaped])
					arena = append(arena[:start], arena[unescaped:]...)
				}
				n = name{key: arena[start:len(arena):len(arena)]}
			}
			if names, err = addName(top, names, n, raw); err != nil {
				return err
			}
			i = skipSpace(b, end)
			if i >= len(b) || b[i] != ':' {
				return syntaxError(i, "expected ':' after a member name")
			}
			i, state = skipSpace(b, i+1), wantValue
			continue
		case wantMore:
			i = skipSpace(b, i)
			if len(frames) == 0 {
				if i != len(b) {
					return fmt.Errorf("%w: data after the value", ErrSyntax)
				}
				return nil
			}
			top := &frames[len(frames)-1]
			switch {
			case i >= len(b):
				return syntaxError(i, "unexpected end of input")
			case b[i] == ',':
				i = skipSpace(b, i+1)
				if top.object {
					state = wantName
				} else {
					state = wantValue
				}
			case top.object && b[i] == '}', !top.object && b[i] == ']':
				frames, names, arena = pop(frames, names, arena)
				i++
			default:
				return syntaxError(i, "expected ',' or a closing bracket")
			}
		}
	}
}

// pop closes the innermost object or array, dropping its names.
func pop(frames []frame, names []name, arena []byte) ([]frame, []name, []byte) {
	top := frames[len(frames)-1]
	return frames[:len(frames)-1], names[:top.first], arena[:top.arenaStart]
}

// addName records n in the innermost object, refusing it if the object already has it. raw is
// the name as written, for the error.
func addName(top *frame, names []name, n name, raw []byte) ([]name, error) {
	if top.set == nil {
		for _, m := range names[top.first:] {
			if equal(m, n) {
				return names, duplicate(raw)
			}
		}
		if len(names)-top.first < mapAfter {
			return append(names, n), nil
		}
		top.set = make(map[string]struct{}, 2*mapAfter)
		for _, m := range names[top.first:] {
			top.set[string(canonical(nil, m))] = struct{}{}
		}
		names = names[:top.first]
	}
	var buf [64]byte
	key := canonical(buf[:0], n)
	if _, dup := top.set[string(key)]; dup {
		return names, duplicate(raw)
	}
	top.set[string(key)] = struct{}{}
	return names, nil
}

// equal reports whether two names are the same name.
func equal(a, b name) bool {
	if len(a.key) != len(b.key) {
		return false
	}
	if !a.upper && !b.upper {
		return string(a.key) == string(b.key)
	}
	for i := range a.key {
		x, y := a.key[i], b.key[i]
		if a.upper {
			x = upperASCII(x)
		}
		if b.upper {
			y = upperASCII(y)
		}
		if x != y {
			return false
		}
	}
	return true
}

// canonical appends n's comparison form to dst (n.key itself when there is nothing to do).
func canonical(dst []byte, n name) []byte {
	if !n.upper {
		return n.key
	}
	for _, c := range n.key {
		dst = append(dst, upperASCII(c))
	}
	return dst
}

func upperASCII(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - ('a' - 'A')
	}
	return c
}

// duplicate is the error for the duplicate name written as raw (unescaped for the message).
func duplicate(raw []byte) error {
	return fmt.Errorf("%w: %q", ErrDuplicateName, truncate(string(unescape(nil, raw))))
}

func syntaxError(offset int, what string) error {
	return fmt.Errorf("%w: %s at byte %d", ErrSyntax, what, offset)
}

func hasPrefix(b []byte, lit string) bool {
	return len(b) >= len(lit) && string(b[:len(lit)]) == lit
}

// skipSpace returns the index of the first byte at or after i that is not JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanString validates the string starting with the quote at b[i] and returns the index just
// after its closing quote, whether it has escapes and whether it has non-ASCII bytes.
func scanString(b []byte, i int) (end int, escaped, nonASCII bool, err error) {
	for j := i + 1; j < len(b); {
		c := b[j]
		switch {
		case c == '"':
			return j + 1, escaped, nonASCII, nil
		case c == '\\':
			escaped = true
			if j+1 >= len(b) {
				return 0, false, false, syntaxError(j, "unterminated string")
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if j+6 > len(b) || hex4(b[j+2:j+6]) < 0 {
					return 0, false, false, syntaxError(j, `invalid \u escape`)
				}
				j += 6
			default:
				return 0, false, false, syntaxError(j, "invalid escape")
			}
		case c < 0x20:
			return 0, false, false, syntaxError(j, "control character in a string")
		default:
			if c >= utf8.RuneSelf {
				nonASCII = true
			}
			j++
		}
	}
	return 0, false, false, syntaxError(len(b), "unterminated string")
}

// scanNumber validates the number starting at b[i] and returns the index just after it.
func scanNumber(b []byte, i int) (int, error) {
	start := i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return 0, syntaxError(start, "invalid value")
	}
	if i < len(b) && b[i] == '.' {
		if i+1 >= len(b) || !isDigit(b[i+1]) {
			return 0, syntaxError(i, "invalid number")
		}
		i = digits(b, i+1)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return 0, syntaxError(i, "invalid number")
		}
		i = digits(b, i)
	}
	return i, nil
}

func digits(b []byte, i int) int {
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	return i
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// hex4 decodes four hex digits, or returns -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// unescape appends the value of the validated string content raw to dst the way encoding/json
// decodes it: a \u surrogate pair is one rune, any other surrogate escape is U+FFFD.
func unescape(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			dst = append(dst, c)
			i++
			continue
		}
		switch raw[i+1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(raw[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				var r2 rune = -1
				if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					r2 = hex4(raw[i+2:])
				}
				if pair := utf16.DecodeRune(r, r2); pair != unicode.ReplacementChar {
					r = pair
					i += 6
				} else {
					r = unicode.ReplacementChar
				}
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // '"', '\\', '/'
			dst = append(dst, raw[i+1])
		}
		i += 2
	}
	return dst
}

// fold appends to dst s with each rune mapped to the least rune of its Unicode simple
// case-folding class, the equivalence encoding/json uses to match member names to struct fields
// (so "K", "k" and the Kelvin sign are one name, and "ſ" is "s").
func fold(dst, s []byte) []byte {
	for len(s) > 0 {
		if c := s[0]; c < utf8.RuneSelf {
			dst = append(dst, upperASCII(c))
			s = s[1:]
			continue
		}
		r, size := utf8.DecodeRune(s)
		s = s[size:]
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		dst = utf8.AppendRune(dst, least)
	}
	return dst
}

// truncate keeps attacker-controlled names short in errors and logs.
func truncate(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
