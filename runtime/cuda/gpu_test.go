package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/flowkit/flowkit/units"
)

// The tests named TestGPU* need a device; they skip where Init fails.
// TestFakeDriver runs them against a fake driver and cuBLAS built from
// internal/cudafake, so that they also run on machines without a GPU.

var gpu struct {
	once sync.Once
	ctx  *Context
	err  error

	blasOnce sync.Once
	blas     *BLAS
	lt       *BLASLt
	blasErr  error
}

// openGPU returns a context on device 0 shared by all tests, or skips.
func openGPU(t testing.TB) *Context {
	t.Helper()
	gpu.once.Do(func() { gpu.ctx, gpu.err = Open(0) })
	if errors.Is(gpu.err, ErrNotAvailable) && os.Getenv("FLOWKIT_REQUIRE_GPU") == "" {
		t.Skipf("no GPU: %v", gpu.err)
	}
	if gpu.err != nil {
		t.Fatal(gpu.err)
	}
	return gpu.ctx
}

// openGPUBLAS returns shared cuBLAS and cuBLASLt handles, or skips.
func openGPUBLAS(t testing.TB) (*Context, *BLAS, *BLASLt) {
	t.Helper()
	c := openGPU(t)
	gpu.blasOnce.Do(func() {
		if gpu.blas, gpu.blasErr = c.NewBLAS(); gpu.blasErr == nil {
			gpu.lt, gpu.blasErr = c.NewBLASLt()
		}
		t.Logf("libraries: %q", Libraries())
	})
	if errors.Is(gpu.blasErr, ErrNotAvailable) && os.Getenv("FLOWKIT_REQUIRE_GPU") == "" {
		t.Skipf("no cuBLAS: %v", gpu.blasErr)
	}
	if gpu.blasErr != nil {
		t.Fatal(gpu.blasErr)
	}
	return c, gpu.blas, gpu.lt
}

