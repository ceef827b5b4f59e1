package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"
)

// refGemm is a row-major sgemm in float64: it returns c with its m×n
// region replaced by alpha·op(A)·op(B) + beta·C and everything else kept.
func refGemm(transA, transB bool, m, n, k int, alpha float64, a []float32, lda int,
	b []float32, ldb int, beta float64, c []float32, ldc int) []float64 {
	out := make([]float64, len(c))
	for i, v := range c {
		out[i] = float64(v)
	}
	at := func(i, p int) float64 {
		if transA {
			return float64(a[p*lda+i])
		}
		return float64(a[i*lda+p])
	}
	bt := func(p, j int) float64 {
		if transB {
			return float64(b[j*ldb+p])
		}
		return float64(b[p*ldb+j])
	}
	for i := range m {
		for j := range n {
			var sum float64
			for p := range k {
				sum += at(i, p) * bt(p, j)
			}
			out[i*ldc+j] = alpha*sum + beta*float64(c[i*ldc+j])
		}
	}
	return out
}

// colMajorRef is the reference BLAS sgemm, column-major as cuBLAS reads
// its arguments: C = alpha·op(A)·op(B) + beta·C with op(A) m×k, op(B) k×n,
// element (i, j) of a matrix with leading dimension ld at i + j·ld.
func colMajorRef(g colMajorGemm, alpha float64, a []float32, b []float32, beta float64, c []float64) {
	at := func(i, p int) float64 {
		if g.transa == cublasOpT {
			return float64(a[p+i*g.lda])
		}
		return float64(a[i+p*g.lda])
	}
	bt := func(p, j int) float64 {
		if g.transb == cublasOpT {
			return float64(b[j+p*g.ldb])
		}
		return float64(b[p+j*g.ldb])
	}
	for j := range g.n {
		for i := range g.m {
			var sum float64
			for p := range g.k {
				sum += at(i, p) * bt(p, j)
			}
			c[i+j*g.ldc] = alpha*sum + beta*c[i+j*g.ldc]
		}
	}
}

func randFloats(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.Float64()*2 - 1)
	}
	return x
}

// gemmCase is a row-major product with padded leading dimensions.
type gemmCase struct {
	transA, transB bool
	m, n, k        int
	lda, ldb, ldc  int
}

func (g gemmCase) String() string {
	return fmt.Sprintf("tA=%v,tB=%v,%dx%dx%d", g.transA, g.transB, g.m, g.n, g.k)
}

// storedShape returns the rows and columns of A or B as stored.
func (g gemmCase) sizes() (a, b, c int) {
	rowsA, rowsB := g.m, g.k
	if g.transA {
		rowsA = g.k
	}
	if g.transB {
		rowsB = g.n
	}
	return rowsA * g.lda, rowsB * g.ldb, g.m * g.ldc
}

// gemmCases covers the four transpose combinations with non-square shapes
// and leading dimensions larger than needed.
func gemmCases(m, n, k, pad int) []gemmCase {
	var cs []gemmCase
	for _, tA := range []bool{false, true} {
		for _, tB := range []bool{false, true} {
			g := gemmCase{transA: tA, transB: tB, m: m, n: n, k: k, ldc: n + pad}
			g.lda, g.ldb = k+pad, n+pad
			if tA {
				g.lda = m + pad
			}
			if tB {
				g.ldb = k + pad
			}
			cs = append(cs, g)
		}
	}
	return cs
}

