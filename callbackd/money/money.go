// Package money converts between decimal major-unit strings (Alipay's yuan amounts such as
// "99.00") and integer minor units (fen), exactly and without floating point.
//
// Providers send money in two shapes: integers of minor units (WeChat Pay, Stripe) and decimal
// strings of major units (Alipay). Everything inside the platform is an int64 of minor units; this
// package is the one place where the decimal form is read or written.
package money

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// ErrSyntax reports an amount that is not a plain non-negative decimal with at most two
// significant fractional digits.
var ErrSyntax = errors.New("invalid decimal amount")

// ErrRange reports an amount that does not fit in an int64 of minor units.
var ErrRange = errors.New("amount out of range")

// maxInputLen bounds the input so that a hostile body cannot make parsing expensive. Real
// amounts are far shorter.
const maxInputLen = 64

// ParseYuan converts a decimal yuan string into fen. It accepts ASCII digits, optionally followed
// by a dot and at least one digit: "0.1", "0.10" and "00.10" are all 10 fen, "12" is 1200 fen.
// Fractional digits beyond the second are accepted only when they are zeros ("1.000"), because
// the value is still exact; "1.001" is refused rather than rounded. Signs, exponents, spaces,
// thousands separators, a bare or trailing dot and non-ASCII digits are refused.
func ParseYuan(s string) (int64, error) {
	if s == "" || len(s) > maxInputLen {
		return 0, fmt.Errorf("money: parse yuan: %w", ErrSyntax)
	}
	intPart, fracPart, hasDot := strings.Cut(s, ".")
	if intPart == "" || (hasDot && fracPart == "") || !allDigits(intPart) || !allDigits(fracPart) {
		return 0, fmt.Errorf("money: parse yuan %q: %w", s, ErrSyntax)
	}
	if len(fracPart) > 2 {
		if strings.Trim(fracPart[2:], "0") != "" {
			return 0, fmt.Errorf("money: parse yuan %q: more than two decimal places: %w", s, ErrSyntax)
		}
		fracPart = fracPart[:2]
	}
	for len(fracPart) < 2 {
		fracPart += "0"
	}
	var fen int64
	for _, c := range intPart + fracPart {
		d := int64(c - '0')
		if fen > (math.MaxInt64-d)/10 {
			return 0, fmt.Errorf("money: parse yuan %q: %w", s, ErrRange)
		}
		fen = fen*10 + d
	}
	return fen, nil
}

// FormatYuan renders fen as a yuan string with exactly two decimals ("0.10", "99.00"), the form
// Alipay sends and expects. Negative amounts keep their sign.
func FormatYuan(fen int64) string {
	sign := ""
	u := uint64(fen)
	if fen < 0 {
		sign = "-"
		u = uint64(-(fen + 1)) + 1 // safe for math.MinInt64
	}
	return fmt.Sprintf("%s%d.%02d", sign, u/100, u%100)
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
