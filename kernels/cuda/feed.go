package cuda

import (
	"github.com/flowkit/flowkit/graph"
	cu "github.com/flowkit/flowkit/runtime/cuda"
)

// The runtime's bookkeeping inside a captured iteration. The iteration
// number is an int64 in device memory, read when the kernels run, so that a
// CUDA graph captured once replays with each replay's iteration.

var (
	// iter_advance(long long *counter)
	kIterAdvance = def("feed", "iter_advance", pPtr)
	// loss_log(const float *loss, float *hist, const long long *iter, int j, int nloss, int cap)
	kLossLog = def("feed", "loss_log", pPtr, pPtr, pPtr, pI32, pI32, pI32)
	// gather_ints(int *dst, const int *src, const long long *iter, int batch, int from, int n, int rowLen, int rows)
	kGatherInts = def("feed", "gather_ints", pPtr, pPtr, pPtr, pI32, pI32, pI32, pI32, pI32)
	// gather_rows_T(T *dst, const float *images, const long long *iter, int batch, int from, int n, int rowLen, int rows)
	kGatherRows = defTyped("feed", "gather_rows", pPtr, pPtr, pPtr, pI32, pI32, pI32, pI32, pI32)
)

var one = cu.Dim3{X: 1, Y: 1, Z: 1}

// IterAdvance adds one to the int64 iteration counter at counter.
func (k *Kernels) IterAdvance(s *cu.Stream, counter cu.DevicePtr) error {
	if err := notNil("IterAdvance", "counter", counter); err != nil {
		return err
	}
	return k.launch(s, kIterAdvance, one, cu.Dim3{X: 32, Y: 1, Z: 1}, counter)
}

// LossLog copies the float32 loss to hist[(it mod capacity)·nloss + j], it
// the int64 iteration number at iter: hist is a [capacity, nloss] ring of
// the losses of the last capacity iterations.
func (k *Kernels) LossLog(s *cu.Stream, loss, hist, iter cu.DevicePtr, j, nloss, capacity int) error {
	const op = "LossLog"
	if err := fits32(op, "capacity nloss", capacity, nloss); err != nil {
		return err
	}
	if j < 0 || j >= nloss || capacity < 1 {
		return argErr(op, "j = %d, nloss = %d, capacity = %d: want 0 ≤ j < nloss and capacity ≥ 1", j, nloss, capacity)
	}
	if err := notNil(op, "loss hist iter", loss, hist, iter); err != nil {
		return err
	}
	return k.launch(s, kLossLog, one, cu.Dim3{X: 32, Y: 1, Z: 1}, loss, hist, iter, int32(j), int32(nloss), int32(capacity))
}

// gatherCheck validates the sizes of a gather from a pool of rows samples.
func gatherCheck(op string, batch, from, n, rows int) error {
	if err := nonNeg(op, "batch from n", batch, from, n); err != nil {
		return err
	}
	if err := fits32(op, "batch+from+n", batch+from+n); err != nil {
		return err
	}
	if rows < 1 || rows > 1<<31-1 {
		return argErr(op, "rows = %d, want a pool of 1 to 2³¹−1 samples", rows)
	}
	return nil
}

// GatherInts sets row i of dst [n, rowLen] to row (it·batch + from + i)
// mod rows of src [rows, rowLen], for i < n, it the int64 iteration number
// at iter: samples from + i of the iteration's global batch of batch
// samples, drawn from a pool of rows samples of rowLen int32 values (one
// label, or a language model's token ids or next-token labels) as the
// runtime's SyntheticFeeder draws them.
func (k *Kernels) GatherInts(s *cu.Stream, dst, src, iter cu.DevicePtr, batch, from, n, rowLen, rows int) error {
	const op = "GatherInts"
	if err := gatherCheck(op, batch, from, n, rows); err != nil || n == 0 || rowLen == 0 {
		return err
	}
	if err := fits32(op, "n rowLen", n, rowLen); err != nil {
		return err
	}
	if err := fits32(op, "rows rowLen", rows, rowLen); err != nil {
		return err
	}
	if err := notNil(op, "dst src iter", dst, src, iter); err != nil {
		return err
	}
	return k.flat(s, kGatherInts, int64(n*rowLen), dst, src, iter, int32(batch), int32(from), int32(n), int32(rowLen), int32(rows))
}

// GatherRows is GatherInts for samples of rowLen float32 values: row i of
// dst [n, rowLen] (of dtype dt, rounded to it) is row (it·batch + from + i)
// mod rows of images [rows, rowLen].
func (k *Kernels) GatherRows(s *cu.Stream, dt graph.DType, dst, images, iter cu.DevicePtr, batch, from, n, rowLen, rows int) error {
	const op = "GatherRows"
	f, err := kGatherRows.of(op, dt)
	if err != nil {
		return err
	}
	if err := gatherCheck(op, batch, from, n, rows); err != nil {
		return err
	}
	if err := fits32(op, "rows rowLen", rows, rowLen); err != nil || n == 0 || rowLen == 0 {
		return err
	}
	if err := fits32(op, "n rowLen", n, rowLen); err != nil {
		return err
	}
	if err := notNil(op, "dst images iter", dst, images, iter); err != nil {
		return err
	}
	return k.launch(s, f, k.grid(int64(n), 1), block1D, dst, images, iter, int32(batch), int32(from), int32(n), int32(rowLen), int32(rows))
}
