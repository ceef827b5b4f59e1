package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/flowkit/flowkit/graph"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/units"
)

// gpuEnv is the device the GPU tests and benchmarks share: device 0, its
// cuBLAS handle, the loaded kernels and a stream.
type gpuEnv struct {
	ctx  *cu.Context
	blas *cu.BLAS
	k    *Kernels
	s    *cu.Stream
}

var gpuOnce struct {
	sync.Once
	env  *gpuEnv
	skip error // no device: skip
	fail error // a device that the kernels fail on: fail
}

// gpu returns the shared device, skipping the test where there is none and
// failing it if the kernels do not load.
func gpu(t testing.TB) *gpuEnv {
	t.Helper()
	gpuOnce.Do(func() {
		if err := cu.Init(); err != nil {
			gpuOnce.skip = err
			return
		}
		ctx, err := cu.Open(0)
		if err != nil {
			gpuOnce.skip = err
			return
		}
		blas, err := ctx.NewBLAS()
		if err != nil {
			gpuOnce.skip = err
			return
		}
		e := &gpuEnv{ctx: ctx, blas: blas}
		if e.k, err = Load(ctx, blas); err != nil {
			gpuOnce.fail = err
			return
		}
		if e.s, err = ctx.NewStream(); err != nil {
			gpuOnce.fail = err
			return
		}
		gpuOnce.env = e
	})
	switch {
	case gpuOnce.skip != nil && os.Getenv("FLOWKIT_REQUIRE_GPU") != "":
		t.Fatalf("no GPU, and $FLOWKIT_REQUIRE_GPU is set: %v", gpuOnce.skip)
	case gpuOnce.skip != nil:
		t.Skipf("no GPU: %v", gpuOnce.skip)
	case gpuOnce.fail != nil:
		t.Fatalf("loading the kernels: %v", gpuOnce.fail)
	}
	return gpuOnce.env
}

// alloc returns n elements of dt of device memory (plus 16 bytes of slack
// for offset views), filled with all-ones bytes — NaN in f32 and bf16 — so
// that an element a kernel fails to write shows. It is freed with the test.
func (e *gpuEnv) alloc(t testing.TB, dt graph.DType, n int) cu.DevicePtr {
	t.Helper()
	bytes := dt.Size()*units.Bytes(n) + 16
	p, err := e.ctx.Malloc(bytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.ctx.Free(p) })
	if err := e.s.Memset32(p, math.MaxUint32, int(bytes/4)); err != nil {
		t.Fatal(err)
	}
	return p
}

// encode returns vals as dt's bytes (bf16 rounded to nearest even).
func encode(dt graph.DType, vals []float32) []byte {
	b := make([]byte, int(dt.Size())*len(vals))
	for i, v := range vals {
		switch dt {
		case graph.BF16:
			binary.LittleEndian.PutUint16(b[2*i:], cu.BF16FromFloat32(v))
		default:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
	}
	return b
}

// putBytes copies b to p and waits.
func (e *gpuEnv) putBytes(t testing.TB, p cu.DevicePtr, b []byte) {
	t.Helper()
	if len(b) == 0 {
		return
	}
	if err := e.s.CopyHtoD(p, unsafe.Pointer(&b[0]), units.Bytes(len(b))); err != nil {
		t.Fatal(err)
	}
	e.sync(t)
	runtime.KeepAlive(b)
}

// put returns a device copy of vals as dt.
func (e *gpuEnv) put(t testing.TB, dt graph.DType, vals []float32) cu.DevicePtr {
	t.Helper()
	p := e.alloc(t, dt, len(vals))
	e.putBytes(t, p, encode(dt, vals))
	return p
}

// putAt copies vals as dt to p.
func (e *gpuEnv) putAt(t testing.TB, p cu.DevicePtr, dt graph.DType, vals []float32) {
	t.Helper()
	e.putBytes(t, p, encode(dt, vals))
}

// putI32 returns a device copy of vals.
func (e *gpuEnv) putI32(t testing.TB, vals []int32) cu.DevicePtr {
	t.Helper()
	p := e.alloc(t, graph.I32, len(vals))
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	e.putBytes(t, p, b)
	return p
}

// putI64 returns a device int64 holding v (an iteration number).
func (e *gpuEnv) putI64(t testing.TB, v int64) cu.DevicePtr {
	t.Helper()
	p := e.alloc(t, graph.F32, 2)
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, uint64(v))
	e.putBytes(t, p, b)
	return p
}

