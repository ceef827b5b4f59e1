package cuda

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// cublasLtMatmulDescAttributes_t (cublasLt.h).
const (
	ltDescTransA      = 3 // CUBLASLT_MATMUL_DESC_TRANSA: int32_t (cublasOperation_t)
	ltDescTransB      = 4 // CUBLASLT_MATMUL_DESC_TRANSB: int32_t (cublasOperation_t)
	ltDescEpilogue    = 7 // CUBLASLT_MATMUL_DESC_EPILOGUE: uint32_t (cublasLtEpilogue_t)
	ltDescBiasPointer = 8 // CUBLASLT_MATMUL_DESC_BIAS_POINTER: const void*
)

// cublasLtEpilogue_t (cublasLt.h).
const (
	ltEpilogueDefault  = 1   // CUBLASLT_EPILOGUE_DEFAULT
	ltEpilogueReLU     = 2   // CUBLASLT_EPILOGUE_RELU
	ltEpilogueBias     = 4   // CUBLASLT_EPILOGUE_BIAS
	ltEpilogueReLUBias = 6   // CUBLASLT_EPILOGUE_RELU_BIAS = RELU | BIAS
	ltEpilogueBGradB   = 512 // CUBLASLT_EPILOGUE_BGRADB
)

// cublasLtMatmulPreferenceAttributes_t (cublasLt.h).
const (
	ltPrefMaxWorkspaceBytes = 1 // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: uint64_t
	ltPrefMinAlignmentA     = 5 // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: uint32_t
	ltPrefMinAlignmentB     = 6 // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: uint32_t
	ltPrefMinAlignmentC     = 7 // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: uint32_t
	ltPrefMinAlignmentD     = 8 // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: uint32_t
)

// ltLayout is the column-major description of one stored matrix: cuBLASLt
// takes the shape before op is applied.
type ltLayout struct {
	rows, cols uint64
	ld         int64
}

// ltLayouts restates a row-major MatmulBias for cuBLASLt like toColMajor
// does for Gemm: Lt's A is our B, Lt's B is our A, and D = C is n×m.
func ltLayouts(transA, transB bool, m, n, k, lda, ldb, ldc int) (first, second, out ltLayout) {
	first = ltLayout{rows: uint64(n), cols: uint64(k), ld: int64(ldb)}
	if transB {
		first.rows, first.cols = uint64(k), uint64(n)
	}
	second = ltLayout{rows: uint64(k), cols: uint64(m), ld: int64(lda)}
	if transA {
		second.rows, second.cols = uint64(m), uint64(k)
	}
	return first, second, ltLayout{rows: uint64(n), cols: uint64(m), ld: int64(ldc)}
}

// alignment returns the largest power of two up to 256 dividing p, the
// figure cuBLASLt's heuristics need when pointers are not 256-byte aligned.
func alignment(p DevicePtr) uint32 {
	if p == 0 {
		return 256
	}
	return uint32(min(uintptr(p)&-uintptr(p), 256))
}

// ltKey identifies a cached MatmulBias plan.
type ltKey struct {
	t                      GemmType
	transA, transB         bool
	m, n, k, lda, ldb, ldc int
	bias, relu             bool
	bgrad                  bool // BGRADB: the bias pointer receives op(A)'s row sums
	alignA, alignB, alignC uint32
}

// epilogue is the key's cublasLtEpilogue_t.
func (k ltKey) epilogue() uint32 {
	switch {
	case k.bgrad:
		return ltEpilogueBGradB
	case k.bias && k.relu:
		return ltEpilogueReLUBias
	case k.bias:
		return ltEpilogueBias
	case k.relu:
		return ltEpilogueReLU
	}
	return ltEpilogueDefault
}

// ltPlan is the descriptors and algorithm for one ltKey.
type ltPlan struct {
	desc               uintptr // cublasLtMatmulDesc_t
	first, second, out uintptr // cublasLtMatrixLayout_t of our B, our A, and C
	algo               [8]uint64
	candidates         [][8]uint64 // the heuristic's, best first; algo is one of them
	tuning             *Tuning     // once tuned
}

// MaxCandidates is the most algorithms a tuning asks cuBLASLt's heuristic
// for.
const MaxCandidates = 8

// Tuning is what a Tune call measured for one product: the time of one
// product with each of the heuristic's candidate algorithms, in the
// heuristic's order (0 where the library refused the call), and which was
// kept.
type Tuning struct {
	Times []time.Duration
	Best  int
}

