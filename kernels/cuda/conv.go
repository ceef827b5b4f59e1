package cuda

import (
	"fmt"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/kernels/cpu"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/units"
)

var (
	// im2col_T(const T *x, T *col, int C, int H, int W, int R, int S,
	// int OH, int OW, int sh, int sw, int ph, int pw, int ldc,
	// int imgStride)
	kIm2Col = defTyped("conv", "im2col", pPtr, pPtr, pI32, pI32, pI32, pI32, pI32, pI32, pI32, pI32, pI32, pI32, pI32, pI32, pI32)
	// col2im_T(const T *col, T *dx, …the same sizes…)
	kCol2Im = defTyped("conv", "col2im", pPtr, pPtr, pI32, pI32, pI32, pI32, pI32, pI32, pI32, pI32, pI32, pI32, pI32, pI32, pI32)
	// swap01_T(const T *in, T *out, int A, int B, int I)
	kSwap01 = defTyped("conv", "swap01", pPtr, pPtr, pI32, pI32, pI32)
)

// The convolutions are NCHW, with kernels/cpu's ConvShape, on float32 or
// bfloat16 tensors. Their matrix products run in cuBLAS (GemmF32: float32
// arithmetic; GemmBF16: bf16 operands, float32 accumulation); the kernels
// here move data around them, deterministically (no atomics). In bf16 the
// column matrices are bf16 too, and col2im adds a pixel's entries in float.

// ConvWorkspace is the scratch, in bytes, that each of Conv2DForward,
// Conv2DBackwardData and Conv2DBackwardFilter needs for sh on elements of
// dt: the filter gradient's, (C·R·S + K)·N·OutH·OutW elements, which is
// the most of the three, so that one allocation serves all of a layer's
// convolutions.
func ConvWorkspace(sh cpu.ConvShape, dt graph.DType) units.Bytes {
	if sh.Validate() != nil {
		return 0
	}
	return dt.Size() * units.Bytes((sh.C*sh.R*sh.S+sh.K)*sh.N*sh.OutH()*sh.OutW())
}

// convCheck validates sh for the kernels' 32-bit indices, and dt; it
// returns the GEMM type of dt.
func convCheck(op string, sh cpu.ConvShape, dt graph.DType) (cu.GemmType, error) {
	t, err := gemmType(op, dt)
	if err != nil {
		return 0, err
	}
	if err := sh.Validate(); err != nil {
		return 0, fmt.Errorf("%w: %s: %w", ErrArg, op, err)
	}
	crs, ohw := sh.C*sh.R*sh.S, sh.OutH()*sh.OutW()
	for _, c := range []struct {
		names string
		vals  []int
	}{
		{"N C H W", []int{sh.N, sh.C, sh.H, sh.W}},
		{"K C R S", []int{sh.K, sh.C, sh.R, sh.S}},
		{"N K OutH OutW", []int{sh.N, sh.K, sh.OutH(), sh.OutW()}},
		{"C·R·S+K N OutH·OutW", []int{crs + sh.K, sh.N, ohw}},
	} {
		if err := fits32(op, c.names, c.vals...); err != nil {
			return 0, err
		}
	}
	if max(ohw, sh.H*sh.W) > 65535*threads {
		return 0, argErr(op, "%d×%d images are too large", sh.H, sh.W)
	}
	return t, nil
}

// pointwise reports whether the column matrix of an image is the image
// itself (a 1×1 filter at stride 1 without padding).
func pointwise(sh cpu.ConvShape) bool {
	return sh.R == 1 && sh.S == 1 && sh.StrideH == 1 && sh.StrideW == 1 && sh.PadH == 0 && sh.PadW == 0
}

// planeGrid returns the grid and block of the im2col, col2im and swap01
// kernels: a row of blocks per plane, each block a tile of per elements.
func planeGrid(planes, per int) (grid, block cu.Dim3) {
	b := min(threads, (per+31)/32*32)
	return cu.Dim3{X: uint32(planes), Y: uint32((per + b - 1) / b), Z: 1}, cu.Dim3{X: uint32(b), Y: 1, Z: 1}
}

// im2col writes the column matrices of the batch x into col, image n's at
// col + n·imgStride with rows ldc apart.
func (k *Kernels) im2col(s *cu.Stream, f *kernel, sh cpu.ConvShape, x, col cu.DevicePtr, ldc, imgStride int) error {
	grid, block := planeGrid(sh.N*sh.C, sh.OutH()*sh.OutW())
	return k.launch(s, f, grid, block, x, col, int32(sh.C), int32(sh.H), int32(sh.W), int32(sh.R), int32(sh.S),
		int32(sh.OutH()), int32(sh.OutW()), int32(sh.StrideH), int32(sh.StrideW), int32(sh.PadH), int32(sh.PadW),
		int32(ldc), int32(imgStride))
}

