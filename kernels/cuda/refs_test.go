package cuda

import (
	"math"
	"testing"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/kernels/cpu"
)

// The float64 references the GPU tests compare with. TestReferences checks
// them against kernels/cpu (itself tested against float64 references and
// finite differences), here, without a GPU: so that a failure on the GPU
// is the kernel's, not the reference's.

func refGELU(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }

func refGELUGrad(x float64) float64 {
	return 0.5*(1+math.Erf(x/math.Sqrt2)) + x*math.Exp(-0.5*x*x)/math.Sqrt(2*math.Pi)
}

// refSoftmax is the row softmax of x [rows, cols]; with causal, row r sees
// columns j ≤ r mod cols only.
func refSoftmax(x []float64, rows, cols int, causal bool) []float64 {
	y := make([]float64, len(x))
	for r := range rows {
		n := cols
		if causal {
			n = r%cols + 1
		}
		row := x[r*cols : r*cols+n]
		m := math.Inf(-1)
		for _, v := range row {
			m = max(m, v)
		}
		var s float64
		for _, v := range row {
			s += math.Exp(v - m)
		}
		for j, v := range row {
			y[r*cols+j] = math.Exp(v-m) / s
		}
	}
	return y
}

// refSoftmaxBwd is scale·y⊙(dy − Σ y·dy), row by row, over the first
// valid columns (r mod cols + 1 with causal), 0 beyond.
func refSoftmaxBwd(y, dy []float64, rows, cols int, scale float64, causal bool) []float64 {
	dx := make([]float64, len(y))
	for r := range rows {
		n := cols
		if causal {
			n = r%cols + 1
		}
		o := r * cols
		var d float64
		for j := range n {
			d += y[o+j] * dy[o+j]
		}
		for j := range n {
			dx[o+j] = scale * y[o+j] * (dy[o+j] - d)
		}
	}
	return dx
}

// refLayerNorm returns y, mean and rstd.
func refLayerNorm(x, g, b []float64, rows, cols int, eps float64) (y, mean, rstd []float64) {
	y, mean, rstd = make([]float64, len(x)), make([]float64, rows), make([]float64, rows)
	for r := range rows {
		row := x[r*cols : (r+1)*cols]
		var s float64
		for _, v := range row {
			s += v
		}
		mu := s / float64(cols)
		var ss float64
		for _, v := range row {
			ss += (v - mu) * (v - mu)
		}
		rs := 1 / math.Sqrt(ss/float64(cols)+eps)
		for j, v := range row {
			y[r*cols+j] = (v-mu)*rs*g[j] + b[j]
		}
		mean[r], rstd[r] = mu, rs
	}
	return y, mean, rstd
}

// refLayerNormBwd returns dx, dgamma and dbeta given the saved statistics.
func refLayerNormBwd(x, g, dy, mean, rstd []float64, rows, cols int) (dx, dg, db []float64) {
	dx, dg, db = make([]float64, len(x)), make([]float64, cols), make([]float64, cols)
	for r := range rows {
		o := r * cols
		var sg, sgx float64
		for j := range cols {
			xh := (x[o+j] - mean[r]) * rstd[r]
			gg := dy[o+j] * g[j]
			sg += gg
			sgx += gg * xh
			dg[j] += dy[o+j] * xh
			db[j] += dy[o+j]
		}
		a, b := sg/float64(cols), sgx/float64(cols)
		for j := range cols {
			xh := (x[o+j] - mean[r]) * rstd[r]
			dx[o+j] = rstd[r] * (dy[o+j]*g[j] - a - xh*b)
		}
	}
	return dx, dg, db
}

// bnRows returns x [n, c, hw] as c rows of n·hw values, each channel's
// values in the order (sample, position).
func bnRows(x []float64, n, c, hw int) []float64 {
	rows := make([]float64, len(x))
	for i := range n {
		for ch := range c {
			copy(rows[(ch*n+i)*hw:(ch*n+i+1)*hw], x[(i*c+ch)*hw:(i*c+ch+1)*hw])
		}
	}
	return rows
}

