package cpu

// Dropout draws its mask from a counter-based generator: element i of a
// call is dropped iff u(seed, offset+i) < rate, where u is a uniform in
// [0, 1) with 24 bits, hashed from the seed and the counter. The mask is a
// pure function of (seed, counter), so it is the same however the work is
// split, on whichever device: 24-bit uniforms are exact in float32, so a GPU
// kernel computing (h>>40)·2⁻²⁴ < rate in float32 decides the same.

// mix64 is the SplitMix64 finalizer, a bijection of uint64 with full
// avalanche.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// golden is SplitMix64's increment, 2⁶⁴/φ: consecutive counters land far
// apart before the final mix.
const golden = 0x9e3779b97f4a7c15

// kept reports whether the counter's element survives, given the seed's
// half of the hash, key = mix64(seed).
func kept(key, counter uint64, rate float32) bool {
	h := mix64(key + counter*golden)
	return float32(h>>40)*0x1p-24 >= rate
}

// DropoutMask reports whether Dropout keeps the element with this counter
// (offset + index) under this seed and rate.
func DropoutMask(seed, counter uint64, rate float32) bool {
	return kept(mix64(seed), counter, rate)
}

// Dropout sets y[i] = x[i]/(1−rate) if DropoutMask(seed, offset+i, rate),
// and 0 otherwise. A rate of 1 or more drops everything; 0 or less copies.
// y may alias x.
func Dropout(p *Pool, x, y []float32, rate float32, seed, offset uint64) {
	checkLen("Dropout", "y", len(y), len(x))
	switch {
	case rate >= 1:
		Fill(p, 0, y)
		return
	case rate <= 0:
		Copy(p, x, y)
		return
	}
	scale := 1 / (1 - rate)
	key := mix64(seed)
	p.For(len(x), grainElems/4, func(lo, hi int) {
		x, y := x[lo:hi], y[lo:hi]
		y = y[:len(x)]
		c := offset + uint64(lo)
		for i, v := range x {
			if kept(key, c+uint64(i), rate) {
				y[i] = v * scale
			} else {
				y[i] = 0
			}
		}
	})
}

// DropoutBackward sets dx to the gradient of Dropout with the same rate,
// seed and offset: dy passed through the same mask and scale.
func DropoutBackward(p *Pool, dy, dx []float32, rate float32, seed, offset uint64) {
	Dropout(p, dy, dx, rate, seed, offset)
}
