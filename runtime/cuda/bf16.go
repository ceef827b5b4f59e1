package cuda

import "math"

// BF16FromFloat32 rounds f to the nearest bfloat16, ties to even, and
// returns its bits. NaNs stay NaN (quiet, sign kept); values beyond the
// largest bfloat16 round to infinity.
func BF16FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x0040
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// Float32FromBF16 widens bfloat16 bits to float32, exactly.
func Float32FromBF16(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }
