package runtime

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/graph"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/units"
)

// TestGPUBatchNorm launches graph.BatchNorm and graph.BatchNormGrad as the
// plan runner does (GPU.launch, with workspace's scratch), in f32 and
// bf16, and compares them with float64 references: the op's shape [N,C,H,W]
// is the kernels' n, c and hw = H·W. No model has batch normalization yet,
// so the plan tests do not reach these cases.
func TestGPUBatchNorm(t *testing.T) {
	g := openGPU(t)
	s, err := g.ctx.NewStream()
	require.NoError(t, err)
	defer s.Destroy()
	rng := rand.New(rand.NewPCG(5, 6))
	for _, dt := range []graph.DType{graph.F32, graph.BF16} {
		for _, sh := range []graph.Shape{{3, 4, 5, 7}, {8, 3, 1, 1}} {
			t.Run(dt.String()+"/"+sh.String(), func(t *testing.T) {
				const eps = 1e-5
				nn, c, hw := sh[0], sh[1], sh[2]*sh[3]
				size := sh.NumElements()
				rnd := func(n int, lo, hi float64) []float32 {
					v := make([]float32, n)
					for i := range v {
						v[i] = float32(lo + (hi-lo)*rng.Float64())
						if dt == graph.BF16 {
							v[i] = cu.Float32FromBF16(cu.BF16FromFloat32(v[i]))
						}
					}
					return v
				}
				x, gamma, beta, dy := rnd(size, -2, 3), rnd(c, 0.5, 1.5), rnd(c, -1, 1), rnd(size, -1, 1)
				put := func(v []float32) cu.DevicePtr {
					b := encodeAs(dt, v)
					p, err := g.ctx.Malloc(units.Bytes(len(b)))
					require.NoError(t, err)
					t.Cleanup(func() { g.ctx.Free(p) })
					require.NoError(t, s.CopyHtoD(p, unsafe.Pointer(&b[0]), units.Bytes(len(b))))
					require.NoError(t, s.Synchronize())
					return p
				}
				get := func(p cu.DevicePtr, n int) []float32 {
					b := make([]byte, n*int(dt.Size()))
					require.NoError(t, s.CopyDtoH(unsafe.Pointer(&b[0]), p, units.Bytes(len(b))))
					require.NoError(t, s.Synchronize())
					return decodeAs(dt, b)
				}
				run := func(op graph.Op, in []cu.DevicePtr, inSpecs []graph.Spec) [][]float32 {
					outSpecs, err := op.Infer(inSpecs)
					require.NoError(t, err)
					var out []cu.DevicePtr
					for _, o := range outSpecs {
						out = append(out, put(make([]float32, o.Shape.NumElements())))
					}
					work := cu.DevicePtr(0)
					if ws := workspace(op, inSpecs); ws > 0 {
						work = put(make([]float32, int(ws)/int(dt.Size())+1))
					}
					require.NoError(t, g.launch(s, op, inSpecs, outSpecs, gpuStep{}, in, out, work))
					var res [][]float32
					for i, o := range outSpecs {
						res = append(res, get(out[i], o.Shape.NumElements()))
					}
					return res
				}
				xs, cs := graph.Spec{Shape: sh, DType: dt}, graph.Spec{Shape: graph.Shape{c}, DType: dt}
				px, pg := put(x), put(gamma)
				y := run(graph.BatchNorm{Eps: eps}, []cu.DevicePtr{px, pg, put(beta)}, []graph.Spec{xs, cs, cs})
				grads := run(graph.BatchNormGrad{Eps: eps}, []cu.DevicePtr{px, pg, put(dy)}, []graph.Spec{xs, cs, xs})

				// The references, channel by channel.
				wy, wdx := make([]float64, size), make([]float64, size)
				wdg, wdb := make([]float64, c), make([]float64, c)
				m := float64(nn * hw)
				for ch := range c {
					idx := func(k int) int { return (k/hw*c+ch)*hw + k%hw }
					var mean, v float64
					for k := range nn * hw {
						mean += float64(x[idx(k)])
					}
					mean /= m
					for k := range nn * hw {
						d := float64(x[idx(k)]) - mean
						v += d * d
					}
					rstd := 1 / math.Sqrt(v/m+eps)
					for k := range nn * hw {
						i := idx(k)
						xh := (float64(x[i]) - mean) * rstd
						wy[i] = xh*float64(gamma[ch]) + float64(beta[ch])
						wdg[ch] += float64(dy[i]) * xh
						wdb[ch] += float64(dy[i])
					}
					a, b := float64(gamma[ch])*wdb[ch]/m, float64(gamma[ch])*wdg[ch]/m
					for k := range nn * hw {
						i := idx(k)
						xh := (float64(x[i]) - mean) * rstd
						wdx[i] = rstd * (float64(dy[i])*float64(gamma[ch]) - a - xh*b)
					}
				}
				tol := 1e-5
				if dt == graph.BF16 {
					tol = 1e-2
				}
				for _, r := range []struct {
					what string
					got  []float32
					want []float64
				}{{"y", y[0], wy}, {"dx", grads[0], wdx}, {"dgamma", grads[1], wdg}, {"dbeta", grads[2], wdb}} {
					var num, den float64
					for i, w := range r.want {
						d := float64(r.got[i]) - w
						num += d * d
						den += w * w
					}
					require.Less(t, math.Sqrt(num/den), tol, "%s: got %v, want %v", r.what, r.got, r.want)
				}
			})
		}
	}
}

// encodeAs returns v as dt's bytes.
func encodeAs(dt graph.DType, v []float32) []byte {
	b := make([]byte, max(len(v), 1)*int(dt.Size()))
	for i, f := range v {
		if dt == graph.BF16 {
			binary.LittleEndian.PutUint16(b[2*i:], cu.BF16FromFloat32(f))
		} else {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
		}
	}
	return b
}

// decodeAs returns dt's bytes b as float32s.
func decodeAs(dt graph.DType, b []byte) []float32 {
	v := make([]float32, len(b)/int(dt.Size()))
	for i := range v {
		if dt == graph.BF16 {
			v[i] = cu.Float32FromBF16(binary.LittleEndian.Uint16(b[2*i:]))
		} else {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	}
	return v
}
