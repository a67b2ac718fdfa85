package money

import (
	"errors"
	"math"
	"testing"
)

func TestParseYuan(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"0.00", 0},
		{"0.1", 10},
		{"0.10", 10},
		{"00.10", 10},
		{"0.01", 1},
		{"1", 100},
		{"1.5", 150},
		{"99.00", 9900},
		{"12345.67", 1234567},
		{"1.000", 100},
		{"92233720368547758.07", math.MaxInt64},
	}
	for _, tc := range tests {
		got, err := ParseYuan(tc.in)
		if err != nil {
			t.Errorf("ParseYuan(%q): expected %d fen, got error %v", tc.in, tc.want, err)
			continue
		}
		if got != tc.want {
			t.Errorf("ParseYuan(%q): expected %d fen, got %d", tc.in, tc.want, got)
		}
	}
}

func TestParseYuanRefuses(t *testing.T) {
	tests := []struct {
		in   string
		want error
	}{
		{"", ErrSyntax},
		{"1.001", ErrSyntax},
		{"0.005", ErrSyntax},
		{"-1", ErrSyntax},
		{"+1", ErrSyntax},
		{"1e2", ErrSyntax},
		{" 1", ErrSyntax},
		{"1 ", ErrSyntax},
		{"１", ErrSyntax},
		{"1.", ErrSyntax},
		{".5", ErrSyntax},
		{".", ErrSyntax},
		{"1,000.00", ErrSyntax},
		{"1.2.3", ErrSyntax},
		{"0x10", ErrSyntax},
		{"NaN", ErrSyntax},
		{"Inf", ErrSyntax},
		{"92233720368547758.08", ErrRange},
		{"99999999999999999999", ErrRange},
		{"1234567890123456789012345678901234567890123456789012345678901234567890", ErrSyntax},
	}
	for _, tc := range tests {
		got, err := ParseYuan(tc.in)
		if !errors.Is(err, tc.want) {
			t.Errorf("ParseYuan(%q): expected error %v, got %d, %v", tc.in, tc.want, got, err)
		}
	}
}

func TestFormatYuan(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0.00"},
		{1, "0.01"},
		{10, "0.10"},
		{9900, "99.00"},
		{1234567, "12345.67"},
		{-150, "-1.50"},
		{math.MaxInt64, "92233720368547758.07"},
		{math.MinInt64, "-92233720368547758.08"},
	}
	for _, tc := range tests {
		if got := FormatYuan(tc.in); got != tc.want {
			t.Errorf("FormatYuan(%d): expected %q, got %q", tc.in, tc.want, got)
		}
	}
}

// FuzzParse checks that ParseYuan never panics and that every accepted amount survives a
// round trip through FormatYuan.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"0.1", "0.10", "00.10", "99.00", "1.001", "-1", "1e2", "", " 1", "１"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fen, err := ParseYuan(s)
		if err != nil {
			return
		}
		if fen < 0 {
			t.Fatalf("ParseYuan(%q) = %d: expected a non-negative amount", s, fen)
		}
		back, err := ParseYuan(FormatYuan(fen))
		if err != nil || back != fen {
			t.Fatalf("round trip of %q: expected %d, got %d, %v", s, fen, back, err)
		}
	})
}
