package cuda

import (
	"errors"
	"fmt"
	"sync"

	"github.com/flowkit/flowkit/units"
)

// WorkspaceSize is the device workspace cuBLAS and cuBLASLt get per stream.
// A workspace set by the caller is what makes cuBLAS calls capturable in
// graphs: cuBLAS then never allocates during a call.
const WorkspaceSize = 32 * units.MiB

// workspaces gives each stream its own device workspace: two streams
// running cuBLAS kernels at once must not share one.
type workspaces struct {
	ctx *Context
	m   map[uintptr]DevicePtr // by CUstream
}

func (w *workspaces) get(s *Stream) (DevicePtr, error) {
	if p, ok := w.m[s.h]; ok {
		return p, nil
	}
	p, err := w.ctx.Malloc(WorkspaceSize)
	if err != nil {
		return 0, err
	}
	if w.m == nil {
		w.m = make(map[uintptr]DevicePtr)
	}
	w.m[s.h] = p
	return p, nil
}

func (w *workspaces) free() error {
	var errs []error
	for s, p := range w.m {
		errs = append(errs, w.ctx.Free(p))
		delete(w.m, s)
	}
	return errors.Join(errs...)
}

var errNilBLAS = errors.New("cuda: nil or destroyed BLAS handle")

// BLAS is a cuBLAS handle bound to a Context. Its methods may be called from
// any goroutine; calls are serialized on the handle (they only enqueue
// work). Each stream it is used with gets its own WorkspaceSize workspace,
// allocated on first use (see Prepare) and kept until Destroy.
type BLAS struct {
	ctx *Context
	mu  sync.Mutex
	h   uintptr // cublasHandle_t; 0 once destroyed
	ws  workspaces
}

// NewBLAS loads cuBLAS (see the package documentation for where from) and
// creates a handle with host pointer mode: alpha and beta are read when a
// call is made, also when it is captured.
func (c *Context) NewBLAS() (*BLAS, error) {
	if err := loadBLAS(); err != nil {
		return nil, err
	}
	if err := c.enter(); err != nil {
		return nil, err
	}
	defer c.exit()
	b := &BLAS{ctx: c, ws: workspaces{ctx: c}}
	if st := cublasCreate(&b.h); st != cublasSuccess {
		return nil, blasError("cublasCreate_v2", st)
	}
	if st := cublasSetPointerMode(b.h, cublasPointerModeHost); st != cublasSuccess {
		cublasDestroy(b.h)
		return nil, blasError("cublasSetPointerMode_v2", st)
	}
	return b, nil
}

// Destroy frees the workspaces and the handle once pending work is done; it
// is a no-op the second time.
func (b *BLAS) Destroy() error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.h == 0 {
		return nil
	}
	if err := b.ctx.enter(); err != nil {
		return err
	}
	defer b.ctx.exit()
	// The workspaces may still be in use by enqueued kernels.
	if r := cuCtxSynchronize(); r != cudaSuccess {
		return driverError("cuCtxSynchronize", r)
	}
	st := cublasDestroy(b.h)
	b.h = 0
	err := b.ws.free()
	if st != cublasSuccess {
		return errors.Join(blasError("cublasDestroy_v2", st), err)
	}
	return err
}

