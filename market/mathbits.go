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

// MulChecked returns a×b and whether it is exact: false when either is
// negative or the product does not fit in an int64. Money that multiplies
// a price by a count (devices, minutes) goes through it, so that an
// overflow is refused instead of wrapping to a negative amount.
func MulChecked(a, b int64) (int64, bool) {
	if a < 0 || b < 0 {
		return 0, false
	}
	hi, lo := mul64(uint64(a), uint64(b))
	if hi != 0 || lo > 1<<63-1 {
		return 0, false
	}
	return int64(lo), true
}

// maxOfferAmount is the most one offer's booking can cost at the offer
// bounds: the highest price a spot bid may reach (SpotBidMaxMultiple × the
// highest on-demand price) × every device an offer can have × the longest
// rental. As a typed constant it fails to compile if the bounds ever let
// that product overflow an int64 (today it is about 5.2×10¹⁴¢).
const maxOfferAmount Cents = MaxPriceCents * SpotBidMaxMultiple * MaxDevicesPerNode * MaxNodes * MaxListingHours
