package cpu

import (
	"fmt"
	"math"
	"sync"
	"testing"
)

// gemmCase is one Sgemm call; pads widen the strides past the row length.
type gemmCase struct {
	transA, transB   bool
	m, n, k          int
	padA, padB, padC int
	alpha, beta      float32
}

func (tc gemmCase) String() string {
	op := func(t bool) string {
		if t {
			return "T"
		}
		return "N"
	}
	return fmt.Sprintf("%s%s_%dx%dx%d_pad%d,%d,%d_a%g_b%g", op(tc.transA), op(tc.transB),
		tc.m, tc.n, tc.k, tc.padA, tc.padB, tc.padC, tc.alpha, tc.beta)
}

// gemmInputs holds the operands of a case and the float64 reference result.
type gemmInputs struct {
	a, b, c       []float32
	lda, ldb, ldc int
	want          []float64
}

// newGemmInputs builds random operands; with beta == 0, C starts as NaN.
func newGemmInputs(tc gemmCase, seed uint64) gemmInputs {
	rng := newRNG(seed)
	ar, ac := tc.m, tc.k
	if tc.transA {
		ar, ac = tc.k, tc.m
	}
	br, bc := tc.k, tc.n
	if tc.transB {
		br, bc = tc.n, tc.k
	}
	in := gemmInputs{lda: max(ac+tc.padA, 1), ldb: max(bc+tc.padB, 1), ldc: max(tc.n+tc.padC, 1)}
	in.a = randSlice(rng, ar*in.lda)
	in.b = randSlice(rng, br*in.ldb)
	in.c = randSlice(rng, tc.m*in.ldc)
	if tc.beta == 0 {
		for i := range in.c {
			in.c[i] = float32(math.NaN())
		}
	}
	in.want = refGemm(tc, in)
	return in
}

// refGemm returns the m×n result of the case in float64, row by row.
func refGemm(tc gemmCase, in gemmInputs) []float64 {
	a, b := to64(in.a), to64(in.b)
	want := make([]float64, tc.m*tc.n)
	for i := range tc.m {
		for j := range tc.n {
			var s float64
			for l := range tc.k {
				ai, bi := i*in.lda+l, l*in.ldb+j
				if tc.transA {
					ai = l*in.lda + i
				}
				if tc.transB {
					bi = j*in.ldb + l
				}
				av, bv := a[ai], b[bi]
				s += av * bv
			}
			s *= float64(tc.alpha)
			if tc.beta != 0 {
				s += float64(tc.beta) * float64(in.c[i*in.ldc+j])
			}
			want[i*tc.n+j] = s
		}
	}
	return want
}

// checkGemm runs the case with implementation impl on pool p and compares C with the
// reference; entries of C past column n must be left as they were.
func checkGemm(t *testing.T, p *Pool, impl gemmImpl, tc gemmCase, in gemmInputs) {
	t.Helper()
	c := append([]float32(nil), in.c...)
	sgemm(p, impl, tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, in.a, in.lda, in.b, in.ldb, tc.beta, c, in.ldc)
	got := make([]float32, 0, tc.m*tc.n)
	for i := range tc.m {
		got = append(got, c[i*in.ldc:i*in.ldc+tc.n]...)
		for j := tc.n; j < in.ldc; j++ {
			if g, w := math.Float32bits(c[i*in.ldc+j]), math.Float32bits(in.c[i*in.ldc+j]); g != w {
				t.Fatalf("C[%d,%d] past column n: got %#x, want %#x (untouched)", i, j, g, w)
			}
		}
	}
	if e := relErr(got, in.want); !(e < 1e-5) {
		t.Errorf("relative error: got %g, want < 1e-5", e)
	}
}

func TestGemm(t *testing.T) {
	shapes := []struct{ m, n, k, pad int }{
		{1, 1, 1, 0},
		{7, 13, 5, 3},
		{6, 16, 1, 0},
		{16, 16, 16, 1},
		{5, 7, 0, 2}, // k == 0 only scales C
		{0, 5, 3, 1}, // empty C
		{67, 35, 300, 5},
		{150, 40, 20, 0},   // more than one mc block
		{67, 600, 200, 3},  // column sweeps
		{151, 530, 130, 1}, // column sweeps, more than one mc block
		{3, 4097, 3, 1},    // more than one nc block
		{129, 257, 513, 7}, // a 2×2 grid of workers on pool4
		{200, 32, 1400, 3}, // a 2×2 grid on pool4 for a narrow C
	}
	var cases []gemmCase
	for _, s := range shapes {
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			for _, beta := range []float32{0, 1, 0.5} {
				cases = append(cases, gemmCase{transA: tr[0], transB: tr[1], m: s.m, n: s.n, k: s.k,
					padA: s.pad, padB: 2 * s.pad, padC: s.pad, alpha: 1.5, beta: beta})
			}
		}
	}
	cases = append(cases, gemmCase{m: 9, n: 17, k: 4, alpha: 0, beta: 0.5}, gemmCase{m: 9, n: 17, k: 4, alpha: 0, beta: 0})
	pools := []struct {
		name string
		p    *Pool
	}{{"serial", nil}, {"pool4", NewPool(4)}}
	for i, tc := range cases {
		t.Run(tc.String(), func(t *testing.T) {
			in := newGemmInputs(tc, uint64(i))
			for _, impl := range gemmImpls {
				for _, p := range pools {
					t.Run(impl.name+"/"+p.name, func(t *testing.T) {
						checkGemm(t, p.p, impl, tc, in)
					})
				}
			}
		})
	}
}