func TestColMajorMappingMatchesRowMajor(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, g := range append(gemmCases(5, 3, 4, 2), gemmCases(1, 7, 2, 0)...) {
		t.Run(g.String(), func(t *testing.T) {
			sa, sb, sc := g.sizes()
			a, b, c := randFloats(r, sa), randFloats(r, sb), randFloats(r, sc)
			want := refGemm(g.transA, g.transB, g.m, g.n, g.k, 1.5, a, g.lda, b, g.ldb, -0.5, c, g.ldc)

			cm := toColMajor(g.transA, g.transB, g.m, g.n, g.k, g.lda, g.ldb, g.ldc)
			got := make([]float64, len(c))
			for i, v := range c {
				got[i] = float64(v)
			}
			colMajorRef(cm, 1.5, b, a, -0.5, got) // cuBLAS's first operand is B
			for i := range want {
				if math.Abs(got[i]-want[i]) > 1e-12 {
					t.Fatalf("element %d: got %v, want %v", i, got[i], want[i])
				}
			}
			// The column-major leading-dimension rules hold for the mapped call.
			rowsFirst, rowsSecond := cm.m, cm.k
			if cm.transa == cublasOpT {
				rowsFirst = cm.k
			}
			if cm.transb == cublasOpT {
				rowsSecond = cm.n
			}
			if cm.lda < max(1, rowsFirst) || cm.ldb < max(1, rowsSecond) || cm.ldc < max(1, cm.m) {
				t.Errorf("mapped call %+v breaks cuBLAS's leading-dimension rules", cm)
			}
		})
	}
}

// TestLtLayoutsMatchMapping checks that the cuBLASLt layouts describe the
// same stored matrices as the cuBLAS mapping: the op applied to each layout
// gives the m×k and k×n operands of the column-major product.
func TestLtLayoutsMatchMapping(t *testing.T) {
	for _, g := range gemmCases(5, 3, 4, 2) {
		cm := toColMajor(g.transA, g.transB, g.m, g.n, g.k, g.lda, g.ldb, g.ldc)
		first, second, out := ltLayouts(g.transA, g.transB, g.m, g.n, g.k, g.lda, g.ldb, g.ldc)
		opShape := func(l ltLayout, op cublasOperation) (uint64, uint64) {
			if op == cublasOpT {
				return l.cols, l.rows
			}
			return l.rows, l.cols
		}
		r1, c1 := opShape(first, cm.transa)
		r2, c2 := opShape(second, cm.transb)
		if r1 != uint64(cm.m) || c1 != uint64(cm.k) || r2 != uint64(cm.k) || c2 != uint64(cm.n) {
			t.Errorf("%v: op shapes %dx%d · %dx%d, want %dx%d · %dx%d", g, r1, c1, r2, c2, cm.m, cm.k, cm.k, cm.n)
		}
		if first.ld != int64(cm.lda) || second.ld != int64(cm.ldb) || first.ld < int64(first.rows) || second.ld < int64(second.rows) {
			t.Errorf("%v: leading dimensions %d, %d do not match %d, %d or rows", g, first.ld, second.ld, cm.lda, cm.ldb)
		}
		if out != (ltLayout{rows: uint64(g.n), cols: uint64(g.m), ld: int64(g.ldc)}) {
			t.Errorf("%v: output layout %+v", g, out)
		}
	}
}

func TestCheckGemm(t *testing.T) {
	tests := []struct {
		name           string
		transA, transB bool
		m, n, k        int
		lda, ldb, ldc  int
		wantErr        string
	}{
		{"minimal", false, false, 4, 3, 2, 2, 3, 3, ""},
		{"transposed minimal", true, true, 4, 3, 2, 4, 2, 3, ""},
		{"empty", false, false, 0, 0, 0, 1, 1, 1, ""},
		{"lda too small", false, false, 4, 3, 2, 1, 3, 3, "lda = 1 < 2"},
		{"lda too small transposed", true, false, 4, 3, 2, 2, 3, 3, "lda = 2 < 4"},
		{"ldb too small", false, false, 4, 3, 2, 2, 2, 3, "ldb = 2 < 3"},
		{"ldb too small transposed", false, true, 4, 3, 5, 5, 4, 3, "ldb = 4 < 5"},
		{"ldc too small", false, false, 4, 3, 2, 2, 3, 2, "ldc = 2 < 3"},
		{"negative m", false, false, -1, 3, 2, 2, 3, 3, "m = -1 out of range"},
		{"huge k", false, false, 1, 1, 1 << 31, 1 << 31, 1, 1, "k = 2147483648 out of range"},
		{"zero ld", false, false, 0, 0, 0, 0, 1, 1, "lda = 0 < 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkGemm("Gemm", tt.transA, tt.transB, tt.m, tt.n, tt.k, tt.lda, tt.ldb, tt.ldc)
			checkErr(t, err, tt.wantErr)
		})
	}
}