// bnUnrows is the inverse of bnRows.
func bnUnrows(rows []float64, n, c, hw int) []float64 {
	x := make([]float64, len(rows))
	for i := range n {
		for ch := range c {
			copy(x[(i*c+ch)*hw:(i*c+ch+1)*hw], rows[(ch*n+i)*hw:(ch*n+i+1)*hw])
		}
	}
	return x
}

// refBatchNorm returns y and each channel's mean and rstd for x [n, c, hw]:
// refLayerNorm over the channels' values as rows, with gamma and beta
// applied by channel.
func refBatchNorm(x, g, b []float64, n, c, hw int, eps float64) (y, mean, rstd []float64) {
	m := n * hw
	ones, zeros := make([]float64, m), make([]float64, m)
	for j := range ones {
		ones[j] = 1
	}
	rows, mean, rstd := refLayerNorm(bnRows(x, n, c, hw), ones, zeros, c, m, eps)
	for ch := range c {
		for j := range m {
			rows[ch*m+j] = rows[ch*m+j]*g[ch] + b[ch]
		}
	}
	return bnUnrows(rows, n, c, hw), mean, rstd
}

// refBatchNormBwd returns dx, dgamma and dbeta, the statistics recomputed
// from x: refLayerNormBwd over the channels' values as rows, with dy·gamma
// for dy and a gamma of ones, for dx; Σ dy·x̂ and Σ dy by channel.
func refBatchNormBwd(x, g, dy []float64, n, c, hw int, eps float64) (dx, dg, db []float64) {
	m := n * hw
	ones := make([]float64, m)
	for j := range ones {
		ones[j] = 1
	}
	xr, dyr := bnRows(x, n, c, hw), bnRows(dy, n, c, hw)
	_, mean, rstd := refLayerNorm(xr, ones, make([]float64, m), c, m, eps)
	gr := make([]float64, len(dyr))
	dg, db = make([]float64, c), make([]float64, c)
	for ch := range c {
		for j := range m {
			o := ch*m + j
			gr[o] = dyr[o] * g[ch]
			dg[ch] += dyr[o] * (xr[o] - mean[ch]) * rstd[ch]
			db[ch] += dyr[o]
		}
	}
	dxr, _, _ := refLayerNormBwd(xr, ones, gr, mean, rstd, c, m)
	return bnUnrows(dxr, n, c, hw), dg, db
}

// refRMSNorm returns y and rstd.
func refRMSNorm(x, g []float64, rows, cols int, eps float64) (y, rstd []float64) {
	y, rstd = make([]float64, len(x)), make([]float64, rows)
	for r := range rows {
		row := x[r*cols : (r+1)*cols]
		var ss float64
		for _, v := range row {
			ss += v * v
		}
		rs := 1 / math.Sqrt(ss/float64(cols)+eps)
		for j, v := range row {
			y[r*cols+j] = v * rs * g[j]
		}
		rstd[r] = rs
	}
	return y, rstd
}

// refRMSNormBwd returns dx and dgamma given the saved statistics.
func refRMSNormBwd(x, g, dy, rstd []float64, rows, cols int) (dx, dg []float64) {
	dx, dg = make([]float64, len(x)), make([]float64, cols)
	for r := range rows {
		o := r * cols
		var sgx float64
		for j := range cols {
			xh := x[o+j] * rstd[r]
			sgx += dy[o+j] * g[j] * xh
			dg[j] += dy[o+j] * xh
		}
		b := sgx / float64(cols)
		for j := range cols {
			dx[o+j] = rstd[r] * (dy[o+j]*g[j] - x[o+j]*rstd[r]*b)
		}
	}
	return dx, dg
}

// refSCE returns the mean cross-entropy and its gradient scaled by dloss.
func refSCE(x []float64, labels []int32, rows, cols int, dloss float64) (loss float64, dx []float64) {
	p := refSoftmax(x, rows, cols, false)
	dx = make([]float64, len(x))
	scored := 0
	for _, l := range labels {
		if l != cpu.IgnoreLabel {
			scored++
		}
	}
	if scored == 0 {
		return 0, dx
	}
	n := float64(scored)
	for r := range rows {
		if labels[r] == cpu.IgnoreLabel {
			continue // not scored: no loss, no gradient
		}
		loss -= math.Log(p[r*cols+int(labels[r])])
		for j := range cols {
			dx[r*cols+j] = dloss * p[r*cols+j] / n
		}
		dx[r*cols+int(labels[r])] -= dloss / n
	}
	return loss / n, dx
}