// TestGemmRandomShapes runs many small shapes, strides and scalars drawn
// from a fixed seed through every implementation.
func TestGemmRandomShapes(t *testing.T) {
	rng := newRNG(42)
	scalars := []float32{0, 1, 0.5, -2}
	pool := NewPool(2)
	for i := range 300 {
		tc := gemmCase{
			transA: rng.IntN(2) == 1, transB: rng.IntN(2) == 1,
			m: 1 + rng.IntN(40), n: 1 + rng.IntN(300), k: 1 + rng.IntN(300),
			padA: rng.IntN(3), padB: rng.IntN(3), padC: rng.IntN(3),
			alpha: scalars[1+rng.IntN(3)], beta: scalars[rng.IntN(4)],
		}
		in := newGemmInputs(tc, uint64(1000+i))
		for _, impl := range gemmImpls {
			t.Run(fmt.Sprintf("%d/%s/%s", i, tc, impl.name), func(t *testing.T) {
				checkGemm(t, pool, impl, tc, in)
			})
		}
	}
}

// TestGemmConcurrent calls Sgemm from several goroutines sharing a pool, as
// convolution and linear layers do; run it with -race.
func TestGemmConcurrent(t *testing.T) {
	pool := NewPool(2)
	tc := gemmCase{transB: true, m: 100, n: 300, k: 150, alpha: 1, beta: 0} // 2 workers
	in := newGemmInputs(tc, 7)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			c := make([]float32, len(in.c))
			for range 5 {
				Sgemm(pool, tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, in.a, in.lda, in.b, in.ldb, tc.beta, c, in.ldc)
				if e := relErr(c, in.want); !(e < 1e-5) {
					t.Errorf("relative error: got %g, want < 1e-5", e)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestGemmGrid(t *testing.T) {
	tests := []struct {
		w, m, n, wantM, wantN int
	}{
		{1, 2048, 2048, 1, 1},
		{2, 64, 12544, 1, 2},
		{2, 64, 288, 1, 2},
		{2, 600, 16, 2, 1},
		{4, 6, 32, 1, 2},
		{4, 600, 600, 2, 2},
		{2, 6, 16, 1, 1},
		{4, 129, 257, 2, 2},
		{4, 200, 32, 2, 2},
	}
	for _, tt := range tests {
		if gm, gn := gemmGrid(tt.w, tt.m, tt.n); gm != tt.wantM || gn != tt.wantN {
			t.Errorf("gemmGrid(%d, %d, %d): got %d×%d, want %d×%d", tt.w, tt.m, tt.n, gm, gn, tt.wantM, tt.wantN)
		}
	}
}

func TestGemmPanics(t *testing.T) {
	tests := []struct {
		name string
		call func()
	}{
		{"short A", func() {
			Sgemm(nil, false, false, 2, 2, 2, 1, make([]float32, 3), 2, make([]float32, 4), 2, 0, make([]float32, 4), 2)
		}},
		{"short C", func() {
			Sgemm(nil, false, false, 2, 2, 2, 1, make([]float32, 4), 2, make([]float32, 4), 2, 0, make([]float32, 3), 2)
		}},
		{"negative k", func() {
			Sgemm(nil, false, false, 2, 2, -1, 1, nil, 1, nil, 2, 0, make([]float32, 4), 2)
		}},
		{"small ldb", func() {
			Sgemm(nil, false, true, 2, 3, 2, 1, make([]float32, 4), 2, make([]float32, 6), 1, 0, make([]float32, 6), 3)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("got no panic, want one")
				}
			}()
			tt.call()
		})
	}
}

// Between grids that load the busiest worker equally, gemmGrid splits the
// longer side of C; and the products it splits so, with transposed A's
// partial micro-panels, match the float64 reference on two workers.
func TestGemmSplitsLongerSide(t *testing.T) {
	for _, tt := range []struct{ w, m, n, wantM, wantN int }{
		{2, 2048, 384, 2, 1}, // the text GPT's q/k/v projection
		{2, 384, 2048, 1, 2},
		{2, 384, 128, 2, 1}, // its weight gradient dW = dYᵀ·X
		{2, 128, 512, 1, 2},
		{2, 96, 96, 1, 2}, // square: columns, as before
	} {
		if gm, gn := gemmGrid(tt.w, tt.m, tt.n); gm != tt.wantM || gn != tt.wantN {
			t.Errorf("gemmGrid(%d, %d, %d): got %d×%d, want %d×%d", tt.w, tt.m, tt.n, gm, gn, tt.wantM, tt.wantN)
		}
	}
	pool := NewPool(2)
	for i, s := range []struct{ m, n, k int }{
		{383, 113, 2051}, // 64×8 tiles: rows split 32/32, the last panel 5 rows
		{385, 97, 1031},  // 65×7 tiles: rows split 33/32, the last panel 1 row
		{17, 3, 65 << 11},
	} {
		if wm, _ := gemmGrid(2, s.m, s.n); s.m*s.n*s.k >= 2*gemmWorkerMin && wm != 2 {
			t.Fatalf("%dx%dx%d: got %d row blocks, want 2", s.m, s.n, s.k, wm)
		}
		for _, tr := range [][2]bool{{true, false}, {false, false}, {true, true}} {
			tc := gemmCase{transA: tr[0], transB: tr[1], m: s.m, n: s.n, k: s.k, padA: 3, padB: 1, padC: 2, alpha: 1, beta: 0.5}
			t.Run(tc.String(), func(t *testing.T) {
				in := newGemmInputs(tc, uint64(i)+50)
				for _, impl := range gemmImpls {
					checkGemm(t, pool, impl, tc, in)
				}
			})
		}
	}
}