// String gives the kept algorithm's time against the heuristic's choice.
func (t Tuning) String() string {
	if t.Best < 0 || t.Best >= len(t.Times) {
		return "not tuned"
	}
	s := fmt.Sprintf("algorithm %d of %d, %v", t.Best+1, len(t.Times), RoundTime(t.Times[t.Best]))
	if t.Best != 0 && t.Times[0] > 0 {
		s += fmt.Sprintf(" (the heuristic's first: %v)", RoundTime(t.Times[0]))
	}
	return s
}

// RoundTime rounds a device time to four significant digits or so, for
// printing: 0.1 µs under a millisecond, 1 µs above.
func RoundTime(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return d.Round(100 * time.Nanosecond)
	}
	return d.Round(time.Microsecond)
}

// BLASLt is a cuBLASLt handle bound to a Context, for products with a fused
// epilogue. Its methods may be called from any goroutine and are serialized.
// Each stream gets its own WorkspaceSize workspace, as for BLAS.
type BLASLt struct {
	ctx    *Context
	mu     sync.Mutex
	h      uintptr // cublasLtHandle_t; 0 once destroyed
	ws     workspaces
	plans  map[ltKey]*ltPlan
	failed map[ltKey]error // shapes cuBLASLt has no algorithm for
}

var errNilBLASLt = errors.New("cuda: nil or destroyed BLASLt handle")

// ErrNoAlgorithm is wrapped by MatmulBias's error when cuBLASLt has no
// algorithm for the product and epilogue asked for. Nothing was enqueued:
// the caller may compute the same with BLAS.Gemm and a kernel instead.
var ErrNoAlgorithm = errors.New("cuda: cuBLASLt has no algorithm")

// NewBLASLt loads cuBLAS (as NewBLAS) and creates a cuBLASLt handle.
func (c *Context) NewBLASLt() (*BLASLt, error) {
	if err := loadBLAS(); err != nil {
		return nil, err
	}
	if err := c.enter(); err != nil {
		return nil, err
	}
	defer c.exit()
	l := &BLASLt{ctx: c, ws: workspaces{ctx: c}, plans: make(map[ltKey]*ltPlan), failed: make(map[ltKey]error)}
	if st := cublasLtCreate(&l.h); st != cublasSuccess {
		return nil, blasError("cublasLtCreate", st)
	}
	return l, nil
}

// Destroy releases the cached plans, the workspaces and the handle once
// pending work is done; it is a no-op the second time.
func (l *BLASLt) Destroy() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h == 0 {
		return nil
	}
	if err := l.ctx.enter(); err != nil {
		return err
	}
	defer l.ctx.exit()
	if r := cuCtxSynchronize(); r != cudaSuccess {
		return driverError("cuCtxSynchronize", r)
	}
	var errs []error
	for k, p := range l.plans {
		errs = append(errs, p.destroy())
		delete(l.plans, k)
	}
	if st := cublasLtDestroy(l.h); st != cublasSuccess {
		errs = append(errs, blasError("cublasLtDestroy", st))
	}
	l.h = 0
	errs = append(errs, l.ws.free())
	return errors.Join(errs...)
}

func (p *ltPlan) destroy() error {
	var errs []error
	for _, l := range []uintptr{p.first, p.second, p.out} {
		if l != 0 {
			if st := cublasLtMatrixLayoutDestroy(l); st != cublasSuccess {
				errs = append(errs, blasError("cublasLtMatrixLayoutDestroy", st))
			}
		}
	}
	if p.desc != 0 {
		if st := cublasLtMatmulDescDestroy(p.desc); st != cublasSuccess {
			errs = append(errs, blasError("cublasLtMatmulDescDestroy", st))
		}
	}
	return errors.Join(errs...)
}