// refAxisSums returns x [outer, c, inner] summed over the middle axis
// ([outer, inner]) and over the outer and inner ones ([c]).
func refAxisSums(x []float64, outer, c, inner int) (mid, bias []float64) {
	mid, bias = make([]float64, outer*inner), make([]float64, c)
	for o := range outer {
		for j := range c {
			for i := range inner {
				v := x[(o*c+j)*inner+i]
				mid[o*inner+i] += v
				bias[j] += v
			}
		}
	}
	return mid, bias
}

// refAttention returns out [batch·seq, hid] and probs [batch, heads, seq,
// seq] of graph.Attention.
func refAttention(qkv []float64, batch, seq, heads, kv, hid int, causal bool) (out, probs []float64) {
	d := hid / heads
	ld, kw, group := hid+2*kv*d, kv*d, heads/kv
	out, probs = make([]float64, batch*seq*hid), make([]float64, batch*heads*seq*seq)
	scale := 1 / math.Sqrt(float64(d))
	for b := range batch {
		for h := range heads {
			kh := h / group * d // the key and value head's columns in K and V
			s := make([]float64, seq*seq)
			for i := range seq {
				for j := range seq {
					var dot float64
					for c := range d {
						dot += qkv[(b*seq+i)*ld+h*d+c] * qkv[(b*seq+j)*ld+hid+kh+c]
					}
					s[i*seq+j] = dot * scale
				}
			}
			p := refSoftmax(s, seq, seq, causal)
			copy(probs[(b*heads+h)*seq*seq:], p)
			for i := range seq {
				for c := range d {
					var o float64
					for j := range seq {
						o += p[i*seq+j] * qkv[(b*seq+j)*ld+hid+kw+kh+c]
					}
					out[(b*seq+i)*hid+h*d+c] = o
				}
			}
		}
	}
	return out, probs
}

// refAttentionBwd returns dqkv given qkv, the saved probs and dout; a key
// or value head's gradient sums its group's.
func refAttentionBwd(qkv, probs, dout []float64, batch, seq, heads, kv, hid int, causal bool) []float64 {
	d := hid / heads
	ld, kw, group := hid+2*kv*d, kv*d, heads/kv
	dqkv := make([]float64, len(qkv))
	scale := 1 / math.Sqrt(float64(d))
	for b := range batch {
		for h := range heads {
			p := probs[(b*heads+h)*seq*seq : (b*heads+h+1)*seq*seq]
			q := func(t int) int { return (b*seq+t)*ld + h*d }
			k := func(t int) int { return (b*seq+t)*ld + hid + h/group*d }
			v := func(t int) int { return k(t) + kw }
			dp := make([]float64, seq*seq)
			for i := range seq {
				for j := range seq {
					var s float64
					for c := range d {
						s += dout[(b*seq+i)*hid+h*d+c] * qkv[v(j)+c]
					}
					dp[i*seq+j] = s
				}
			}
			ds := refSoftmaxBwd(p, dp, seq, seq, scale, causal)
			for i := range seq {
				for c := range d {
					var dq, dk, dv float64
					for j := range seq {
						dq += ds[i*seq+j] * qkv[k(j)+c]
						dk += ds[j*seq+i] * qkv[q(j)+c]
						dv += p[j*seq+i] * dout[(b*seq+j)*hid+h*d+c]
					}
					dqkv[q(i)+c] = dq
					dqkv[k(i)+c] += dk
					dqkv[v(i)+c] += dv
				}
			}
		}
	}
	return dqkv
}

