package cuda

import (
	"github.com/flowkit/flowkit/graph"
	cu "github.com/flowkit/flowkit/runtime/cuda"
)

// dropout_T(const T *x, T *y, long long n, float rate, float scale,
// unsigned long long key, unsigned long long offset, const long long *iter,
// unsigned long long perIter)
var kDropout = defTyped("dropout", "dropout", pPtr, pPtr, pI64, pF32, pF32, pU64, pU64, pPtr, pU64)

// Dropout sets y[i] = x[i]/(1−rate) if cpu.DropoutMask(seed, c+i, rate) and
// 0 otherwise, for n elements, where the counter base c = offset +
// perIter·it and it is the int64 iteration number at iter in device memory
// (or 0 if iter is nil): read when the kernel runs, so that a captured graph
// replays with each replay's iteration. kernels/cpu's Dropout is the case
// c = offset. A rate of 1 or more drops everything; 0 or less copies. y may
// alias x.
func (k *Kernels) Dropout(s *cu.Stream, dt graph.DType, x, y cu.DevicePtr, rate float32, seed, offset uint64, iter cu.DevicePtr, perIter uint64, n int) error {
	const op = "Dropout"
	f, err := kDropout.of(op, dt)
	if err != nil {
		return err
	}
	if err := nonNeg(op, "n", n); err != nil || n == 0 {
		return err
	}
	if err := notNil(op, "x y", x, y); err != nil {
		return err
	}
	switch {
	case rate >= 1:
		return k.Fill(s, dt, 0, y, n)
	case rate <= 0:
		if x == y {
			return nil
		}
		return k.Copy(s, dt, x, y, n)
	}
	scale := 1 / (1 - rate)
	return k.flat(s, f, int64(n)/vec(dt)+1, x, y, int64(n), rate, scale, mix64(seed), offset, iter, perIter)
}

// DropoutBackward sets dx to the gradient of Dropout with the same rate,
// seed and counters: dy through the same mask and scale.
func (k *Kernels) DropoutBackward(s *cu.Stream, dt graph.DType, dy, dx cu.DevicePtr, rate float32, seed, offset uint64, iter cu.DevicePtr, perIter uint64, n int) error {
	return k.Dropout(s, dt, dy, dx, rate, seed, offset, iter, perIter, n)
}

// mix64 is kernels/cpu's mix64, the SplitMix64 finalizer: the kernel takes
// the seed's half of the hash, mix64(seed), from the host.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