// plan returns the cached plan for key, creating it: descriptors, layouts
// and the heuristic's best algorithm. The caller holds l.mu and has entered
// the context.
func (l *BLASLt) plan(key ltKey) (*ltPlan, error) {
	if p, ok := l.plans[key]; ok {
		return p, nil
	}
	if err, ok := l.failed[key]; ok {
		return nil, err
	}
	dt, _, ct, _ := key.t.gemmTypes()
	g := toColMajor(key.transA, key.transB, key.m, key.n, key.k, key.lda, key.ldb, key.ldc)
	p := &ltPlan{}
	fail := func(call string, st cublasStatus) (*ltPlan, error) {
		return nil, errors.Join(blasError(call, st), p.destroy())
	}
	// unsupported records that this library cannot do key's product: an
	// epilogue it does not know, or no algorithm for it.
	unsupported := func(call string, st cublasStatus) (*ltPlan, error) {
		err := fmt.Errorf("%w for %v, m=%d n=%d k=%d, epilogue %d: %w", ErrNoAlgorithm, key.t, key.m, key.n, key.k, key.epilogue(),
			errors.Join(blasError(call, st), p.destroy()))
		l.failed[key] = err
		return nil, err
	}
	if st := cublasLtMatmulDescCreate(&p.desc, ct, cudaR32F); st != cublasSuccess {
		return fail("cublasLtMatmulDescCreate", st)
	}
	if st := cublasLtMatmulDescSetAttribute(p.desc, ltDescTransA, int32(g.transa)); st != cublasSuccess {
		return fail("cublasLtMatmulDescSetAttribute(TRANSA)", st)
	}
	if st := cublasLtMatmulDescSetAttribute(p.desc, ltDescTransB, int32(g.transb)); st != cublasSuccess {
		return fail("cublasLtMatmulDescSetAttribute(TRANSB)", st)
	}
	if st := cublasLtMatmulDescSetAttribute(p.desc, ltDescEpilogue, key.epilogue()); st == cublasNotSupported {
		return unsupported("cublasLtMatmulDescSetAttribute(EPILOGUE)", st)
	} else if st != cublasSuccess {
		return fail("cublasLtMatmulDescSetAttribute(EPILOGUE)", st)
	}
	first, second, out := ltLayouts(key.transA, key.transB, key.m, key.n, key.k, key.lda, key.ldb, key.ldc)
	for _, x := range []struct {
		dst *uintptr
		l   ltLayout
	}{{&p.first, first}, {&p.second, second}, {&p.out, out}} {
		if st := cublasLtMatrixLayoutCreate(x.dst, dt, x.l.rows, x.l.cols, x.l.ld); st != cublasSuccess {
			return fail("cublasLtMatrixLayoutCreate", st)
		}
	}

	var pref uintptr
	if st := cublasLtMatmulPreferenceCreate(&pref); st != cublasSuccess {
		return fail("cublasLtMatmulPreferenceCreate", st)
	}
	defer cublasLtMatmulPreferenceDestroy(pref)
	if st := cublasLtMatmulPreferenceSetAttribute(pref, ltPrefMaxWorkspaceBytes, uint64(WorkspaceSize)); st != cublasSuccess {
		return fail("cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)", st)
	}
	// Lt's A is our B and Lt's B our A.
	for _, a := range []struct {
		attr  int32
		align uint32
	}{{ltPrefMinAlignmentA, key.alignB}, {ltPrefMinAlignmentB, key.alignA}, {ltPrefMinAlignmentC, key.alignC}, {ltPrefMinAlignmentD, key.alignC}} {
		if st := cublasLtMatmulPreferenceSetAttribute(pref, a.attr, a.align); st != cublasSuccess {
			return fail(fmt.Sprintf("cublasLtMatmulPreferenceSetAttribute(%d)", a.attr), st)
		}
	}
	var res [MaxCandidates]ltHeuristicResult
	var count int32
	st := cublasLtMatmulAlgoGetHeuristic(l.h, p.desc, p.first, p.second, p.out, p.out, pref, res[:], &count)
	if st != cublasSuccess && st != cublasNotSupported {
		return fail("cublasLtMatmulAlgoGetHeuristic", st)
	}
	if st == cublasSuccess {
		for _, r := range res[:min(int(count), len(res))] {
			if r.state == int32(cublasSuccess) {
				p.candidates = append(p.candidates, r.algo)
			}
		}
	}
	if len(p.candidates) == 0 {
		return unsupported("cublasLtMatmulAlgoGetHeuristic", cublasNotSupported)
	}
	p.algo = p.candidates[0]
	l.plans[key] = p
	return p, nil
}

// enter checks that the handle is live and s belongs to its context, and
// makes the context current. The caller holds l.mu and calls l.ctx.exit
// after a nil error.
func (l *BLASLt) enter(s *Stream) error {
	if l.h == 0 {
		return errNilBLASLt
	}
	if s == nil || s.h == 0 {
		return errors.New("cuda: nil or destroyed stream")
	}
	if s.ctx != l.ctx {
		return errors.New("cuda: stream and BLASLt belong to different contexts")
	}
	return l.ctx.enter()
}