// Conv2DForward sets y = conv(x, w): per image, w viewed as [K, C·R·S] times
// the column matrix of x [C·R·S, OutH·OutW], written straight into the
// image's NCHW output, as one strided-batched GEMM over the images (w shared)
// after im2col of the whole batch into work. work holds ConvWorkspace(sh, dt)
// bytes (1×1 filters at stride 1 without padding use none).
func (k *Kernels) Conv2DForward(s *cu.Stream, dt graph.DType, sh cpu.ConvShape, x, w, y, work cu.DevicePtr) error {
	const op = "Conv2DForward"
	t, err := convCheck(op, sh, dt)
	if err != nil {
		return err
	}
	im2col, _ := kIm2Col.of(op, dt)
	crs, ohw := sh.C*sh.R*sh.S, sh.OutH()*sh.OutW()
	g := gemm{t: t, m: sh.K, n: ohw, k: crs, alpha: 1, a: w, lda: crs, b: x, ldb: ohw, sb: int64(sh.C * sh.H * sh.W),
		c: y, ldc: ohw, sc: int64(sh.K * ohw), batch: sh.N}
	if pointwise(sh) {
		if err := notNil(op, "x w y", x, w, y); err != nil {
			return err
		}
		return k.be.gemm(s, g)
	}
	if err := notNil(op, "x w y work", x, w, y, work); err != nil {
		return err
	}
	if err := k.im2col(s, im2col, sh, x, work, ohw, crs*ohw); err != nil {
		return err
	}
	g.b, g.sb = work, int64(crs*ohw)
	return k.be.gemm(s, g)
}

// Conv2DBackwardData sets dx to the gradient of the loss with respect to x:
// per image, wᵀ·dy gives the gradient of the column matrix (one
// strided-batched GEMM into work), which col2im gathers back onto the
// pixels each column entry was copied from, adding in kernels/cpu's order.
func (k *Kernels) Conv2DBackwardData(s *cu.Stream, dt graph.DType, sh cpu.ConvShape, dy, w, dx, work cu.DevicePtr) error {
	const op = "Conv2DBackwardData"
	t, err := convCheck(op, sh, dt)
	if err != nil {
		return err
	}
	col2im, _ := kCol2Im.of(op, dt)
	crs, ohw := sh.C*sh.R*sh.S, sh.OutH()*sh.OutW()
	g := gemm{t: t, transA: true, m: crs, n: ohw, k: sh.K, alpha: 1, a: w, lda: crs, b: dy, ldb: ohw,
		sb: int64(sh.K * ohw), c: dx, ldc: ohw, sc: int64(sh.C * sh.H * sh.W), batch: sh.N}
	if pointwise(sh) {
		if err := notNil(op, "dy w dx", dy, w, dx); err != nil {
			return err
		}
		return k.be.gemm(s, g)
	}
	if err := notNil(op, "dy w dx work", dy, w, dx, work); err != nil {
		return err
	}
	g.c, g.sc = work, int64(crs*ohw)
	if err := k.be.gemm(s, g); err != nil {
		return err
	}
	grid, block := planeGrid(sh.N*sh.C, sh.H*sh.W)
	return k.launch(s, col2im, grid, block, work, dx, int32(sh.C), int32(sh.H), int32(sh.W), int32(sh.R), int32(sh.S),
		int32(sh.OutH()), int32(sh.OutW()), int32(sh.StrideH), int32(sh.StrideW), int32(sh.PadH), int32(sh.PadW),
		int32(ohw), int32(crs*ohw))
}

// Conv2DBackwardFilter sets dw to the gradient of the loss with respect to
// w: dy viewed as [K, N·OutH·OutW] times the transposed column matrix of the
// whole batch [C·R·S, N·OutH·OutW], one GEMM. Both are built in work: the
// column matrix by im2col, dy's view by swapping its two outer axes (a
// batch of one needs no swap).
func (k *Kernels) Conv2DBackwardFilter(s *cu.Stream, dt graph.DType, sh cpu.ConvShape, x, dy, dw, work cu.DevicePtr) error {
	const op = "Conv2DBackwardFilter"
	t, err := convCheck(op, sh, dt)
	if err != nil {
		return err
	}
	if err := notNil(op, "x dy dw work", x, dy, dw, work); err != nil {
		return err
	}
	im2col, _ := kIm2Col.of(op, dt)
	swap01, _ := kSwap01.of(op, dt)
	crs, ohw := sh.C*sh.R*sh.S, sh.OutH()*sh.OutW()
	ld := sh.N * ohw
	if err := k.im2col(s, im2col, sh, x, work, ld, ohw); err != nil {
		return err
	}
	dyt := dy
	if sh.N > 1 {
		dyt = work + cu.DevicePtr(int(dt.Size())*crs*ld)
		grid, block := planeGrid(sh.N*sh.K, ohw)
		if err := k.launch(s, swap01, grid, block, dy, dyt, int32(sh.N), int32(sh.K), int32(ohw)); err != nil {
			return err
		}
	}
	return k.be.gemm(s, gemm{t: t, transB: true, m: sh.K, n: crs, k: ld, alpha: 1, a: dyt, lda: ld, b: work, ldb: ld,
		c: dw, ldc: crs, batch: 1})
}