// getBytes waits for the stream and copies n bytes back from p.
func (e *gpuEnv) getBytes(t testing.TB, p cu.DevicePtr, n int) []byte {
	t.Helper()
	b := make([]byte, max(n, 1))
	e.sync(t)
	if err := e.s.CopyDtoH(unsafe.Pointer(&b[0]), p, units.Bytes(n)); err != nil {
		t.Fatal(err)
	}
	e.sync(t)
	return b[:n]
}

// get waits for the stream and returns n elements of dt at p, widened.
func (e *gpuEnv) get(t testing.TB, dt graph.DType, p cu.DevicePtr, n int) []float32 {
	t.Helper()
	b := e.getBytes(t, p, int(dt.Size())*n)
	out := make([]float32, n)
	for i := range out {
		if dt == graph.BF16 {
			out[i] = cu.Float32FromBF16(binary.LittleEndian.Uint16(b[2*i:]))
		} else {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	}
	return out
}

func (e *gpuEnv) sync(t testing.TB) {
	t.Helper()
	if err := e.s.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

// must fails the test on a wrapper's error.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var dtypes = []graph.DType{graph.F32, graph.BF16}

// newRNG returns a deterministic generator for a test.
func newRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }

// randIn returns n values uniform in [lo, hi), representable in dt (bf16
// inputs are rounded first, so that the reference sees what the kernel
// sees).
func randIn(rng *rand.Rand, dt graph.DType, n int, lo, hi float64) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = round(dt, float32(lo+(hi-lo)*rng.Float64()))
	}
	return s
}

// round rounds v to dt.
func round(dt graph.DType, v float32) float32 {
	if dt == graph.BF16 {
		return cu.Float32FromBF16(cu.BF16FromFloat32(v))
	}
	return v
}

func to64(s []float32) []float64 {
	d := make([]float64, len(s))
	for i, v := range s {
		d[i] = float64(v)
	}
	return d
}

// How results are compared with float64 references. For f32, a result
// rounded once (an elementwise map) is held to a relative error below 1e-5
// element by element, relative to max(|ref|, 1e-3·max|ref|); results of
// sums and chains of operations (GEMMs among them), whose small elements
// come from cancellation and carry errors of a few ulps of the large ones,
// to a norm-wise relative error ‖got − ref‖/‖ref‖ below 1e-5 and the
// element-wise one below 1e-2: a wrong index gives errors of order 1 either
// way, and a wrong element among n moves the norm-wise error by about
// 1/√n. For bf16 (inputs rounded to bf16 first), the norm-wise error is
// held below 1e-2.
type accuracy int

const (
	exact    accuracy = iota // one rounding
	compound                 // sums, chains
)

// errors returns the element-wise and norm-wise relative errors of got
// against want, and the index of the worst element. A NaN where want has
// none (or the reverse) is an infinite error.
func relErrors(got []float32, want []float64) (elem, norm float64, worst int) {
	var maxRef float64
	for _, w := range want {
		if !math.IsNaN(w) {
			maxRef = max(maxRef, math.Abs(w))
		}
	}
	floor := 1e-3 * maxRef
	if floor == 0 {
		floor = 1
	}
	var num, den float64
	for i, w := range want {
		g := float64(got[i])
		if math.IsNaN(g) || math.IsNaN(w) {
			if math.IsNaN(g) != math.IsNaN(w) {
				return math.Inf(1), math.Inf(1), i
			}
			continue
		}
		d := math.Abs(g - w)
		if e := d / max(math.Abs(w), floor); e > elem || math.IsInf(d, 0) {
			elem, worst = e, i
		}
		num += d * d
		den += w * w
	}
	if den == 0 {
		return elem, math.Sqrt(num), worst
	}
	return elem, math.Sqrt(num / den), worst
}

// check compares got with want as accuracy says for dt.
func check(t testing.TB, what string, dt graph.DType, got []float32, want []float64, acc accuracy) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d results, want %d", what, len(got), len(want))
	}
	elem, norm, i := relErrors(got, want)
	var fail bool
	switch {
	case dt == graph.BF16:
		fail = norm >= 1e-2
	case acc == exact:
		fail = elem >= 1e-5
	default:
		fail = norm >= 1e-5 || elem >= 1e-2
	}
	if fail {
		t.Errorf("%s (%v): element-wise error %.3g, norm-wise %.3g; worst at %d: got %v, want %v", what, dt, elem, norm, i, got[i], want[i])
	}
}

// offsets are the element offsets the elementwise tests view their buffers
// at: 0 takes the vector path, 1 the scalar one.
var offsets = []int{0, 1}

// at returns p offset by i elements of dt.
func at(p cu.DevicePtr, dt graph.DType, i int) cu.DevicePtr {
	return p + cu.DevicePtr(int(dt.Size())*i)
}

func name(parts ...any) string { return fmt.Sprint(parts...) }
