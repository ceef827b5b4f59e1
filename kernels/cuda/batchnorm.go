package cuda

import (
	"github.com/flowkit/flowkit/graph"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/units"
)

var (
	// bn_stats_T(const T *x, float *part, int n, int c, int hw, int seg,
	// int S)
	kBNStats = defTyped("batchnorm", "bn_stats", pPtr, pPtr, pI32, pI32, pI32, pI32, pI32)
	// bn_fwd_T(const T *x, const T *gamma, const T *beta, T *y,
	// const float *part, int n, int c, int hw, int seg, int S, float eps)
	kBNFwd = defTyped("batchnorm", "bn_fwd", pPtr, pPtr, pPtr, pPtr, pPtr, pI32, pI32, pI32, pI32, pI32, pF32)
	// bn_bwd_sums_T(const T *x, const T *dy, const float *part,
	// float *sums, int n, int c, int hw, int seg, int S, float eps)
	kBNBwdSums = defTyped("batchnorm", "bn_bwd_sums", pPtr, pPtr, pPtr, pPtr, pI32, pI32, pI32, pI32, pI32, pF32)
	// bn_bwd_T(const T *x, const T *gamma, const T *dy, T *dx, T *dgamma,
	// T *dbeta, const float *part, const float *sums, int n, int c, int hw,
	// int seg, int S, float eps)
	kBNBwd = defTyped("batchnorm", "bn_bwd", pPtr, pPtr, pPtr, pPtr, pPtr, pPtr, pPtr, pPtr, pI32, pI32, pI32, pI32, pI32, pF32)
)

// The split of a channel's values among blocks: enough segments for about
// bnBlocks blocks in all (a wave of them on an H200, 8 blocks on each of
// its 132 multiprocessors), none shorter than bnMinSeg values (16 a
// thread), unless the channel is.
const (
	bnBlocks = 1024
	bnMinSeg = 4096
)

// bnSplit returns the length of the segments a channel of m values is cut
// into, a multiple of the block size, and their number: a function of the
// sizes alone, so that the order of every sum is.
func bnSplit(c, m int) (seg, segs int) {
	want := max(1, min((bnBlocks+c-1)/c, (m+bnMinSeg-1)/bnMinSeg))
	seg = (m + want - 1) / want
	seg = (seg + threads - 1) / threads * threads
	return seg, (m + seg - 1) / seg
}

// bnSizes checks BatchNorm's sizes and returns M = n·hw, the values of a
// channel.
func bnSizes(op string, n, c, hw int) (int, error) {
	if err := fits32(op, "n c hw", n, c, hw); err != nil {
		return 0, err
	}
	return n * hw, nil
}

// BatchNormForwardWorkspace is the scratch BatchNorm needs for these sizes:
// the float32 count, mean and sum of squared deviations of each segment of
// each channel.
func BatchNormForwardWorkspace(n, c, hw int) units.Bytes {
	if n <= 0 || c <= 0 || hw <= 0 {
		return 0
	}
	_, segs := bnSplit(c, n*hw)
	return units.Bytes(3 * 4 * c * segs)
}

// BatchNorm normalizes each channel of x [n, c, hw] (NCHW, hw = H·W) over
// its n·hw values to zero mean and unit variance (the biased variance,
// plus eps) and applies the per-channel affine map: y = (x −
// mean_c)·rstd_c·gamma_c + beta_c, rstd_c = 1/√(var_c+eps), all of dtype dt.
// Statistics are accumulated in float32, by segments of each channel into
// work, which holds BatchNormForwardWorkspace(n, c, hw) bytes, then over
// the segments, in an order fixed by the sizes.
func (k *Kernels) BatchNorm(s *cu.Stream, dt graph.DType, x, gamma, beta, y, work cu.DevicePtr, n, c, hw int, eps float32) error {
	const op = "BatchNorm"
	st, err := kBNStats.of(op, dt)
	if err != nil {
		return err
	}
	f, _ := kBNFwd.of(op, dt)
	m, err := bnSizes(op, n, c, hw)
	if err != nil || m == 0 || c == 0 {
		return err
	}
	if err := notNil(op, "x gamma beta y work", x, gamma, beta, y, work); err != nil {
		return err
	}
	seg, segs := bnSplit(c, m)
	grid := cu.Dim3{X: uint32(c), Y: uint32(segs), Z: 1}
	if err := k.launch(s, st, grid, block1D, x, work, int32(n), int32(c), int32(hw), int32(seg), int32(segs)); err != nil {
		return err
	}
	return k.launch(s, f, grid, block1D, x, gamma, beta, y, work, int32(n), int32(c), int32(hw), int32(seg), int32(segs), eps)
}

// BatchNormWorkspace is the scratch BatchNormBackward needs for these
// sizes: the statistics of BatchNormForwardWorkspace, then the float32 sums
// Σ dy and Σ dy·x̂ of each segment of each channel.
func BatchNormWorkspace(n, c, hw int) units.Bytes {
	if n <= 0 || c <= 0 || hw <= 0 {
		return 0
	}
	_, segs := bnSplit(c, n*hw)
	return units.Bytes(5 * 4 * c * segs)
}

// BatchNormBackward sets dx, dgamma and dbeta to the gradients of
// BatchNorm, recomputing the statistics from x. With x̂ = (x −
// mean)·rstd and g = dy·gamma, channel by channel over its n·hw values,
// dx = rstd·(g − mean(g) − x̂·mean(g·x̂)), dgamma = Σ dy·x̂ and dbeta =
// Σ dy. The statistics and the sums are accumulated in float32, by
// segments of each channel into work, which holds BatchNormWorkspace(n, c,
// hw) bytes, then over the segments, in an order fixed by the sizes.
func (k *Kernels) BatchNormBackward(s *cu.Stream, dt graph.DType, x, gamma, dy, dx, dgamma, dbeta, work cu.DevicePtr, n, c, hw int, eps float32) error {
	const op = "BatchNormBackward"
	st, err := kBNStats.of(op, dt)
	if err != nil {
		return err
	}
	sums, _ := kBNBwdSums.of(op, dt)
	b, _ := kBNBwd.of(op, dt)
	m, err := bnSizes(op, n, c, hw)
	if err != nil || c == 0 {
		return err
	}
	if m == 0 {
		if err := k.Fill(s, dt, 0, dgamma, c); err != nil {
			return err
		}
		return k.Fill(s, dt, 0, dbeta, c)
	}
	if err := notNil(op, "x gamma dy dx dgamma dbeta work", x, gamma, dy, dx, dgamma, dbeta, work); err != nil {
		return err
	}
	seg, segs := bnSplit(c, m)
	part, psums := work, work+cu.DevicePtr(3*4*c*segs)
	grid := cu.Dim3{X: uint32(c), Y: uint32(segs), Z: 1}
	if err := k.launch(s, st, grid, block1D, x, part, int32(n), int32(c), int32(hw), int32(seg), int32(segs)); err != nil {
		return err
	}
	if err := k.launch(s, sums, grid, block1D, x, dy, part, psums, int32(n), int32(c), int32(hw), int32(seg), int32(segs), eps); err != nil {
		return err
	}
	return k.launch(s, b, grid, block1D, x, gamma, dy, dx, dgamma, dbeta, part, psums, int32(n), int32(c), int32(hw), int32(seg), int32(segs), eps)
}