func newStream(t testing.TB, c *Context) *Stream {
	t.Helper()
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Destroy(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// upload copies a float32 or uint16 slice to new device memory, freed when
// the test ends.
func upload[T float32 | uint16](t testing.TB, c *Context, s *Stream, x []T) DevicePtr {
	t.Helper()
	n := units.Bytes(len(x)) * units.Bytes(unsafe.Sizeof(x[0]))
	p, err := c.Malloc(n)
	must(t, err)
	t.Cleanup(func() { c.Free(p) })
	must(t, s.CopyHtoD(p, unsafe.Pointer(&x[0]), n))
	must(t, s.Synchronize())
	return p
}

func download[T float32 | uint16](t testing.TB, s *Stream, p DevicePtr, n int) []T {
	t.Helper()
	x := make([]T, n)
	must(t, s.CopyDtoH(unsafe.Pointer(&x[0]), p, units.Bytes(n)*units.Bytes(unsafe.Sizeof(x[0]))))
	must(t, s.Synchronize())
	return x
}

func TestGPUDeviceInfo(t *testing.T) {
	c := openGPU(t)
	info := c.Info()
	t.Logf("%+v", info)
	t.Logf("libraries: %q", Libraries())
	if info.Name == "" || info.Major < 5 || info.SMs < 1 || info.TotalMem < units.GiB || info.Driver < 11040 {
		t.Errorf("implausible device info %+v", info)
	}
	n, err := DeviceCount()
	if err != nil || n < 1 {
		t.Errorf("DeviceCount() = %d, %v; want ≥ 1", n, err)
	}
	v, err := DriverVersion()
	if err != nil || v != info.Driver {
		t.Errorf("DriverVersion() = %d, %v; want %d", v, err, info.Driver)
	}
	free, total, err := c.MemInfo()
	if err != nil || free <= 0 || free > total {
		t.Errorf("MemInfo() = %v, %v, %v", free, total, err)
	}
	if _, err := Open(1 << 20); err == nil {
		t.Error("Open(1<<20) succeeded")
	}
}

func TestGPUMemoryRoundTrip(t *testing.T) {
	c := openGPU(t)
	s := newStream(t, c)
	const n = 1 << 20
	size := units.Bytes(4 * n)
	h, err := c.MallocHost(size)
	must(t, err)
	defer c.FreeHost(h)
	in := h.Float32s()
	if len(in) != n {
		t.Fatalf("Float32s has %d elements, want %d", len(in), n)
	}
	for i := range in {
		in[i] = float32(i)
	}
	a, err := c.Malloc(size)
	must(t, err)
	defer c.Free(a)
	b, err := c.Malloc(size)
	must(t, err)
	defer c.Free(b)

	must(t, s.CopyHtoD(a, h.Ptr, size))
	must(t, s.Memset32(a.Add(4*100), math.Float32bits(-1), 10))
	must(t, s.CopyDtoD(b, a, size))
	out := make([]float32, n) // pageable Go memory
	must(t, s.CopyDtoH(unsafe.Pointer(&out[0]), b, size))
	must(t, s.Synchronize())
	for i, v := range out {
		want := float32(i)
		if i >= 100 && i < 110 {
			want = -1
		}
		if v != want {
			t.Fatalf("element %d: got %v, want %v", i, v, want)
		}
	}

	// Bad arguments are errors, not crashes.
	for name, err := range map[string]error{
		"negative Malloc":    func() error { _, err := c.Malloc(-1); return err }(),
		"nil copy":           s.CopyHtoD(0, h.Ptr, 4),
		"negative copy":      s.CopyDtoD(a, b, -4),
		"misaligned memset":  s.Memset32(a+2, 0, 1),
		"destroyed stream":   (&Stream{ctx: c}).Synchronize(),
		"huge allocation":    func() error { _, err := c.Malloc(1 << 60); return err }(),
		"nil event in Wait":  s.Wait(nil),
		"nil graph launched": (*GraphExec)(nil).Launch(s),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	if p, err := c.Malloc(0); p != 0 || err != nil {
		t.Errorf("Malloc(0) = %#x, %v; want 0, nil", uintptr(p), err)
	}
}

func TestGPUEventTiming(t *testing.T) {
	c := openGPU(t)
	s := newStream(t, c)
	const size = 64 * units.MiB
	a, err := c.Malloc(size)
	must(t, err)
	defer c.Free(a)
	b, err := c.Malloc(size)
	must(t, err)
	defer c.Free(b)
	start, err := c.NewEvent(true)
	must(t, err)
	defer start.Destroy()
	end, err := c.NewEvent(true)
	must(t, err)
	defer end.Destroy()
	light, err := c.NewEvent(false)
	must(t, err)
	defer light.Destroy()

	must(t, start.Record(s))
	must(t, s.CopyDtoD(b, a, size))
	must(t, end.Record(s))
	must(t, light.Record(s))
	must(t, end.Synchronize())
	done, err := light.Query()
	must(t, light.Synchronize())
	if done2, err2 := light.Query(); !done2 || err2 != nil {
		t.Errorf("Query after Synchronize = %v, %v; want true, nil (before: %v, %v)", done2, err2, done, err)
	}
	d, err := Elapsed(start, end)
	must(t, err)
	t.Logf("device-to-device copy of %v: %v (%.0f GB/s)", size, d, 2*float64(size)/d.Seconds()/1e9)
	if d <= 0 || d > 10*time.Second {
		t.Errorf("Elapsed = %v, want a small positive duration", d)
	}
	if _, err := Elapsed(start, light); err == nil {
		t.Error("Elapsed with a non-timing event succeeded")
	}

	// Another stream waits for the copy before its own.
	s2 := newStream(t, c)
	must(t, s2.Wait(end))
	must(t, s2.Memset32(a, 0, 1))
	must(t, s2.Synchronize())
}

// saxpyPTX computes y[i] = a·x[i] + y[i] for i < n. Its parameters mix
// sizes (u32, f32, u64, u64) to exercise the argument encoding.
const saxpyPTX = `
.version 7.8
.target sm_80
.address_size 64

.visible .entry saxpy(
	.param .u32 saxpy_param_n,
	.param .f32 saxpy_param_a,
	.param .u64 saxpy_param_x,
	.param .u64 saxpy_param_y
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<6>;
	.reg .f32 %f<5>;
	.reg .b64 %rd<8>;

	ld.param.u32 %r1, [saxpy_param_n];
	ld.param.f32 %f1, [saxpy_param_a];
	ld.param.u64 %rd1, [saxpy_param_x];
	ld.param.u64 %rd2, [saxpy_param_y];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.s32 %r5, %r2, %r3, %r4;
	setp.ge.u32 %p1, %r5, %r1;
	@%p1 bra DONE;
	cvta.to.global.u64 %rd3, %rd1;
	cvta.to.global.u64 %rd4, %rd2;
	mul.wide.u32 %rd5, %r5, 4;
	add.s64 %rd6, %rd3, %rd5;
	add.s64 %rd7, %rd4, %rd5;
	ld.global.f32 %f2, [%rd6];
	ld.global.f32 %f3, [%rd7];
	fma.rn.f32 %f4, %f1, %f2, %f3;
	st.global.f32 [%rd7], %f4;
DONE:
	ret;
}
`

func loadSaxpy(t *testing.T, c *Context) *Function {
	t.Helper()
	m, err := c.LoadPTX([]byte(saxpyPTX))
	must(t, err)
	t.Cleanup(func() { must(t, m.Unload()) })
	f, err := m.Function("saxpy")
	must(t, err)
	return f
}

func saxpyData(n int) (x, y []float32) {
	x, y = make([]float32, n), make([]float32, n)
	for i := range n {
		x[i], y[i] = float32(i), float32(2*i)
	}
	return x, y
}

func TestGPUKernel(t *testing.T) {
	c := openGPU(t)
	s := newStream(t, c)
	f := loadSaxpy(t, c)
	must(t, f.SetMaxDynamicShared(64<<10))

	const n = 1000 // not a multiple of the block: the bound check matters
	x, y := saxpyData(n + 24)
	dx, dy := upload(t, c, s, x), upload(t, c, s, y)
	must(t, s.Launch(f, Dim3{(n + 127) / 128, 1, 1}, Dim3{128, 1, 1}, 0, uint32(n), float32(3), dx, dy))
	got := download[float32](t, s, dy, n+24)
	for i, v := range got {
		want := float32(2 * i)
		if i < n {
			want = float32(3*i + 2*i)
		}
		if v != want {
			t.Fatalf("y[%d] = %v, want %v", i, v, want)
		}
	}

	if err := s.Launch(f, Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0, n, float32(3), dx, dy); err == nil {
		t.Error("Launch with an int argument succeeded")
	}
	if _, err := f.mod.Function("nonexistent"); err == nil {
		t.Error("Function(nonexistent) succeeded")
	}
	_, err := c.LoadPTX([]byte(".version 7.8\n.target sm_80\n.address_size 64\n.visible .entry broken()\n{\n\tbogus.instruction;\n\tret;\n}\n"))
	var e *Error
	if !errors.As(err, &e) || e.Log == "" {
		t.Errorf("LoadPTX of bad PTX: got %v, want an *Error with the JIT log", err)
	} else {
		t.Logf("bad PTX: %v", err)
	}
}

func TestGPUGraph(t *testing.T) {
	c := openGPU(t)
	s := newStream(t, c)
	f := loadSaxpy(t, c)
	const n = 4096
	x, y := saxpyData(n)
	dx, dy := upload(t, c, s, x), upload(t, c, s, y)
	h, err := c.MallocHost(4 * n)
	must(t, err)
	defer c.FreeHost(h)
	start, err := c.NewEvent(true)
	must(t, err)
	defer start.Destroy()
	end, err := c.NewEvent(true)
	must(t, err)
	defer end.Destroy()

	must(t, s.BeginCapture())
	must(t, start.RecordExternal(s))
	must(t, s.Launch(f, Dim3{n / 256, 1, 1}, Dim3{256, 1, 1}, 0, uint32(n), float32(0.5), dx, dy))
	must(t, end.RecordExternal(s))
	must(t, s.CopyDtoH(h.Ptr, dy, 4*n))
	g, err := s.EndCapture()
	must(t, err)
	defer g.Destroy()
	nodes, err := g.Nodes()
	must(t, err)
	if nodes != 4 {
		t.Errorf("graph has %d nodes, want 4 (2 event records, kernel, copy)", nodes)
	}
	exec, err := g.Instantiate()
	must(t, err)
	defer exec.Destroy()
	for range 3 {
		must(t, exec.Launch(s))
	}
	must(t, s.Synchronize())
	for i, v := range h.Float32s() {
		if want := float32(2*i) + 3*0.5*float32(i); v != want {
			t.Fatalf("y[%d] = %v after 3 launches, want %v", i, v, want)
		}
	}
	d, err := Elapsed(start, end)
	must(t, err)
	t.Logf("kernel inside the graph: %v", d)
	if d < 0 {
		t.Errorf("Elapsed = %v", d)
	}
}

// relErr is max |got − want| / max |want|.
func relErr(got []float32, want []float64) float64 {
	var num, den float64
	for i := range want {
		num = max(num, math.Abs(float64(got[i])-want[i]))
		den = max(den, math.Abs(want[i]))
	}
	if den == 0 {
		return num
	}
	return num / den
}

var gemmTolerance = map[GemmType]float64{GemmF32: 1e-5, GemmTF32: 5e-3, GemmBF16: 1e-2}

// gemmData returns random operands for g, rounded to bfloat16 for BF16 so
// that the float64 reference sees the device's inputs.
func gemmData(r *rand.Rand, t GemmType, g gemmCase, batch int) (a, b, c []float32) {
	sa, sb, sc := g.sizes()
	a, b, c = randFloats(r, sa*batch), randFloats(r, sb*batch), randFloats(r, sc*batch)
	if t == GemmBF16 {
		for _, x := range [][]float32{a, b, c} {
			for i := range x {
				x[i] = Float32FromBF16(BF16FromFloat32(x[i]))
			}
		}
	}
	return a, b, c
}

// randOperand returns n random values that t's element type holds exactly.
func randOperand(r *rand.Rand, t GemmType, n int) []float32 {
	x := randFloats(r, n)
	if t == GemmBF16 {
		for i := range x {
			x[i] = Float32FromBF16(BF16FromFloat32(x[i]))
		}
	}
	return x
}

// devUpload uploads x as t's element type.
func devUpload(tb testing.TB, c *Context, s *Stream, t GemmType, x []float32) DevicePtr {
	if t != GemmBF16 {
		return upload(tb, c, s, x)
	}
	h := make([]uint16, len(x))
	for i, v := range x {
		h[i] = BF16FromFloat32(v)
	}
	return upload(tb, c, s, h)
}

func devDownload(tb testing.TB, s *Stream, t GemmType, p DevicePtr, n int) []float32 {
	if t != GemmBF16 {
		return download[float32](tb, s, p, n)
	}
	h := download[uint16](tb, s, p, n)
	x := make([]float32, n)
	for i, v := range h {
		x[i] = Float32FromBF16(v)
	}
	return x
}

func TestGPUGemm(t *testing.T) {
	c, b, _ := openGPUBLAS(t)
	s := newStream(t, c)
	r := rand.New(rand.NewPCG(3, 4))
	for _, typ := range []GemmType{GemmF32, GemmTF32, GemmBF16} {
		for _, g := range gemmCases(37, 29, 45, 3) {
			t.Run(fmt.Sprintf("%v/%v", typ, g), func(t *testing.T) {
				ha, hb, hc := gemmData(r, typ, g, 1)
				want := refGemm(g.transA, g.transB, g.m, g.n, g.k, 1.5, ha, g.lda, hb, g.ldb, -0.5, hc, g.ldc)
				da, db, dc := devUpload(t, c, s, typ, ha), devUpload(t, c, s, typ, hb), devUpload(t, c, s, typ, hc)
				must(t, b.Gemm(s, typ, g.transA, g.transB, g.m, g.n, g.k, 1.5, da, g.lda, db, g.ldb, -0.5, dc, g.ldc))
				got := devDownload(t, s, typ, dc, len(hc))
				if e := relErr(got, want); e > gemmTolerance[typ] {
					t.Errorf("relative error %.3g, want < %g", e, gemmTolerance[typ])
				}
				for i := range g.m { // the padding of C is untouched
					for j := g.n; j < g.ldc; j++ {
						if got[i*g.ldc+j] != hc[i*g.ldc+j] {
							t.Fatalf("padding C[%d][%d] changed", i, j)
						}
					}
				}
			})
		}
	}
	if err := b.Gemm(s, GemmF32, false, false, 4, 4, 4, 1, 256, 3, 512, 4, 0, 1024, 4); err == nil {
		t.Error("Gemm with lda < k succeeded")
	}
}

func TestGPUGemmStridedBatched(t *testing.T) {
	c, b, _ := openGPUBLAS(t)
	s := newStream(t, c)
	r := rand.New(rand.NewPCG(5, 6))
	const batch = 3
	for _, typ := range []GemmType{GemmF32, GemmBF16} {
		for _, g := range gemmCases(19, 23, 17, 2) {
			t.Run(fmt.Sprintf("%v/%v", typ, g), func(t *testing.T) {
				sa, sb, sc := g.sizes()
				// Pad the strides, and share one B across the batch.
				strideA, strideB, strideC := sa+5, 0, sc+7
				ha, hb, hc := gemmData(r, typ, g, batch)
				ha = append(ha, make([]float32, 5*batch)...)
				hc = append(hc, make([]float32, 7*batch)...)
				want := make([]float64, len(hc))
				for i, v := range hc {
					want[i] = float64(v)
				}
				for i := range batch {
					w := refGemm(g.transA, g.transB, g.m, g.n, g.k, 0.75, ha[i*strideA:], g.lda, hb[:sb], g.ldb, 2, hc[i*strideC:i*strideC+sc], g.ldc)
					copy(want[i*strideC:], w)
				}
				da, db, dc := devUpload(t, c, s, typ, ha), devUpload(t, c, s, typ, hb), devUpload(t, c, s, typ, hc)
				must(t, b.GemmStridedBatched(s, typ, g.transA, g.transB, g.m, g.n, g.k,
					0.75, da, g.lda, int64(strideA), db, g.ldb, int64(strideB), 2, dc, g.ldc, int64(strideC), batch))
				got := devDownload(t, s, typ, dc, len(hc))
				if e := relErr(got, want); e > gemmTolerance[typ] {
					t.Errorf("relative error %.3g, want < %g", e, gemmTolerance[typ])
				}
			})
		}
	}
}

func TestGPUGemmCapture(t *testing.T) {
	c, b, _ := openGPUBLAS(t)
	s := newStream(t, c)
	r := rand.New(rand.NewPCG(7, 8))
	g := gemmCases(64, 48, 32, 0)[1]
	ha, hb, hc := gemmData(r, GemmF32, g, 1)
	da, db, dc := upload(t, c, s, ha), upload(t, c, s, hb), upload(t, c, s, hc)
	must(t, b.Prepare(s))
	must(t, s.BeginCapture())
	// C = A·B + 0·C, then C = 1·A·B + 1·C: twice A·B per launch.
	must(t, b.Gemm(s, GemmF32, g.transA, g.transB, g.m, g.n, g.k, 1, da, g.lda, db, g.ldb, 0, dc, g.ldc))
	must(t, b.Gemm(s, GemmF32, g.transA, g.transB, g.m, g.n, g.k, 1, da, g.lda, db, g.ldb, 1, dc, g.ldc))
	graph, err := s.EndCapture()
	must(t, err)
	defer graph.Destroy()
	exec, err := graph.Instantiate()
	must(t, err)
	defer exec.Destroy()
	must(t, exec.Launch(s))
	must(t, exec.Launch(s))
	want := refGemm(g.transA, g.transB, g.m, g.n, g.k, 2, ha, g.lda, hb, g.ldb, 0, hc, g.ldc)
	if e := relErr(download[float32](t, s, dc, len(hc)), want); e > 1e-5 {
		t.Errorf("relative error %.3g after the captured Gemms", e)
	}
}

func TestGPUMatmulBias(t *testing.T) {
	c, _, lt := openGPUBLAS(t)
	s := newStream(t, c)
	r := rand.New(rand.NewPCG(9, 10))
	for _, typ := range []GemmType{GemmF32, GemmBF16} {
		for _, g := range gemmCases(33, 40, 24, 8) {
			for _, variant := range []struct{ bias, relu bool }{{true, false}, {true, true}, {false, true}} {
				name := fmt.Sprintf("%v/%v/bias=%v,relu=%v", typ, g, variant.bias, variant.relu)
				t.Run(name, func(t *testing.T) {
					ha, hb, hc := gemmData(r, typ, g, 1)
					bias := randOperand(r, typ, g.n)
					want := refGemm(g.transA, g.transB, g.m, g.n, g.k, 1, ha, g.lda, hb, g.ldb, 0, hc, g.ldc)
					for i := range g.m {
						for j := range g.n {
							v := want[i*g.ldc+j]
							if variant.bias {
								v += float64(bias[j])
							}
							if variant.relu {
								v = max(v, 0)
							}
							want[i*g.ldc+j] = v
						}
					}
					da, db, dc := devUpload(t, c, s, typ, ha), devUpload(t, c, s, typ, hb), devUpload(t, c, s, typ, hc)
					var dbias DevicePtr
					if variant.bias {
						dbias = devUpload(t, c, s, typ, bias)
					}
					err := lt.MatmulBias(s, typ, g.transA, g.transB, g.m, g.n, g.k, da, g.lda, db, g.ldb, dbias, dc, g.ldc, variant.relu)
					if errors.Is(err, ErrNoAlgorithm) {
						t.Logf("%v (the runtime computes this with cuBLAS and a kernel)", err)
						return
					}
					must(t, err)
					if e := relErr(devDownload(t, s, typ, dc, len(hc)), want); e > gemmTolerance[typ] {
						t.Errorf("relative error %.3g, want < %g", e, gemmTolerance[typ])
					}
				})
			}
		}
	}

	t.Run("unaligned", func(t *testing.T) {
		// Operands 4 bytes past a 256-byte boundary need an algorithm for
		// 4-byte alignment.
		g := gemmCases(16, 16, 16, 0)[0]
		ha, hb, hc := gemmData(r, GemmF32, g, 1)
		pad := []float32{0}
		da := upload(t, c, s, append(pad, ha...)).Add(4)
		db := upload(t, c, s, append(pad, hb...)).Add(4)
		dc := upload(t, c, s, append(pad, hc...)).Add(4)
		must(t, lt.MatmulBias(s, GemmF32, false, false, g.m, g.n, g.k, da, g.lda, db, g.ldb, 0, dc, g.ldc, false))
		want := refGemm(false, false, g.m, g.n, g.k, 1, ha, g.lda, hb, g.ldb, 0, hc, g.ldc)
		if e := relErr(download[float32](t, s, dc, len(hc)), want); e > 1e-5 {
			t.Errorf("relative error %.3g", e)
		}
	})
}

// refRowSums returns the m row sums of op(A) for g: MatmulBiasGrad's
// vector.
func refRowSums(g gemmCase, a []float32) []float64 {
	sums := make([]float64, g.m)
	for i := range g.m {
		for p := range g.k {
			if g.transA {
				sums[i] += float64(a[p*g.lda+i])
			} else {
				sums[i] += float64(a[i*g.lda+p])
			}
		}
	}
	return sums
}

// MatmulBiasGrad's product is Gemm's, and its vector the row sums of
// op(A): with A = dy transposed, a layer's weight and bias gradients.
func TestGPUMatmulBiasGrad(t *testing.T) {
	c, _, lt := openGPUBLAS(t)
	s := newStream(t, c)
	r := rand.New(rand.NewPCG(11, 12))
	for _, typ := range []GemmType{GemmF32, GemmBF16} {
		for _, g := range gemmCases(24, 40, 33, 8) {
			t.Run(fmt.Sprintf("%v/%v", typ, g), func(t *testing.T) {
				ha, hb, hc := gemmData(r, typ, g, 1)
				want := refGemm(g.transA, g.transB, g.m, g.n, g.k, 1, ha, g.lda, hb, g.ldb, 0, hc, g.ldc)
				wantGrad := refRowSums(g, ha)
				da, db, dc := devUpload(t, c, s, typ, ha), devUpload(t, c, s, typ, hb), devUpload(t, c, s, typ, hc)
				dgrad := devUpload(t, c, s, typ, make([]float32, g.m))
				err := lt.MatmulBiasGrad(s, typ, g.transA, g.transB, g.m, g.n, g.k, da, g.lda, db, g.ldb, dc, g.ldc, dgrad)
				if errors.Is(err, ErrNoAlgorithm) {
					t.Logf("%v (the runtime computes this with cuBLAS and a kernel)", err)
					return
				}
				must(t, err)
				if e := relErr(devDownload(t, s, typ, dc, len(hc)), want); e > gemmTolerance[typ] {
					t.Errorf("product: relative error %.3g, want < %g", e, gemmTolerance[typ])
				}
				if e := relErr(devDownload(t, s, typ, dgrad, g.m), wantGrad); e > gemmTolerance[typ] {
					t.Errorf("bias gradient: relative error %.3g, want < %g", e, gemmTolerance[typ])
				}
			})
		}
	}
	if err := lt.MatmulBiasGrad(s, GemmF32, false, false, 4, 4, 4, 256, 4, 512, 4, 1024, 4, 0); err == nil {
		t.Error("MatmulBiasGrad without a vector succeeded")
	}
}

// Tuning times every candidate the heuristic offers, keeps the fastest
// that the library accepts, and the kept algorithm computes the product:
// right after tuning, in later calls, and for the bias gradient.
func TestGPUTuneMatmulBias(t *testing.T) {
	c, _, lt := openGPUBLAS(t)
	s := newStream(t, c)
	r := rand.New(rand.NewPCG(13, 14))
	checkTuning := func(t *testing.T, tu Tuning) {
		t.Helper()
		if len(tu.Times) == 0 || tu.Best < 0 || tu.Best >= len(tu.Times) || tu.Times[tu.Best] <= 0 {
			t.Fatalf("tuning %+v: no algorithm kept", tu)
		}
		for i, d := range tu.Times {
			if d > 0 && d < tu.Times[tu.Best] {
				t.Errorf("tuning %+v keeps %d, but %d took %v", tu, tu.Best, i, d)
			}
		}
		t.Log(tu)
	}
	for _, typ := range []GemmType{GemmF32, GemmBF16} {
		g := gemmCases(48, 40, 36, 0)[1] // x·wᵀ, as a dense layer
		t.Run(fmt.Sprintf("%v/%v", typ, g), func(t *testing.T) {
			ha, hb, hc := gemmData(r, typ, g, 1)
			bias := randOperand(r, typ, g.n)
			want := refGemm(g.transA, g.transB, g.m, g.n, g.k, 1, ha, g.lda, hb, g.ldb, 0, hc, g.ldc)
			for i := range g.m {
				for j := range g.n {
					want[i*g.ldc+j] = max(want[i*g.ldc+j]+float64(bias[j]), 0)
				}
			}
			da, db, dbias := devUpload(t, c, s, typ, ha), devUpload(t, c, s, typ, hb), devUpload(t, c, s, typ, bias)
			dc := devUpload(t, c, s, typ, hc)
			tu, err := lt.TuneMatmulBias(s, 3, typ, g.transA, g.transB, g.m, g.n, g.k, da, g.lda, db, g.ldb, dbias, dc, g.ldc, true)
			if errors.Is(err, ErrNoAlgorithm) {
				t.Skip(err)
			}
			must(t, err)
			checkTuning(t, tu)
			if e := relErr(devDownload(t, s, typ, dc, len(hc)), want); e > gemmTolerance[typ] {
				t.Errorf("after tuning: relative error %.3g, want < %g", e, gemmTolerance[typ])
			}
			dc = devUpload(t, c, s, typ, make([]float32, len(hc)))
			must(t, lt.MatmulBias(s, typ, g.transA, g.transB, g.m, g.n, g.k, da, g.lda, db, g.ldb, dbias, dc, g.ldc, true))
			if e := relErr(devDownload(t, s, typ, dc, len(hc)), want); e > gemmTolerance[typ] {
				t.Errorf("with the kept algorithm: relative error %.3g, want < %g", e, gemmTolerance[typ])
			}
			again, err := lt.TuneMatmulBias(s, 3, typ, g.transA, g.transB, g.m, g.n, g.k, da, g.lda, db, g.ldb, dbias, dc, g.ldc, true)
			must(t, err)
			if !reflect.DeepEqual(again, tu) {
				t.Errorf("tuning a tuned shape again gave %+v, want the first %+v", again, tu)
			}
		})
	}
	t.Run("bias gradient", func(t *testing.T) {
		g := gemmCases(24, 40, 33, 0)[2] // dyᵀ·x
		ha, hb, hc := gemmData(r, GemmF32, g, 1)
		want := refGemm(g.transA, g.transB, g.m, g.n, g.k, 1, ha, g.lda, hb, g.ldb, 0, hc, g.ldc)
		wantGrad := refRowSums(g, ha)
		da, db, dc := upload(t, c, s, ha), upload(t, c, s, hb), upload(t, c, s, hc)
		dgrad := upload(t, c, s, make([]float32, g.m))
		tu, err := lt.TuneMatmulBiasGrad(s, 3, GemmF32, g.transA, g.transB, g.m, g.n, g.k, da, g.lda, db, g.ldb, dc, g.ldc, dgrad)
		if errors.Is(err, ErrNoAlgorithm) {
			t.Skip(err)
		}
		must(t, err)
		checkTuning(t, tu)
		if e := relErr(download[float32](t, s, dc, len(hc)), want); e > 1e-5 {
			t.Errorf("product: relative error %.3g", e)
		}
		if e := relErr(download[float32](t, s, dgrad, g.m), wantGrad); e > 1e-5 {
			t.Errorf("bias gradient: relative error %.3g", e)
		}
	})
}

// TestGPUConcurrent drives one context, one BLAS and several streams from
// many goroutines at once: every call must find the context current on
// whatever thread it runs.
func TestGPUConcurrent(t *testing.T) {
	c, b, _ := openGPUBLAS(t)
	const workers, n = 8, 64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			errs <- func() error {
				s, err := c.NewStream()
				if err != nil {
					return err
				}
				defer s.Destroy()
				a, err := c.Malloc(4 * n * n)
				if err != nil {
					return err
				}
				defer c.Free(a)
				out, err := c.Malloc(4 * n * n)
				if err != nil {
					return err
				}
				defer c.Free(out)
				for range 20 {
					if err := s.Memset32(a, math.Float32bits(float32(w)), n*n); err != nil {
						return err
					}
					if err := b.Gemm(s, GemmF32, false, false, n, n, n, 1, a, n, a, n, 0, out, n); err != nil {
						return err
					}
				}
				got := make([]float32, n*n)
				if err := s.CopyDtoH(unsafe.Pointer(&got[0]), out, 4*n*n); err != nil {
					return err
				}
				if err := s.Synchronize(); err != nil {
					return err
				}
				if want := float32(w * w * n); got[0] != want || got[n*n-1] != want {
					return fmt.Errorf("worker %d: got %v, want %v", w, got[0], want)
				}
				return nil
			}()
		})
	}
	wg.Wait()
	close(errs)
	var msgs []string
	for err := range errs {
		if err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	if len(msgs) > 0 {
		t.Error(strings.Join(msgs, "\n"))
	}
}
