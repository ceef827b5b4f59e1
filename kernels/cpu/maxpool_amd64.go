//go:build !purego

package cpu

import "golang.org/x/sys/cpu"

// backward2x2Rows is the fastest row of 2×2 max-pooling gradients this CPU
// runs (see backward2x2RowsGo), the same bits whichever it is.
var backward2x2Rows = func() func(r0, r1, dy, d0, d1 []float32) {
	if cpu.X86.HasAVX2 {
		return backward2x2RowsAVX2
	}
	return backward2x2RowsGo
}()

// backward2x2RowsAVX2 does eight windows at a time where they hold only +0,
// positive numbers and +Inf (a ReLU's outputs), and leaves the other
// blocks of eight and the last windows (fewer than eight) to the Go row.
// On the MNIST CNN's first pool (BenchmarkMaxPool_MNIST, side by side with
// the Go row on 2 cores): 1.46 → 0.95 ms after a ReLU; values of either
// sign, every block left to Go, 3.1 → 3.3 ms.
func backward2x2RowsAVX2(r0, r1, dy, d0, d1 []float32) {
	n := len(dy) &^ 7
	if n > 0 { // the assembly reads and writes 2n values of each row unchecked
		_, _, _, _ = r0[2*n-1], r1[2*n-1], d0[2*n-1], d1[2*n-1]
	}
	j := 0
	for j < n {
		j += maxPool2x2Back8(n-j, &r0[2*j], &r1[2*j], &dy[j], &d0[2*j], &d1[2*j])
		if j < n { // a block with negatives or NaNs
			backward2x2RowsGo(r0[2*j:2*j+16], r1[2*j:2*j+16], dy[j:j+8], d0[2*j:2*j+16], d1[2*j:2*j+16])
			j += 8
		}
	}
	backward2x2RowsGo(r0[2*n:], r1[2*n:], dy[n:], d0[2*n:], d1[2*n:])
}

// maxPool2x2Back8 routes windows j < n, n a multiple of 8, eight at a time
// as backward2x2RowsGo does, while every value of a block of eight windows
// is +0, positive or +Inf; it returns the number of windows done (n, or
// the start of the first block it left unwritten).
//
//go:noescape
func maxPool2x2Back8(n int, r0, r1, dy, d0, d1 *float32) int
