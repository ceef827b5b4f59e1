package cuda

import (
	"github.com/flowkit/flowkit/graph"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/units"
)

var (
	// sce_fwd_{warp,block}_T(const T *x, const int *labels, double *part, int rows, int n)
	kSCEFwdWarp  = defTyped("loss", "sce_fwd_warp", pPtr, pPtr, pPtr, pI32, pI32)
	kSCEFwdBlock = defTyped("loss", "sce_fwd_block", pPtr, pPtr, pPtr, pI32, pI32)
	// sce_final(const double *part, float *loss, int rows)
	kSCEFinal = def("loss", "sce_final", pPtr, pPtr, pPtr, pI32)
	// sce_bwd_{warp,block}_T(const T *x, const int *labels, const float *dloss, T *dx, int rows, int n)
	kSCEBwdWarp  = defTyped("loss", "sce_bwd_warp", pPtr, pPtr, pPtr, pPtr, pI32, pI32)
	kSCEBwdBlock = defTyped("loss", "sce_bwd_block", pPtr, pPtr, pPtr, pPtr, pI32, pI32)
	// msq_partial_T(const T *x, double *part, long long n, long long chunk)
	kMSQPartial = defTyped("loss", "msq_partial", pPtr, pPtr, pI64, pI64)
	// msq_final(const double *part, float *loss, int parts, long long n)
	kMSQFinal = def("loss", "msq_final", pPtr, pPtr, pI32, pI64)
	// msq_bwd_T(const T *x, const float *dloss, T *dx, long long n)
	kMSQBwd = defTyped("loss", "msq_bwd", pPtr, pPtr, pPtr, pI64)
)

// SoftmaxCrossEntropyWorkspace is the scratch SoftmaxCrossEntropy needs
// for rows rows: a float64 term each.
func SoftmaxCrossEntropyWorkspace(rows int) units.Bytes { return units.Bytes(8 * max(rows, 0)) }

// SoftmaxCrossEntropy writes to loss (a float32 in device memory) the mean
// over the scored rows of the cross-entropy between softmax(logits [rows,
// cols], of dtype dt) and the int32 labels [rows], each row's term
// computed as a log-sum-exp in float64 as kernels/cpu does, and the terms
// added in an order fixed by rows; a row labelled cpu.IgnoreLabel is not
// scored. A warp takes a row of classifier logits, a block a row of a
// language model's vocabulary. The labels are not checked on the host: a
// label outside [0, cols), but IgnoreLabel, makes the loss NaN. No scored
// rows give 0. work holds SoftmaxCrossEntropyWorkspace(rows) bytes.
func (k *Kernels) SoftmaxCrossEntropy(s *cu.Stream, dt graph.DType, logits, labels, loss, work cu.DevicePtr, rows, cols int) error {
	const op = "SoftmaxCrossEntropy"
	w, err := kSCEFwdWarp.of(op, dt)
	if err != nil {
		return err
	}
	b, _ := kSCEFwdBlock.of(op, dt)
	if err := fits32(op, "rows cols", rows, cols); err != nil {
		return err
	}
	if rows == 0 {
		return k.Fill(s, graph.F32, 0, loss, 1)
	}
	if cols == 0 {
		return argErr(op, "cols = 0: no class for the labels")
	}
	if err := notNil(op, "logits labels loss work", logits, labels, loss, work); err != nil {
		return err
	}
	if err := k.rows(s, w, b, rows, cols, logits, labels, work, int32(rows), int32(cols)); err != nil {
		return err
	}
	return k.launch(s, kSCEFinal, one, block1D, work, labels, loss, int32(rows))
}

// SoftmaxCrossEntropyBackward sets dlogits (of dtype dt, as logits) to the
// gradient of SoftmaxCrossEntropy scaled by the float32 dloss in device
// memory: dloss·(softmax(logits) − onehot(labels))/n over the n scored rows,
// zeros on the rows labelled cpu.IgnoreLabel. A label outside [0, cols),
// but IgnoreLabel, makes its row NaN.
func (k *Kernels) SoftmaxCrossEntropyBackward(s *cu.Stream, dt graph.DType, logits, labels, dloss, dlogits cu.DevicePtr, rows, cols int) error {
	const op = "SoftmaxCrossEntropyBackward"
	w, err := kSCEBwdWarp.of(op, dt)
	if err != nil {
		return err
	}
	b, _ := kSCEBwdBlock.of(op, dt)
	if err := fits32(op, "rows cols", rows, cols); err != nil || rows == 0 {
		return err
	}
	if cols == 0 {
		return argErr(op, "cols = 0: no class for the labels")
	}
	if err := notNil(op, "logits labels dloss dlogits", logits, labels, dloss, dlogits); err != nil {
		return err
	}
	return k.rows(s, w, b, rows, cols, logits, labels, dloss, dlogits, int32(rows), int32(cols))
}

// msqChunk is the elements each block of MeanSquare's first pass sums: a
// multiple of 2048 (so every chunk starts 16-byte aligned), and large
// enough for at most msqMaxParts chunks. It depends on n alone, so the loss
// does not depend on the device.
func msqChunk(n int) int {
	c := (n + msqMaxParts - 1) / msqMaxParts
	return max(2048, (c+2047)/2048*2048)
}

const msqMaxParts = 1024

// MeanSquareWorkspace is the scratch MeanSquare needs for n elements.
func MeanSquareWorkspace(n int) units.Bytes {
	if n <= 0 {
		return 0
	}
	c := msqChunk(n)
	return units.Bytes(8 * ((n + c - 1) / c))
}

// MeanSquare writes to loss (a float32 in device memory) Σ x²/n over the n
// elements of x, squared and summed in float64 (as kernels/cpu does) in an
// order fixed by n; no elements give 0. work holds MeanSquareWorkspace(n)
// bytes.
func (k *Kernels) MeanSquare(s *cu.Stream, dt graph.DType, x, loss, work cu.DevicePtr, n int) error {
	const op = "MeanSquare"
	f, err := kMSQPartial.of(op, dt)
	if err != nil {
		return err
	}
	if err := nonNeg(op, "n", n); err != nil {
		return err
	}
	if n == 0 {
		return k.Fill(s, graph.F32, 0, loss, 1)
	}
	if err := notNil(op, "x loss work", x, loss, work); err != nil {
		return err
	}
	c := msqChunk(n)
	parts := (n + c - 1) / c
	if err := k.launch(s, f, cu.Dim3{X: uint32(parts), Y: 1, Z: 1}, block1D, x, work, int64(n), int64(c)); err != nil {
		return err
	}
	return k.launch(s, kMSQFinal, cu.Dim3{X: 1, Y: 1, Z: 1}, block1D, work, loss, int32(parts), int64(n))
}

// MeanSquareBackward sets dx = x·(2·dloss/n), dloss the float32 in device
// memory.
func (k *Kernels) MeanSquareBackward(s *cu.Stream, dt graph.DType, x, dloss, dx cu.DevicePtr, n int) error {
	const op = "MeanSquareBackward"
	f, err := kMSQBwd.of(op, dt)
	if err != nil {
		return err
	}
	if err := nonNeg(op, "n", n); err != nil || n == 0 {
		return err
	}
	if err := notNil(op, "x dloss dx", x, dloss, dx); err != nil {
		return err
	}
	return k.flat(s, f, int64(n)/vec(dt)+1, x, dloss, dx, int64(n))
}
