package cuda

import (
	"github.com/flowkit/flowkit/graph"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/units"
)

var (
	// ln_fwd_{warp,block}_T(const T *x, const T *gamma, const T *beta, T *y,
	// float *mean, float *rstd, int rows, int n, float eps)
	kLNFwdWarp  = defTyped("norm", "ln_fwd_warp", pPtr, pPtr, pPtr, pPtr, pPtr, pPtr, pI32, pI32, pF32)
	kLNFwdBlock = defTyped("norm", "ln_fwd_block", pPtr, pPtr, pPtr, pPtr, pPtr, pPtr, pI32, pI32, pF32)
	// ln_bwd_{warp,block}_T(const T *x, const T *gamma, const T *dy,
	// const float *mean, const float *rstd, T *dx, int rows, int n)
	kLNBwdWarp  = defTyped("norm", "ln_bwd_warp", pPtr, pPtr, pPtr, pPtr, pPtr, pPtr, pI32, pI32)
	kLNBwdBlock = defTyped("norm", "ln_bwd_block", pPtr, pPtr, pPtr, pPtr, pPtr, pPtr, pI32, pI32)
	// ln_params_partial_T(const T *x, const T *dy, const float *mean,
	// const float *rstd, float *pg, float *pb, int rows, int n, int chunk)
	kLNParams = defTyped("norm", "ln_params_partial", pPtr, pPtr, pPtr, pPtr, pPtr, pPtr, pI32, pI32, pI32)

	// rms_fwd_{warp,block}_T(const T *x, const T *gamma, T *y, float *rstd,
	// int rows, int n, float eps)
	kRMSFwdWarp  = defTyped("norm", "rms_fwd_warp", pPtr, pPtr, pPtr, pPtr, pI32, pI32, pF32)
	kRMSFwdBlock = defTyped("norm", "rms_fwd_block", pPtr, pPtr, pPtr, pPtr, pI32, pI32, pF32)
	// rms_bwd_{warp,block}_T(const T *x, const T *gamma, const T *dy,
	// const float *rstd, T *dx, int rows, int n)
	kRMSBwdWarp  = defTyped("norm", "rms_bwd_warp", pPtr, pPtr, pPtr, pPtr, pPtr, pI32, pI32)
	kRMSBwdBlock = defTyped("norm", "rms_bwd_block", pPtr, pPtr, pPtr, pPtr, pPtr, pI32, pI32)
	// rms_params_partial_T(const T *x, const T *dy, const float *rstd,
	// float *pg, int rows, int n, int chunk)
	kRMSParams = defTyped("norm", "rms_params_partial", pPtr, pPtr, pPtr, pPtr, pI32, pI32, pI32)
)

// LayerNorm normalizes each row of x [rows, cols] to zero mean and unit
// variance (the biased variance, plus eps) and applies the per-column affine
// map: y = (x − mean)·rstd·gamma + beta, all of dtype dt. It saves each
// row's mean and rstd = 1/√(var+eps) as float32 ([rows] each, whatever dt
// is) for LayerNormBackward. Statistics are accumulated in float32.
func (k *Kernels) LayerNorm(s *cu.Stream, dt graph.DType, x, gamma, beta, y, mean, rstd cu.DevicePtr, rows, cols int, eps float32) error {
	const op = "LayerNorm"
	w, err := kLNFwdWarp.of(op, dt)
	if err != nil {
		return err
	}
	b, _ := kLNFwdBlock.of(op, dt)
	if err := fits32(op, "rows cols", rows, cols); err != nil || rows == 0 || cols == 0 {
		return err
	}
	if err := notNil(op, "x gamma beta y mean rstd", x, gamma, beta, y, mean, rstd); err != nil {
		return err
	}
	return k.rows(s, w, b, rows, cols, x, gamma, beta, y, mean, rstd, int32(rows), int32(cols), eps)
}

// LayerNormWorkspace is the scratch LayerNormBackward needs for these
// sizes: float32 partial sums of dgamma and dbeta over chunks of rows.
func LayerNormWorkspace(rows, cols int) units.Bytes {
	if rows <= 0 || cols <= 0 {
		return 0
	}
	return units.Bytes(2 * 4 * colChunks(rows) * cols)
}

