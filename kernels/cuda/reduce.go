package cuda

import (
	"github.com/flowkit/flowkit/graph"
	cu "github.com/flowkit/flowkit/runtime/cuda"
)

var (
	// rowsum_A_B(const A *x, B *y, int rows, int n)
	kRowSumF32F32   = def("reduce", "rowsum_f32_f32", pPtr, pPtr, pI32, pI32)
	kRowSumBF16BF16 = def("reduce", "rowsum_bf16_bf16", pPtr, pPtr, pI32, pI32)
	kRowSumBF16F32  = def("reduce", "rowsum_bf16_f32", pPtr, pPtr, pI32, pI32)
	kRowSum         = typed{kRowSumF32F32, kRowSumBF16BF16} // T to T
	kRowSumToF32    = typed{kRowSumF32F32, kRowSumBF16F32}  // T to float32

	// midsum_T(const T *x, T *y, int outer, int r, int inner)
	kMidSum = defTyped("reduce", "midsum", pPtr, pPtr, pI32, pI32, pI32)

	// colsum_A_B(const A *x, B *y, int rows, int cols, int chunk)
	kColSumF32F32  = def("reduce", "colsum_f32_f32", pPtr, pPtr, pI32, pI32, pI32)
	kColSumBF16F32 = def("reduce", "colsum_bf16_f32", pPtr, pPtr, pI32, pI32, pI32)
	kColSumF32BF16 = def("reduce", "colsum_f32_bf16", pPtr, pPtr, pI32, pI32, pI32)
	kColSumIn      = typed{kColSumF32F32, kColSumBF16F32} // T to float32 partial sums
	kColSumOut     = typed{kColSumF32F32, kColSumF32BF16} // float32 partial sums to T

	// broadcast_axis_T(const T *x, T *y, int outer, int r, int inner)
	kBroadcastAxis = defTyped("reduce", "broadcast_axis", pPtr, pPtr, pI32, pI32, pI32)
)

// ReduceSum sets y[o,i] = Σ_j x[o,j,i], x viewed as [outer, r, inner] and y
// as [outer, inner]. Rows (inner = 1) are summed in double, by a warp, or
// by a block when they are long and few; otherwise a thread sums each
// (o, i) in order of j in float, as kernels/cpu does.
func (k *Kernels) ReduceSum(s *cu.Stream, dt graph.DType, x, y cu.DevicePtr, outer, r, inner int) error {
	const op = "ReduceSum"
	f, err := kMidSum.of(op, dt)
	if err != nil {
		return err
	}
	if err := fits32(op, "outer r inner", outer, r, inner); err != nil {
		return err
	}
	if outer == 0 || inner == 0 {
		return nil
	}
	if r == 0 {
		return k.Fill(s, dt, 0, y, outer*inner)
	}
	if err := notNil(op, "x y", x, y); err != nil {
		return err
	}
	if inner == 1 {
		rs, _ := kRowSum.of(op, dt)
		return k.rowSum(s, rs, x, y, outer, r)
	}
	return k.flat(s, f, int64(outer)*int64(inner), x, y, int32(outer), int32(r), int32(inner))
}

// rowSum launches a rowsum kernel over rows of n: a block of threads to a
// row when the rows are long and few, else a warp. The choice depends on the
// sizes alone, since it decides the order of the sum.
func (k *Kernels) rowSum(s *cu.Stream, f *kernel, x, y cu.DevicePtr, rows, n int) error {
	if n >= 4096 && rows < 1024 {
		return k.launch(s, f, k.grid(int64(rows), 1), block1D, x, y, int32(rows), int32(n))
	}
	return k.launch(s, f, k.grid(int64(rows), warpsPerBlock), cu.Dim3{X: 32, Y: warpsPerBlock, Z: 1}, x, y, int32(rows), int32(n))
}

// colChunk is the number of rows each block of colsum's first pass sums:
// 64, or more to keep the chunks within a grid's 65535 rows of blocks.
func colChunk(rows int) int { return max(64, (rows+65534)/65535) }

// colChunks is the number of chunks of colsum's first pass.
func colChunks(rows int) int { c := colChunk(rows); return (rows + c - 1) / c }

// colSum sets y[j] = Σ_r x[r, j] for x [rows, cols] of dtype in and y of
// dtype out: each chunk of colChunk rows is summed into float32 partials in
// work ([colChunks(rows), cols]), then the partials are added in order of
// chunk. When x is already float32 and fits in one chunk, the first pass is
// skipped.
func (k *Kernels) colSum(s *cu.Stream, in, out graph.DType, x, y, work cu.DevicePtr, rows, cols int) error {
	const op = "colSum"
	fin, err := kColSumIn.of(op, in)
	if err != nil {
		return err
	}
	fout, err := kColSumOut.of(op, out)
	if err != nil {
		return err
	}
	block := cu.Dim3{X: 32, Y: 8, Z: 1}
	gx := uint32((cols + 31) / 32)
	chunk, chunks := colChunk(rows), colChunks(rows)
	if in == graph.F32 && chunks == 1 {
		return k.launch(s, fout, cu.Dim3{X: gx, Y: 1, Z: 1}, block, x, y, int32(rows), int32(cols), int32(rows))
	}
	if err := k.launch(s, fin, cu.Dim3{X: gx, Y: uint32(chunks), Z: 1}, block, x, work, int32(rows), int32(cols), int32(chunk)); err != nil {
		return err
	}
	return k.launch(s, fout, cu.Dim3{X: gx, Y: 1, Z: 1}, block, work, y, int32(chunks), int32(cols), int32(chunks))
}

// BroadcastAxis sets y[o,j,i] = x[o,i], copying x along the middle axis of
// y [outer, r, inner]: the gradient of ReduceSum.
func (k *Kernels) BroadcastAxis(s *cu.Stream, dt graph.DType, x, y cu.DevicePtr, outer, r, inner int) error {
	const op = "BroadcastAxis"
	f, err := kBroadcastAxis.of(op, dt)
	if err != nil {
		return err
	}
	if err := fits32(op, "outer r inner", outer, r, inner); err != nil {
		return err
	}
	n := int64(outer) * int64(r) * int64(inner)
	if n == 0 {
		return nil
	}
	if err := notNil(op, "x y", x, y); err != nil {
		return err
	}
	return k.flat(s, f, n/vec(dt)+1, x, y, int32(outer), int32(r), int32(inner))
}
