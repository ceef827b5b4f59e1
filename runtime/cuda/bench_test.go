package cuda

import (
	"testing"

	"github.com/flowkit/flowkit/units"
)

// benchGemm times square n×n×n products of type t with events on the
// device and reports TFLOP/s; ns/op is only the host's enqueue cost.
func benchGemm(b *testing.B, t GemmType, n int) {
	c, blas, _ := openGPUBLAS(b)
	s := newStream(b, c)
	_, size, _, _ := t.gemmTypes()
	bytes := units.Bytes(n * n * size)
	var m [3]DevicePtr
	for i := range m {
		p, err := c.Malloc(bytes)
		must(b, err)
		b.Cleanup(func() { c.Free(p) })
		must(b, s.Memset32(p, 0x3c003c00, int(bytes/4))) // about 0.0078 read as float32 or as bfloat16 pairs
		m[i] = p
	}
	start, err := c.NewEvent(true)
	must(b, err)
	defer start.Destroy()
	end, err := c.NewEvent(true)
	must(b, err)
	defer end.Destroy()
	gemm := func() {
		must(b, blas.Gemm(s, t, false, false, n, n, n, 1, m[0], n, m[1], n, 0, m[2], n))
	}
	gemm() // warm up: workspace, kernel selection
	must(b, s.Synchronize())

	iters := 0
	must(b, start.Record(s))
	for b.Loop() {
		gemm()
		iters++
	}
	must(b, end.Record(s))
	must(b, end.Synchronize())
	d, err := Elapsed(start, end)
	must(b, err)
	flops := 2 * float64(n) * float64(n) * float64(n) * float64(iters)
	b.ReportMetric(flops/d.Seconds()/1e12, "TFLOP/s")
	b.ReportMetric(float64(d.Microseconds())/float64(iters), "device-µs/op")
}

func BenchmarkSgemm4096(b *testing.B) { benchGemm(b, GemmF32, 4096) }

func BenchmarkGemmTF32_4096(b *testing.B) { benchGemm(b, GemmTF32, 4096) }

func BenchmarkGemmBF16_8192(b *testing.B) { benchGemm(b, GemmBF16, 8192) }