// refRoPE is RoPE on x [rows, (heads + 2·kv)·d] by its definition, the
// angles negated for sign −1 (the gradient).
func refRoPE(x []float64, rows, seq, heads, kv, d int, theta, sign float64) []float64 {
	y := append([]float64(nil), x...)
	cols, half := (heads+2*kv)*d, d/2
	for r := range rows {
		for h := range heads + kv {
			for i := range half {
				a := sign * float64(r%seq) / math.Pow(theta, float64(2*i)/float64(d))
				at := r*cols + h*d + i
				y[at] = x[at]*math.Cos(a) - x[at+half]*math.Sin(a)
				y[at+half] = x[at+half]*math.Cos(a) + x[at]*math.Sin(a)
			}
		}
	}
	return y
}

// refSwiGLU returns silu(g)·u and, for dy, the gradients of g and u.
func refSwiGLU(g, u, dy float64) (y, dg, du float64) {
	s := 1 / (1 + math.Exp(-g))
	return g * s * u, dy * u * s * (1 + g*(1-s)), dy * g * s
}

// refAdam is AdamUpdate's step t on one element.
func refAdam(w, g, m, v, lr, b1, b2, eps, wd float64, t int) (float64, float64, float64) {
	d := g + wd*w
	m = b1*m + (1-b1)*d
	v = b2*v + (1-b2)*d*d
	mh := m / (1 - math.Pow(b1, float64(t)))
	vh := v / (1 - math.Pow(b2, float64(t)))
	return w - lr*mh/(math.Sqrt(vh)+eps), m, v
}

// refAdamW is AdamUpdate's step t on one element with decoupled decay
// (AdamW): the weight decays, then Adam steps on the gradient alone.
func refAdamW(w, g, m, v, lr, b1, b2, eps, wd float64, t int) (float64, float64, float64) {
	return refAdam(w*(1-lr*wd), g, m, v, lr, b1, b2, eps, 0, t)
}

// nearCPU checks a reference against kernels/cpu's float32 result.
func nearCPU(t *testing.T, what string, ref []float64, got []float32) {
	t.Helper()
	if _, norm, i := relErrors(got, ref); norm > 1e-5 {
		t.Errorf("%s: reference and kernels/cpu differ by %.3g (norm-wise); at %d: %v, cpu %v", what, norm, i, ref[i], got[i])
	}
}

