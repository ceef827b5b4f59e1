package cuda

import (
	"fmt"
	"math"
)

// GemmType selects the data and compute types of a matrix product.
type GemmType int

const (
	// GemmF32: float32 A, B, C; float32 arithmetic (CUBLAS_COMPUTE_32F, no
	// TF32 tensor cores).
	GemmF32 GemmType = iota
	// GemmTF32: float32 A, B, C; inputs rounded to TF32 on tensor cores,
	// float32 accumulation (CUBLAS_COMPUTE_32F_FAST_TF32).
	GemmTF32
	// GemmBF16: bfloat16 A, B, C (and bias); float32 accumulation
	// (CUBLAS_COMPUTE_32F) with float32 alpha and beta.
	GemmBF16
)

func (t GemmType) String() string {
	switch t {
	case GemmF32:
		return "F32"
	case GemmTF32:
		return "TF32"
	case GemmBF16:
		return "BF16"
	}
	return fmt.Sprintf("GemmType(%d)", int(t))
}

// cudaDataType (library_types.h).
type cudaDataType int32

const (
	cudaR32F  cudaDataType = 0  // CUDA_R_32F
	cudaR16BF cudaDataType = 14 // CUDA_R_16BF
)

// cublasComputeType is cublasComputeType_t (cublas_api.h).
type cublasComputeType int32

const (
	cublasCompute32F         cublasComputeType = 68 // CUBLAS_COMPUTE_32F
	cublasCompute32FFastTF32 cublasComputeType = 77 // CUBLAS_COMPUTE_32F_FAST_TF32
)

// cublasOperation is cublasOperation_t (cublas_api.h).
type cublasOperation int32

const (
	cublasOpN cublasOperation = 0 // CUBLAS_OP_N
	cublasOpT cublasOperation = 1 // CUBLAS_OP_T
)

func opOf(trans bool) cublasOperation {
	if trans {
		return cublasOpT
	}
	return cublasOpN
}

// gemmTypes returns the element type, its size in bytes and the compute type.
func (t GemmType) gemmTypes() (data cudaDataType, size int, compute cublasComputeType, ok bool) {
	switch t {
	case GemmF32:
		return cudaR32F, 4, cublasCompute32F, true
	case GemmTF32:
		return cudaR32F, 4, cublasCompute32FFastTF32, true
	case GemmBF16:
		return cudaR16BF, 2, cublasCompute32F, true
	}
	return 0, 0, 0, false
}

// colMajorGemm is a row-major product restated for cuBLAS, which is
// column-major. A row-major r×c matrix with leading dimension ld is, read
// column-major, its c×r transpose with the same ld; so row-major
// C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: cuBLAS's first operand
// is B and its second is A, with m and n swapped and the transpose flags
// kept.
type colMajorGemm struct {
	transa, transb cublasOperation // applied to the first (B) and second (A) operand
	m, n, k        int
	lda, ldb, ldc  int // leading dimensions of the first (B), second (A) and result operands
}

func toColMajor(transA, transB bool, m, n, k, lda, ldb, ldc int) colMajorGemm {
	return colMajorGemm{
		transa: opOf(transB), transb: opOf(transA),
		m: n, n: m, k: k,
		lda: ldb, ldb: lda, ldc: ldc,
	}
}

// checkGemm validates a row-major product's shape: op(A) is m×k, op(B) is
// k×n, C is m×n; A is stored m×k (k×m if transA) with row stride lda, B is
// stored k×n (n×k if transB) with row stride ldb, C with row stride ldc.
// Every value must fit cuBLAS's 32-bit int.
func checkGemm(call string, transA, transB bool, m, n, k, lda, ldb, ldc int) error {
	for _, d := range []struct {
		name string
		v    int
	}{{"m", m}, {"n", n}, {"k", k}, {"lda", lda}, {"ldb", ldb}, {"ldc", ldc}} {
		if d.v < 0 || d.v > math.MaxInt32 {
			return argError(call, "%s = %d out of range", d.name, d.v)
		}
	}
	colsA, colsB := k, n
	if transA {
		colsA = m
	}
	if transB {
		colsB = k
	}
	switch {
	case lda < max(1, colsA):
		return argError(call, "lda = %d < %d, the row length of A (m=%d k=%d transA=%v)", lda, max(1, colsA), m, k, transA)
	case ldb < max(1, colsB):
		return argError(call, "ldb = %d < %d, the row length of B (k=%d n=%d transB=%v)", ldb, max(1, colsB), k, n, transB)
	case ldc < max(1, n):
		return argError(call, "ldc = %d < %d, the row length of C (n=%d)", ldc, max(1, n), n)
	}
	return nil
}

// checkGemmPointers validates device pointers for an m×n×k product of
// elements of size bytes: C is needed unless the product is empty, A and B
// unless k is 0; all must be aligned to the element size.
func checkGemmPointers(call string, size int, m, n, k int, a, b, c DevicePtr) error {
	if m == 0 || n == 0 {
		return nil
	}
	ptrs := []struct {
		name   string
		p      DevicePtr
		needed bool
	}{{"A", a, k > 0}, {"B", b, k > 0}, {"C", c, true}}
	for _, p := range ptrs {
		if p.needed && p.p == 0 {
			return argError(call, "nil %s", p.name)
		}
		if p.p%DevicePtr(size) != 0 {
			return argError(call, "%s = %#x is not aligned to its %d-byte elements", p.name, uintptr(p.p), size)
		}
	}
	return nil
}

// checkBatch validates a strided batch: strides are in elements and may be
// 0 for A and B (broadcast), but consecutive Cs must not overlap.
func checkBatch(call string, m, n, ldc int, strideA, strideB, strideC int64, batch int) error {
	switch {
	case batch < 0 || batch > math.MaxInt32:
		return argError(call, "batch = %d out of range", batch)
	case strideA < 0 || strideB < 0 || strideC < 0:
		return argError(call, "negative stride (A %d, B %d, C %d)", strideA, strideB, strideC)
	}
	if batch > 1 && m > 0 && n > 0 {
		// Disjoint either one after the other or side by side as column
		// blocks of one matrix (attention heads in one row of ldc).
		after := strideC >= int64(m-1)*int64(ldc)+int64(n)
		beside := strideC >= int64(n) && int64(batch-1)*strideC+int64(n) <= int64(ldc)
		if !after && !beside {
			return argError(call, "strideC = %d with m = %d, n = %d, ldc = %d: the batch's Cs overlap", strideC, m, n, ldc)
		}
	}
	return nil
}