// LayerNormBackward sets dx, dgamma and dbeta to the gradients of LayerNorm
// given the mean and rstd it saved. With x̂ = (x − mean)·rstd and g =
// dy·gamma, dx = rstd·(g − mean(g) − x̂·mean(g·x̂)) row by row; dgamma =
// Σ_rows dy·x̂ and dbeta = Σ_rows dy are summed over chunks of rows into
// work, which holds LayerNormWorkspace(rows, cols) bytes, then over the
// chunks, in an order fixed by the sizes.
func (k *Kernels) LayerNormBackward(s *cu.Stream, dt graph.DType, x, gamma, dy, mean, rstd, dx, dgamma, dbeta, work cu.DevicePtr, rows, cols int) error {
	const op = "LayerNormBackward"
	w, err := kLNBwdWarp.of(op, dt)
	if err != nil {
		return err
	}
	b, _ := kLNBwdBlock.of(op, dt)
	p, _ := kLNParams.of(op, dt)
	fout, _ := kColSumOut.of(op, dt)
	if err := fits32(op, "rows cols", rows, cols); err != nil || cols == 0 {
		return err
	}
	if rows == 0 {
		if err := k.Fill(s, dt, 0, dgamma, cols); err != nil {
			return err
		}
		return k.Fill(s, dt, 0, dbeta, cols)
	}
	if err := notNil(op, "x gamma dy mean rstd dx dgamma dbeta work", x, gamma, dy, mean, rstd, dx, dgamma, dbeta, work); err != nil {
		return err
	}
	if err := k.rows(s, w, b, rows, cols, x, gamma, dy, mean, rstd, dx, int32(rows), int32(cols)); err != nil {
		return err
	}
	chunk, chunks := colChunk(rows), colChunks(rows)
	pg, pb := work, work+cu.DevicePtr(4*chunks*cols)
	gx := uint32((cols + 31) / 32)
	block := cu.Dim3{X: 32, Y: 8, Z: 1}
	if err := k.launch(s, p, cu.Dim3{X: gx, Y: uint32(chunks), Z: 1}, block, x, dy, mean, rstd, pg, pb, int32(rows), int32(cols), int32(chunk)); err != nil {
		return err
	}
	if err := k.launch(s, fout, cu.Dim3{X: gx, Y: 1, Z: 1}, block, pg, dgamma, int32(chunks), int32(cols), int32(chunks)); err != nil {
		return err
	}
	return k.launch(s, fout, cu.Dim3{X: gx, Y: 1, Z: 1}, block, pb, dbeta, int32(chunks), int32(cols), int32(chunks))
}

// RMSNorm normalizes each row of x [rows, cols] by its root mean square
// (plus eps) and applies the per-column scale: y = x·rstd·gamma, all of
// dtype dt. It saves each row's rstd = 1/√(mean(x²)+eps) as float32
// ([rows], whatever dt is) for RMSNormBackward. Statistics are accumulated
// in float32.
func (k *Kernels) RMSNorm(s *cu.Stream, dt graph.DType, x, gamma, y, rstd cu.DevicePtr, rows, cols int, eps float32) error {
	const op = "RMSNorm"
	w, err := kRMSFwdWarp.of(op, dt)
	if err != nil {
		return err
	}
	b, _ := kRMSFwdBlock.of(op, dt)
	if err := fits32(op, "rows cols", rows, cols); err != nil || rows == 0 || cols == 0 {
		return err
	}
	if err := notNil(op, "x gamma y rstd", x, gamma, y, rstd); err != nil {
		return err
	}
	return k.rows(s, w, b, rows, cols, x, gamma, y, rstd, int32(rows), int32(cols), eps)
}

// RMSNormWorkspace is the scratch RMSNormBackward needs for these sizes:
// float32 partial sums of dgamma over chunks of rows.
func RMSNormWorkspace(rows, cols int) units.Bytes {
	if rows <= 0 || cols <= 0 {
		return 0
	}
	return units.Bytes(4 * colChunks(rows) * cols)
}

// RMSNormBackward sets dx and dgamma to the gradients of RMSNorm given the
// rstd it saved. With x̂ = x·rstd and g = dy·gamma, dx = rstd·(g −
// x̂·mean(g·x̂)) row by row; dgamma = Σ_rows dy·x̂ is summed over chunks of
// rows into work, which holds RMSNormWorkspace(rows, cols) bytes, then over
// the chunks, in an order fixed by the sizes.
func (k *Kernels) RMSNormBackward(s *cu.Stream, dt graph.DType, x, gamma, dy, rstd, dx, dgamma, work cu.DevicePtr, rows, cols int) error {
	const op = "RMSNormBackward"
	w, err := kRMSBwdWarp.of(op, dt)
	if err != nil {
		return err
	}
	b, _ := kRMSBwdBlock.of(op, dt)
	p, _ := kRMSParams.of(op, dt)
	fout, _ := kColSumOut.of(op, dt)
	if err := fits32(op, "rows cols", rows, cols); err != nil || cols == 0 {
		return err
	}
	if rows == 0 {
		return k.Fill(s, dt, 0, dgamma, cols)
	}
	if err := notNil(op, "x gamma dy rstd dx dgamma work", x, gamma, dy, rstd, dx, dgamma, work); err != nil {
		return err
	}
	if err := k.rows(s, w, b, rows, cols, x, gamma, dy, rstd, dx, int32(rows), int32(cols)); err != nil {
		return err
	}
	chunk, chunks := colChunk(rows), colChunks(rows)
	gx := uint32((cols + 31) / 32)
	block := cu.Dim3{X: 32, Y: 8, Z: 1}
	if err := k.launch(s, p, cu.Dim3{X: gx, Y: uint32(chunks), Z: 1}, block, x, dy, rstd, work, int32(rows), int32(cols), int32(chunk)); err != nil {
		return err
	}
	return k.launch(s, fout, cu.Dim3{X: gx, Y: 1, Z: 1}, block, work, dgamma, int32(chunks), int32(cols), int32(chunks))
}