func TestReferences(t *testing.T) {
	rng := newRNG(1)
	rand32 := func(n int) []float32 { return randIn(rng, graph.F32, n, -1, 1) }
	t.Run("gelu", func(t *testing.T) {
		x := rand32(1000)
		for i := range x {
			x[i] *= 4
		}
		y, dx, ones := make([]float32, len(x)), make([]float32, len(x)), make([]float32, len(x))
		for i := range ones {
			ones[i] = 1
		}
		cpu.GELU(nil, x, y)
		cpu.GELUBackward(nil, x, ones, dx)
		ry, rd := make([]float64, len(x)), make([]float64, len(x))
		for i, v := range x {
			ry[i], rd[i] = refGELU(float64(v)), refGELUGrad(float64(v))
		}
		nearCPU(t, "gelu", ry, y)
		nearCPU(t, "gelu grad", rd, dx)
	})
	t.Run("softmax", func(t *testing.T) {
		rows, cols := 7, 33
		x, dy := rand32(rows*cols), rand32(rows*cols)
		y, dx := make([]float32, len(x)), make([]float32, len(x))
		cpu.Softmax(nil, x, y, rows, cols)
		cpu.SoftmaxBackward(nil, y, dy, dx, rows, cols)
		nearCPU(t, "softmax", refSoftmax(to64(x), rows, cols, false), y)
		nearCPU(t, "softmax backward", refSoftmaxBwd(to64(y), to64(dy), rows, cols, 1, false), dx)
	})
	t.Run("layernorm", func(t *testing.T) {
		rows, cols := 5, 19
		x, g, b, dy := rand32(rows*cols), rand32(cols), rand32(cols), rand32(rows*cols)
		y, mean, rstd := make([]float32, len(x)), make([]float32, rows), make([]float32, rows)
		cpu.LayerNorm(nil, x, g, b, y, mean, rstd, rows, cols, 1e-5)
		ry, rm, rr := refLayerNorm(to64(x), to64(g), to64(b), rows, cols, 1e-5)
		nearCPU(t, "y", ry, y)
		nearCPU(t, "mean", rm, mean)
		nearCPU(t, "rstd", rr, rstd)
		dx, dg, db := make([]float32, len(x)), make([]float32, cols), make([]float32, cols)
		cpu.LayerNormBackward(nil, x, g, dy, mean, rstd, dx, dg, db, rows, cols)
		rdx, rdg, rdb := refLayerNormBwd(to64(x), to64(g), to64(dy), rm, rr, rows, cols)
		nearCPU(t, "dx", rdx, dx)
		nearCPU(t, "dgamma", rdg, dg)
		nearCPU(t, "dbeta", rdb, db)
	})
	// BatchNorm's reference is LayerNorm's over each channel's values; its
	// gradient is checked against central differences of Σ dy·y.
	t.Run("batchnorm", func(t *testing.T) {
		n, c, hw, eps := 3, 2, 5, 1e-5
		x, g, b, dy := to64(rand32(n*c*hw)), to64(rand32(c)), to64(rand32(c)), to64(rand32(n*c*hw))
		y, mean, rstd := refBatchNorm(x, g, b, n, c, hw, eps)
		for i := range n {
			for ch := range c {
				for j := range hw {
					o := (i*c+ch)*hw + j
					if w := (x[o]-mean[ch])*rstd[ch]*g[ch] + b[ch]; math.Abs(y[o]-w) > 1e-12 {
						t.Errorf("y[%d] = %v, want %v", o, y[o], w)
					}
				}
			}
		}
		loss := func(x, g, b []float64) float64 {
			y, _, _ := refBatchNorm(x, g, b, n, c, hw, eps)
			var s float64
			for i := range y {
				s += y[i] * dy[i]
			}
			return s
		}
		diff := func(v []float64, i int) float64 {
			const h = 1e-6
			old := v[i]
			v[i] = old + h
			up := loss(x, g, b)
			v[i] = old - h
			down := loss(x, g, b)
			v[i] = old
			return (up - down) / (2 * h)
		}
		dx, dg, db := refBatchNormBwd(x, g, dy, n, c, hw, eps)
		near := func(what string, got []float64, v []float64) {
			for i := range got {
				if w := diff(v, i); math.Abs(got[i]-w) > 1e-6*max(1, math.Abs(w)) {
					t.Errorf("%s[%d] = %v, central difference %v", what, i, got[i], w)
				}
			}
		}
		near("dx", dx, x)
		near("dgamma", dg, g)
		near("dbeta", db, b)
	})
	t.Run("rmsnorm", func(t *testing.T) {
		rows, cols := 5, 19
		x, g, dy := rand32(rows*cols), rand32(cols), rand32(rows*cols)
		y, rstd := make([]float32, len(x)), make([]float32, rows)
		cpu.RMSNorm(nil, x, g, y, rstd, rows, cols, 1e-5)
		ry, rr := refRMSNorm(to64(x), to64(g), rows, cols, 1e-5)
		nearCPU(t, "y", ry, y)
		nearCPU(t, "rstd", rr, rstd)
		dx, dg := make([]float32, len(x)), make([]float32, cols)
		cpu.RMSNormBackward(nil, x, g, dy, rstd, dx, dg, rows, cols)
		rdx, rdg := refRMSNormBwd(to64(x), to64(g), to64(dy), rr, rows, cols)
		nearCPU(t, "dx", rdx, dx)
		nearCPU(t, "dgamma", rdg, dg)
	})
	t.Run("cross-entropy", func(t *testing.T) {
		rows, cols := 9, 10
		x := rand32(rows * cols)
		labels := make([]int32, rows)
		for i := range labels {
			labels[i] = int32(rng.IntN(cols))
		}
		loss, err := cpu.SoftmaxCrossEntropy(nil, x, labels, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		dx := make([]float32, len(x))
		if err := cpu.SoftmaxCrossEntropyBackward(nil, x, labels, 0.5, dx, rows, cols); err != nil {
			t.Fatal(err)
		}
		rl, rdx := refSCE(to64(x), labels, rows, cols, 0.5)
		nearCPU(t, "loss", []float64{rl}, []float32{loss})
		nearCPU(t, "dlogits", rdx, dx)
	})
	t.Run("axis sums", func(t *testing.T) {
		outer, c, inner := 3, 5, 7
		x := rand32(outer * c * inner)
		mid, bias := make([]float32, outer*inner), make([]float32, c)
		cpu.ReduceSum(nil, x, mid, outer, c, inner)
		cpu.BiasGrad(nil, x, bias, outer, c, inner)
		rm, rb := refAxisSums(to64(x), outer, c, inner)
		nearCPU(t, "reduce", rm, mid)
		nearCPU(t, "bias", rb, bias)
	})
	for _, causal := range []bool{false, true} {
		for _, kv := range []int{4, 2, 1} {
			t.Run(name("attention/causal=", causal, "/kv", kv), func(t *testing.T) {
				batch, seq, heads, hid := 2, 5, 4, 8
				qkv, dout := rand32(batch*seq*(hid+2*kv*hid/heads)), rand32(batch*seq*hid)
				out, probs := make([]float32, batch*seq*hid), make([]float32, batch*heads*seq*seq)
				cpu.AttentionForward(nil, qkv, out, probs, batch, seq, heads, kv, hid, causal)
				ro, rp := refAttention(to64(qkv), batch, seq, heads, kv, hid, causal)
				nearCPU(t, "out", ro, out)
				nearCPU(t, "probs", rp, probs)
				dqkv := make([]float32, len(qkv))
				cpu.AttentionBackward(nil, qkv, probs, dout, dqkv, batch, seq, heads, kv, hid, causal)
				nearCPU(t, "dqkv", refAttentionBwd(to64(qkv), to64(probs), to64(dout), batch, seq, heads, kv, hid, causal), dqkv)
			})
		}
	}
	t.Run("rope", func(t *testing.T) {
		rows, seq, heads, kv, d := 6, 3, 4, 2, 6
		x := rand32(rows * (heads + 2*kv) * d)
		y, dx := make([]float32, len(x)), make([]float32, len(x))
		cpu.RoPEForward(nil, x, y, rows, seq, heads, kv, d, 500000)
		cpu.RoPEBackward(nil, x, dx, rows, seq, heads, kv, d, 500000)
		nearCPU(t, "y", refRoPE(to64(x), rows, seq, heads, kv, d, 500000, 1), y)
		nearCPU(t, "dx", refRoPE(to64(x), rows, seq, heads, kv, d, 500000, -1), dx)
	})
	t.Run("swiglu", func(t *testing.T) {
		g, u, dy := rand32(50), rand32(50), rand32(50)
		y, dg, du := make([]float32, 50), make([]float32, 50), make([]float32, 50)
		cpu.SwiGLU(nil, g, u, y)
		cpu.SwiGLUBackward(nil, g, u, dy, dg, du)
		ry, rdg, rdu := make([]float64, 50), make([]float64, 50), make([]float64, 50)
		for i := range g {
			ry[i], rdg[i], rdu[i] = refSwiGLU(float64(g[i]), float64(u[i]), float64(dy[i]))
		}
		nearCPU(t, "y", ry, y)
		nearCPU(t, "dgate", rdg, dg)
		nearCPU(t, "dup", rdu, du)
	})
	for _, decoupled := range []bool{false, true} {
		t.Run(map[bool]string{false: "adam", true: "adamw"}[decoupled], func(t *testing.T) {
			ref, update := refAdam, cpu.AdamUpdate
			if decoupled {
				ref, update = refAdamW, cpu.AdamWUpdate
			}
			w, g, m, v := rand32(100), rand32(100), rand32(100), rand32(100)
			for i := range v {
				v[i] = float32(math.Abs(float64(v[i])))
			}
			rw, rm, rv := make([]float64, 100), make([]float64, 100), make([]float64, 100)
			for i := range w {
				rw[i], rm[i], rv[i] = ref(float64(w[i]), float64(g[i]), float64(m[i]), float64(v[i]), 0.01, 0.9, 0.999, 1e-8, 0.5, 3)
			}
			update(nil, w, g, m, v, 0.01, 0.9, 0.999, 1e-8, 0.5, 3)
			nearCPU(t, "w", rw, w)
			nearCPU(t, "m", rm, m)
			nearCPU(t, "v", rv, v)
		})
	}
}
