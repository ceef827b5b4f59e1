package cuda

import (
	"embed"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/flowkit/flowkit/graph"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/units"
)

//go:generate sh gen.sh .

//go:embed *.ptx
var ptxFiles embed.FS

var (
	// ErrArg reports sizes that do not describe a valid operation, sizes
	// too large for the kernels' 32-bit indices, or a nil pointer.
	ErrArg = errors.New("kernels/cuda: bad argument")
	// ErrDType reports a dtype the kernel has no instance for.
	ErrDType = errors.New("kernels/cuda: unsupported dtype")
)

// Kernels is the kernels of this package loaded into one context. Its
// methods enqueue work on a stream and return at once; they may be called
// from several goroutines, and during stream capture.
type Kernels struct {
	be        backend
	maxBlocks int // cap on the blocks of grid-stride launches
}

// backend is what the wrappers need from the driver and cuBLAS; tests
// substitute a recorder.
type backend interface {
	launch(s *cu.Stream, k *kernel, grid, block cu.Dim3, args []any) error
	gemm(s *cu.Stream, g gemm) error
	copy(s *cu.Stream, dst, src cu.DevicePtr, n units.Bytes) error
}

// gemm is a row-major C = alpha·op(A)·op(B) + beta·C, batch of them at the
// given element strides (a single GEMM when batch is 1).
type gemm struct {
	t              cu.GemmType
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	a, b, c        cu.DevicePtr
	lda, ldb, ldc  int
	sa, sb, sc     int64
	batch          int
}

// driver is the backend of loaded kernels.
type driver struct {
	fns  []*cu.Function // by kernel id
	mods []*cu.Module
	blas *cu.BLAS
}

func (d *driver) launch(s *cu.Stream, k *kernel, grid, block cu.Dim3, args []any) error {
	return s.Launch(d.fns[k.id], grid, block, 0, args...)
}

func (d *driver) gemm(s *cu.Stream, g gemm) error {
	if g.batch == 1 {
		return d.blas.Gemm(s, g.t, g.transA, g.transB, g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, g.c, g.ldc)
	}
	return d.blas.GemmStridedBatched(s, g.t, g.transA, g.transB, g.m, g.n, g.k, g.alpha, g.a, g.lda, g.sa,
		g.b, g.ldb, g.sb, g.beta, g.c, g.ldc, g.sc, g.batch)
}

func (d *driver) copy(s *cu.Stream, dst, src cu.DevicePtr, n units.Bytes) error {
	return s.CopyDtoD(dst, src, n)
}

// Load JIT-compiles every module for ctx's device and resolves every
// kernel, so that a missing or broken kernel fails here, by name, rather
// than at its first launch. blas runs the matrix products of the
// convolutions and attention.
func Load(ctx *cu.Context, blas *cu.BLAS) (*Kernels, error) {
	if ctx == nil || blas == nil {
		return nil, errors.New("kernels/cuda: Load needs a context and a cuBLAS handle")
	}
	d := &driver{fns: make([]*cu.Function, len(registry)), blas: blas}
	mods := map[string]*cu.Module{}
	for _, k := range registry {
		m, ok := mods[k.module]
		if !ok {
			src, err := ptxFiles.ReadFile(k.module + ".ptx")
			if err != nil {
				return nil, errors.Join(fmt.Errorf("kernels/cuda: %w", err), d.unload())
			}
			if m, err = ctx.LoadPTX(src); err != nil {
				return nil, errors.Join(fmt.Errorf("kernels/cuda: loading %s.ptx: %w", k.module, err), d.unload())
			}
			mods[k.module] = m
			d.mods = append(d.mods, m)
		}
		f, err := m.Function(k.name)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("kernels/cuda: kernel %s of %s.ptx: %w", k.name, k.module, err), d.unload())
		}
		d.fns[k.id] = f
	}
	return &Kernels{be: d, maxBlocks: maxBlocks(ctx.Info().SMs)}, nil
}

// maxBlocks is the cap on grid-stride grids: 8 blocks of threads threads
// per multiprocessor fill it (2048 threads) whatever the kernel's register
// use allows, and more only adds scheduling.
func maxBlocks(sms int) int {
	if sms < 1 {
		return 1024
	}
	return 8 * sms
}