func TestCheckGemmPointers(t *testing.T) {
	tests := []struct {
		name    string
		size    int
		m, n, k int
		a, b, c DevicePtr
		wantErr string
	}{
		{"ok", 4, 2, 2, 2, 256, 512, 1024, ""},
		{"nil C", 4, 2, 2, 2, 256, 512, 0, "nil C"},
		{"nil A", 2, 2, 2, 2, 0, 512, 1024, "nil A"},
		{"k=0 needs no A or B", 4, 2, 2, 0, 0, 0, 1024, ""},
		{"empty needs nothing", 4, 0, 2, 2, 0, 0, 0, ""},
		{"misaligned B", 4, 2, 2, 2, 256, 514, 1024, "B = 0x202 is not aligned"},
		{"bf16 2-byte aligned", 2, 2, 2, 2, 258, 514, 1026, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, checkGemmPointers("Gemm", tt.size, tt.m, tt.n, tt.k, tt.a, tt.b, tt.c), tt.wantErr)
		})
	}
}

func TestCheckBatch(t *testing.T) {
	tests := []struct {
		name                      string
		m, n, ldc                 int
		strideA, strideB, strideC int64
		batch                     int
		wantErr                   string
	}{
		{"ok", 3, 4, 5, 20, 0, 14, 2, ""},
		{"overlapping C", 3, 4, 5, 20, 20, 13, 2, "strideC = 13 with m = 3, n = 4, ldc = 5"},
		{"heads side by side", 1024, 64, 768, 64, 64, 64, 12, ""},
		{"column blocks too wide for ldc", 1024, 64, 768, 64, 64, 64, 13, "overlap"},
		{"column blocks overlapping", 1024, 64, 768, 64, 64, 63, 12, "overlap"},
		{"single batch may overlap", 3, 4, 5, 0, 0, 0, 1, ""},
		{"negative stride", 3, 4, 5, -1, 0, 14, 2, "negative stride"},
		{"negative batch", 3, 4, 5, 0, 0, 14, -1, "batch = -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, checkBatch("GemmStridedBatched", tt.m, tt.n, tt.ldc, tt.strideA, tt.strideB, tt.strideC, tt.batch), tt.wantErr)
		})
	}
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("got error %v, want none", err)
	case want != "" && err == nil:
		t.Errorf("got no error, want one containing %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Errorf("got error %q, want one containing %q", err, want)
	}
}

func TestGemmTypes(t *testing.T) {
	tests := []struct {
		t       GemmType
		data    cudaDataType
		size    int
		compute cublasComputeType
	}{
		{GemmF32, 0, 4, 68},
		{GemmTF32, 0, 4, 77},
		{GemmBF16, 14, 2, 68},
	}
	for _, tt := range tests {
		data, size, compute, ok := tt.t.gemmTypes()
		if !ok || data != tt.data || size != tt.size || compute != tt.compute {
			t.Errorf("%v: got %d, %d, %d, %v; want %d, %d, %d", tt.t, data, size, compute, ok, tt.data, tt.size, tt.compute)
		}
	}
	if _, _, _, ok := GemmType(7).gemmTypes(); ok {
		t.Error("GemmType(7) accepted")
	}
}

func TestHeuristicResultLayout(t *testing.T) {
	var r ltHeuristicResult
	if got := unsafe.Sizeof(r); got != 96 {
		t.Errorf("sizeof(cublasLtMatmulHeuristicResult_t) = %d, want 96", got)
	}
	if got := unsafe.Offsetof(r.workspaceSize); got != 64 {
		t.Errorf("offsetof(workspaceSize) = %d, want 64", got)
	}
	if got := unsafe.Offsetof(r.state); got != 72 {
		t.Errorf("offsetof(state) = %d, want 72", got)
	}
}

func TestAlignment(t *testing.T) {
	for _, tt := range []struct {
		p    DevicePtr
		want uint32
	}{{0, 256}, {0x7f0000000000, 256}, {0x7f0000000104, 4}, {0x7f0000000102, 2}, {0x7f0000000180, 128}} {
		if got := alignment(tt.p); got != tt.want {
			t.Errorf("alignment(%#x) = %d, want %d", uintptr(tt.p), got, tt.want)
		}
	}
}
