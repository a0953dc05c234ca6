package market

import (
	"fmt"
	"strconv"
	"strings"
)

// Currency is the settlement currency of the marketplace. Every amount in
// the application is in this currency's minor unit (cents).
const Currency = "usd"

// Cents is an amount of money in minor units of Currency. Never a float.
type Cents int64

// String formats c as dollars with two decimals and a thousands separator,
// e.g. "$1,234.05" or "-$0.50".
func (c Cents) String() string {
	sign := ""
	v := int64(c)
	if v < 0 {
		sign = "-"
		v = -v
	}
	whole := strconv.FormatInt(v/100, 10)
	var b strings.Builder
	for i, r := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return fmt.Sprintf("%s$%s.%02d", sign, b.String(), v%100)
}

// Decimal formats c as a plain decimal without symbol, e.g. "1234.05", the
// form used in form inputs.
func (c Cents) Decimal() string {
	sign := ""
	v := int64(c)
	if v < 0 {
		sign = "-"
		v = -v
	}
	return fmt.Sprintf("%s%d.%02d", sign, v/100, v%100)
}

// ParseCents parses a non-negative dollar amount such as "2.49", "2.5" or
// "3" into cents. More than two decimals, signs, exponents and separators are
// rejected rather than rounded, so what a person types is what is stored.
func ParseCents(s string) (Cents, error) {
	s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), "$"))
	if s == "" {
		return 0, fmt.Errorf("enter an amount, e.g. 2.49")
	}
	whole, frac, hasDot := strings.Cut(s, ".")
	if whole == "" {
		whole = "0"
	}
	if hasDot && (len(frac) == 0 || len(frac) > 2) {
		return 0, fmt.Errorf("use at most two decimals, e.g. 2.49")
	}
	for _, part := range []string{whole, frac} {
		for _, r := range part {
			if r < '0' || r > '9' {
				return 0, fmt.Errorf("enter a plain amount in dollars, e.g. 2.49")
			}
		}
	}
	if len(whole) > 9 {
		return 0, fmt.Errorf("amount is too large")
	}
	w, _ := strconv.ParseInt(whole, 10, 64)
	var f int64
	if frac != "" {
		f, _ = strconv.ParseInt(frac, 10, 64)
		if len(frac) == 1 {
			f *= 10
		}
	}
	return Cents(w*100 + f), nil
}

// MulDivRound returns a*b/c rounded half away from zero, computed without
// overflow for the magnitudes the marketplace handles (prices in cents times
// durations in seconds). This is the one rounding rule for money: compute in
// exact integer units and round once, at the end, half away from zero.
func MulDivRound(a, b, c int64) int64 {
	if c == 0 {
		panic("market: MulDivRound by zero")
	}
	neg := (a < 0) != (b < 0) != (c < 0)
	if a < 0 {
		a = -a
	}
	if b < 0 {
		b = -b
	}
	if c < 0 {
		c = -c
	}
	hi, lo := mul64(uint64(a), uint64(b))
	q, r := div128(hi, lo, uint64(c))
	if 2*r >= uint64(c) {
		q++
	}
	if neg {
		return -int64(q)
	}
	return int64(q)
}