// Unload unloads the modules; k must not be used afterwards.
func (k *Kernels) Unload() error {
	if d, ok := k.be.(*driver); ok {
		return d.unload()
	}
	return nil
}

func (d *driver) unload() error {
	var errs []error
	for _, m := range d.mods {
		errs = append(errs, m.Unload())
	}
	d.mods = nil
	return errors.Join(errs...)
}

// threads is the block size of every launch.
const threads = 256

// warpsPerBlock is the rows a block of a warp-per-row kernel takes at once.
const warpsPerBlock = threads / 32

// warpRowMax is the longest row the warp-per-row kernels take
// (WARP_ROW_MAX in common.cuh).
const warpRowMax = 1024

var block1D = cu.Dim3{X: threads, Y: 1, Z: 1}

// launch checks args against k's parameters and launches it.
func (k *Kernels) launch(s *cu.Stream, f *kernel, grid, block cu.Dim3, args ...any) error {
	if err := f.check(args); err != nil {
		return err
	}
	return k.be.launch(s, f, grid, block, args)
}

// flat launches a grid-stride kernel over items work items of one thread
// each.
func (k *Kernels) flat(s *cu.Stream, f *kernel, items int64, args ...any) error {
	return k.launch(s, f, k.grid(items, threads), block1D, args...)
}

// grid returns a 1-D grid of blocks of per work items each for items
// items, capped at maxBlocks.
func (k *Kernels) grid(items int64, per int) cu.Dim3 {
	b := (items + int64(per) - 1) / int64(per)
	return cu.Dim3{X: uint32(max(1, min(b, int64(k.maxBlocks)))), Y: 1, Z: 1}
}

// rows launches a row kernel: the warp-per-row instance for rows of up to
// warpRowMax columns, the block-per-row one otherwise.
func (k *Kernels) rows(s *cu.Stream, warp, block *kernel, rows, cols int, args ...any) error {
	if cols <= warpRowMax {
		return k.launch(s, warp, k.grid(int64(rows), warpsPerBlock), block1D, args...)
	}
	return k.launch(s, block, k.grid(int64(rows), 1), block1D, args...)
}

// vec is the number of elements of dt in 16 bytes: the unit of the
// vectorized kernels.
func vec(dt graph.DType) int64 { return int64(16 / dt.Size()) }

// argErr returns an error wrapping ErrArg that names the operation.
func argErr(op, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrArg, op, fmt.Sprintf(format, args...))
}

// nonNeg checks named sizes for negative values.
func nonNeg(op string, names string, vals ...int) error {
	fields := strings.Fields(names)
	for i, v := range vals {
		if v < 0 {
			return argErr(op, "%s = %d, want ≥ 0", fields[i], v)
		}
	}
	return nil
}

// fits32 checks that named sizes are non-negative and their product, the
// largest index a kernel computes in 32 bits, is below 2³¹.
func fits32(op string, names string, vals ...int) error {
	if err := nonNeg(op, names, vals...); err != nil {
		return err
	}
	p := int64(1)
	for _, v := range vals {
		if v == 0 {
			return nil
		}
		if p > math.MaxInt32/int64(v) {
			return argErr(op, "%s = %v: %d elements or more, the kernels' limit is 2³¹−1", names, vals, p*int64(v))
		}
		p *= int64(v)
	}
	return nil
}

// notNil checks named device pointers.
func notNil(op string, names string, ptrs ...cu.DevicePtr) error {
	fields := strings.Fields(names)
	for i, p := range ptrs {
		if p == 0 {
			return argErr(op, "%s is nil", fields[i])
		}
	}
	return nil
}

// gemmType is the cuBLAS type of a dtype's matrix products: plain float32
// arithmetic (no TF32) for f32, so that results match kernels/cpu to float
// precision.
func gemmType(op string, dt graph.DType) (cu.GemmType, error) {
	switch dt {
	case graph.F32:
		return cu.GemmF32, nil
	case graph.BF16:
		return cu.GemmBF16, nil
	}
	return 0, fmt.Errorf("%w: %s: %v (want f32 or bf16)", ErrDType, op, dt)
}
