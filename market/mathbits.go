package market

import "math/bits"

func mul64(a, b uint64) (hi, lo uint64) { return bits.Mul64(a, b) }

// div128 divides the 128-bit value hi:lo by c. The quotient must fit in 64
// bits, which holds for every product of a price and a duration we form.
func div128(hi, lo, c uint64) (q, r uint64) {
	if hi >= c {
		panic("market: money arithmetic overflow")
	}
	return bits.Div64(hi, lo, c)
}