// Prepare allocates s's workspace now rather than on the first call on s,
// e.g. to keep allocations out of a stream capture.
func (b *BLAS) Prepare(s *Stream) error {
	if b == nil {
		return errNilBLAS
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.enter(s); err != nil {
		return err
	}
	defer b.ctx.exit()
	_, err := b.ws.get(s)
	return err
}

// enter checks the handle and the stream and makes the context current.
// The caller holds b.mu.
func (b *BLAS) enter(s *Stream) error {
	if b.h == 0 {
		return errNilBLAS
	}
	if s == nil || s.h == 0 {
		return errors.New("cuda: nil or destroyed stream")
	}
	if s.ctx != b.ctx {
		return errors.New("cuda: stream and BLAS belong to different contexts")
	}
	return b.ctx.enter()
}

// bind points the handle at s and its workspace. cublasSetStream_v2 resets
// the workspace to cuBLAS's own pool, so the workspace is set after it.
// The caller holds b.mu and has entered the context.
func (b *BLAS) bind(s *Stream) error {
	ws, err := b.ws.get(s)
	if err != nil {
		return err
	}
	if st := cublasSetStream(b.h, s.h); st != cublasSuccess {
		return blasError("cublasSetStream_v2", st)
	}
	if st := cublasSetWorkspace(b.h, ws, uint64(WorkspaceSize)); st != cublasSuccess {
		return blasError("cublasSetWorkspace_v2", st)
	}
	return nil
}

// Gemm enqueues C = alpha·op(A)·op(B) + beta·C on s, in row-major terms as
// a CPU sgemm: C is m×n with row stride ldc; op(A) is m×k, A being stored
// m×k (lda ≥ k) or, if transA, k×m (lda ≥ m); op(B) is k×n, B being stored
// k×n (ldb ≥ n) or, if transB, n×k (ldb ≥ k).
func (b *BLAS) Gemm(s *Stream, t GemmType, transA, transB bool, m, n, k int,
	alpha float32, a DevicePtr, lda int, bm DevicePtr, ldb int, beta float32, c DevicePtr, ldc int) error {
	const call = "Gemm"
	if b == nil {
		return errNilBLAS
	}
	dt, size, ct, ok := t.gemmTypes()
	if !ok {
		return argError(call, "unknown %v", t)
	}
	if err := checkGemm(call, transA, transB, m, n, k, lda, ldb, ldc); err != nil {
		return err
	}
	if err := checkGemmPointers(call, size, m, n, k, a, bm, c); err != nil {
		return err
	}
	if m == 0 || n == 0 {
		return nil
	}
	g := toColMajor(transA, transB, m, n, k, lda, ldb, ldc)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.enter(s); err != nil {
		return err
	}
	defer b.ctx.exit()
	if err := b.bind(s); err != nil {
		return err
	}
	if st := cublasGemmEx(b.h, g, &alpha, bm, a, &beta, c, dt, ct); st != cublasSuccess {
		return blasError(fmt.Sprintf("cublasGemmEx(%v, m=%d n=%d k=%d)", t, m, n, k), st)
	}
	return nil
}

// GemmStridedBatched enqueues batch products as Gemm's, operand i of each of
// A, B and C at its base plus i·stride elements. A stride of 0 reuses one
// A or B for the whole batch.
func (b *BLAS) GemmStridedBatched(s *Stream, t GemmType, transA, transB bool, m, n, k int,
	alpha float32, a DevicePtr, lda int, strideA int64, bm DevicePtr, ldb int, strideB int64,
	beta float32, c DevicePtr, ldc int, strideC int64, batch int) error {
	const call = "GemmStridedBatched"
	if b == nil {
		return errNilBLAS
	}
	dt, size, ct, ok := t.gemmTypes()
	if !ok {
		return argError(call, "unknown %v", t)
	}
	if err := checkGemm(call, transA, transB, m, n, k, lda, ldb, ldc); err != nil {
		return err
	}
	if err := checkBatch(call, m, n, ldc, strideA, strideB, strideC, batch); err != nil {
		return err
	}
	if err := checkGemmPointers(call, size, m, n, k, a, bm, c); err != nil {
		return err
	}
	if m == 0 || n == 0 || batch == 0 {
		return nil
	}
	g := toColMajor(transA, transB, m, n, k, lda, ldb, ldc)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.enter(s); err != nil {
		return err
	}
	defer b.ctx.exit()
	if err := b.bind(s); err != nil {
		return err
	}
	if st := cublasGemmStridedBatchedEx(b.h, g, &alpha, bm, strideB, a, strideA, &beta, c, strideC, batch, dt, ct); st != cublasSuccess {
		return blasError(fmt.Sprintf("cublasGemmStridedBatchedEx(%v, m=%d n=%d k=%d batch=%d)", t, m, n, k, batch), st)
	}
	return nil
}
