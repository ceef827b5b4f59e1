package cpu

// Sgemm computes C = alpha·op(A)·op(B) + beta·C for row-major matrices, where
// op(X) is X or Xᵀ. op(A) is m×k, op(B) is k×n, C is m×n; lda, ldb and ldc
// are the row strides of A, B and C as stored. beta == 0 overwrites C
// without reading it.
//
// Naive placeholder with the final signature; the packed, vectorized kernel
// replaces it.
func Sgemm(p *Pool, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	p.For(m, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			for j := range n {
				var s float32
				for l := range k {
					av := a[i*lda+l]
					if transA {
						av = a[l*lda+i]
					}
					bv := b[l*ldb+j]
					if transB {
						bv = b[j*ldb+l]
					}
					s += av * bv
				}
				if beta == 0 {
					c[i*ldc+j] = alpha * s
				} else {
					c[i*ldc+j] = alpha*s + beta*c[i*ldc+j]
				}
			}
		}
	})
}