// Prepare allocates s's workspace now rather than on the first call on s,
// e.g. to keep allocations out of a stream capture.
func (l *BLASLt) Prepare(s *Stream) error {
	if l == nil {
		return errNilBLASLt
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.enter(s); err != nil {
		return err
	}
	defer l.ctx.exit()
	_, err := l.ws.get(s)
	return err
}

// MatmulBias enqueues C = op(A)·op(B) + bias on s, then max(·, 0) if relu,
// in one cuBLASLt call. Shapes, strides and types are as for BLAS.Gemm;
// bias is a vector of n elements of the data type (bfloat16 for GemmBF16)
// added to every row of C, or 0 for none. Descriptors and the algorithm are
// chosen once per shape and pointer alignment and cached (the heuristic's
// first, or the fastest once TuneMatmulBias has timed them); where cuBLASLt
// has none, the error wraps ErrNoAlgorithm.
func (l *BLASLt) MatmulBias(s *Stream, t GemmType, transA, transB bool, m, n, k int,
	a DevicePtr, lda int, b DevicePtr, ldb int, bias DevicePtr, c DevicePtr, ldc int, relu bool) error {
	key := ltKey{t: t, transA: transA, transB: transB, m: m, n: n, k: k, lda: lda, ldb: ldb, ldc: ldc, bias: bias != 0, relu: relu}
	_, err := l.matmul("MatmulBias", s, key, a, b, c, bias, 0)
	return err
}

// TuneMatmulBias runs MatmulBias's product with each algorithm cuBLASLt's
// heuristic offers for it (up to MaxCandidates), reps times each on s after
// one untimed run, timed by events, and keeps the fastest for every later
// call with this shape: the heuristic ranks algorithms by a model, and on a
// given GPU another of its top candidates may be faster. It waits for s and
// must not be called while s is being captured. For a shape already tuned
// it runs the product once and returns the first tuning; C then holds the
// product, as after MatmulBias.
func (l *BLASLt) TuneMatmulBias(s *Stream, reps int, t GemmType, transA, transB bool, m, n, k int,
	a DevicePtr, lda int, b DevicePtr, ldb int, bias DevicePtr, c DevicePtr, ldc int, relu bool) (Tuning, error) {
	key := ltKey{t: t, transA: transA, transB: transB, m: m, n: n, k: k, lda: lda, ldb: ldb, ldc: ldc, bias: bias != 0, relu: relu}
	return l.matmul("TuneMatmulBias", s, key, a, b, c, bias, max(reps, 1))
}

// MatmulBiasGrad enqueues C = op(A)·op(B) on s and, in the same cuBLASLt
// call (the BGRADB epilogue), biasGrad[i] = Σ_p op(A)[i][p], the m row sums
// of op(A) in the data type: for a layer y = x·wᵀ + b with upstream
// gradient dy, A = dy with transA gives the weight gradient dyᵀ·x in C and
// the bias gradient in biasGrad. Shapes, strides, types and errors are as
// for MatmulBias.
func (l *BLASLt) MatmulBiasGrad(s *Stream, t GemmType, transA, transB bool, m, n, k int,
	a DevicePtr, lda int, b DevicePtr, ldb int, c DevicePtr, ldc int, biasGrad DevicePtr) error {
	key := ltKey{t: t, transA: transA, transB: transB, m: m, n: n, k: k, lda: lda, ldb: ldb, ldc: ldc, bgrad: true}
	_, err := l.matmul("MatmulBiasGrad", s, key, a, b, c, biasGrad, 0)
	return err
}

// TuneMatmulBiasGrad is TuneMatmulBias for MatmulBiasGrad's product.
func (l *BLASLt) TuneMatmulBiasGrad(s *Stream, reps int, t GemmType, transA, transB bool, m, n, k int,
	a DevicePtr, lda int, b DevicePtr, ldb int, c DevicePtr, ldc int, biasGrad DevicePtr) (Tuning, error) {
	key := ltKey{t: t, transA: transA, transB: transB, m: m, n: n, k: k, lda: lda, ldb: ldb, ldc: ldc, bgrad: true}
	return l.matmul("TuneMatmulBiasGrad", s, key, a, b, c, biasGrad, max(reps, 1))
}

// matmul checks and enqueues the product of key with the epilogue vector
// vec (the bias, or the bias gradient); with reps > 0 it tunes the shape
// first (see TuneMatmulBias).
func (l *BLASLt) matmul(call string, s *Stream, key ltKey, a, b, c, vec DevicePtr, reps int) (Tuning, error) {
	if l == nil {
		return Tuning{}, errNilBLASLt
	}
	_, size, _, ok := key.t.gemmTypes()
	if !ok {
		return Tuning{}, argError(call, "unknown %v", key.t)
	}
	if err := checkGemm(call, key.transA, key.transB, key.m, key.n, key.k, key.lda, key.ldb, key.ldc); err != nil {
		return Tuning{}, err
	}
	if err := checkGemmPointers(call, size, key.m, key.n, key.k, a, b, c); err != nil {
		return Tuning{}, err
	}
	if key.bgrad && vec == 0 {
		return Tuning{}, argError(call, "nil biasGrad")
	}
	if vec%DevicePtr(size) != 0 {
		return Tuning{}, argError(call, "the epilogue's vector %#x is not aligned to its %d-byte elements", uintptr(vec), size)
	}
	if key.m == 0 || key.n == 0 {
		return Tuning{}, nil
	}
	if key.k == 0 {
		// cuBLASLt rejects k = 0; the result would be the bias (and ReLU)
		// alone, or a zero bias gradient.
		return Tuning{}, argError(call, "k = 0")
	}
	key.alignA, key.alignB, key.alignC = alignment(a), alignment(b), alignment(c)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.enter(s); err != nil {
		return Tuning{}, err
	}
	defer l.ctx.exit()
	ws, err := l.ws.get(s)
	if err != nil {
		return Tuning{}, err
	}
	p, err := l.plan(key)
	if err != nil {
		return Tuning{}, err
	}
	if key.bias || key.bgrad {
		if st := cublasLtMatmulDescSetAttribute(p.desc, ltDescBiasPointer, uint64(vec)); st != cublasSuccess {
			return Tuning{}, blasError("cublasLtMatmulDescSetAttribute(BIAS_POINTER)", st)
		}
	}
	launch := func(algo *[8]uint64) cublasStatus {
		alpha, beta := float32(1), float32(0)
		return cublasLtMatmul(l.h, p.desc, &alpha, b, p.first, a, p.second, &beta, c, p.out, c, p.out, algo, ws, uint64(WorkspaceSize), s.h)
	}
	if reps > 0 && p.tuning == nil {
		if err := l.tune(s, p, reps, launch); err != nil {
			return Tuning{}, err
		}
	}
	st := launch(&p.algo)
	switch {
	case st == cublasNotSupported:
		// The algorithm refused the call after all: nothing was enqueued,
		// and the shape is not tried again.
		err := fmt.Errorf("%w for %v, m=%d n=%d k=%d: %w", ErrNoAlgorithm, key.t, key.m, key.n, key.k, blasError("cublasLtMatmul", st))
		l.failed[key] = err
		delete(l.plans, key)
		return Tuning{}, errors.Join(err, p.destroy())
	case st != cublasSuccess:
		return Tuning{}, blasError(fmt.Sprintf("cublasLtMatmul(%v, m=%d n=%d k=%d)", key.t, key.m, key.n, key.k), st)
	}
	if reps > 0 && p.tuning != nil {
		return *p.tuning, nil
	}
	return Tuning{}, nil
}

// tune times launch with each of p's candidates and keeps the fastest as
// p.algo. A candidate the library refuses, with any status, is skipped:
// tuning only looks for something faster than the heuristic's first. If
// it refuses all, p.algo stays, and the launch that follows reports why.
// The caller holds l.mu and has entered the context.
func (l *BLASLt) tune(s *Stream, p *ltPlan, reps int, launch func(*[8]uint64) cublasStatus) error {
	start, err := l.ctx.NewEvent(true)
	if err != nil {
		return err
	}
	defer start.Destroy()
	end, err := l.ctx.NewEvent(true)
	if err != nil {
		return err
	}
	defer end.Destroy()
	tu := &Tuning{Times: make([]time.Duration, len(p.candidates)), Best: -1}
candidates:
	for i := range p.candidates {
		algo := &p.candidates[i]
		if launch(algo) != cublasSuccess {
			continue
		}
		if err := start.Record(s); err != nil {
			return err
		}
		for range reps {
			if launch(algo) != cublasSuccess {
				continue candidates
			}
		}
		if err := end.Record(s); err != nil {
			return err
		}
		if err := end.Synchronize(); err != nil {
			return err
		}
		d, err := Elapsed(start, end)
		if err != nil {
			return err
		}
		tu.Times[i] = max(d/time.Duration(reps), 1)
		if tu.Best < 0 || tu.Times[i] < tu.Times[tu.Best] {
			tu.Best = i
		}
	}
	if tu.Best < 0 {
		return nil
	}
	p.algo = p.candidates[tu.Best]
	p.tuning = tu
	return nil
}
