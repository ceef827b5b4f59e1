package cpu

import (
	"fmt"
	"math"
	"testing"
)

type attnShape struct {
	batch, seq, heads, hid int
	causal                 bool
	kv                     int // key and value heads; 0: heads
}

// kvHeads is the number of key and value heads.
func (s attnShape) kvHeads() int {
	if s.kv == 0 {
		return s.heads
	}
	return s.kv
}

// width is the number of columns of qkv.
func (s attnShape) width() int { return s.hid + 2*s.kvHeads()*(s.hid/s.heads) }

func (s attnShape) String() string {
	c := ""
	if s.causal {
		c = "/causal"
	}
	if s.kv != 0 {
		c += fmt.Sprintf("/kv%d", s.kv)
	}
	return fmt.Sprintf("b%d_s%d_h%d_d%d%s", s.batch, s.seq, s.heads, s.hid, c)
}

// attentionCases cover one head and several, causal and not, sequences of
// awkward lengths, and (b·heads against the test pools' three workers)
// both the parallel-over-heads and the parallel-GEMM paths.
var attentionCases = []attnShape{
	{1, 1, 1, 1, false, 0},
	{1, 5, 1, 4, false, 0},
	{2, 7, 3, 12, true, 0},
	{3, 13, 4, 16, false, 0},
	{1, 11, 2, 10, true, 0},
	{2, 33, 1, 8, false, 0},
	{1, 70, 2, 6, true, 0},
	// grouped-query attention: groups of 2, 3 and 4 query heads, and one
	// key/value head for all (multi-query attention)
	{2, 5, 4, 8, true, 2},
	{1, 6, 6, 12, false, 2},
	{2, 7, 4, 16, true, 1},
	{2, 9, 8, 16, true, 2},
}

// attentionRef returns out [b·seq, hid] and probs [b, heads, seq, seq] of
// attention over qkv [b·seq, s.width()], straight from the definition.
func attentionRef(qkv []float64, s attnShape) (out, probs []float64) {
	d := s.hid / s.heads
	ld, kw, group := s.width(), s.kvHeads()*d, s.heads/s.kvHeads()
	out = make([]float64, s.batch*s.seq*s.hid)
	probs = make([]float64, s.batch*s.heads*s.seq*s.seq)
	for b := range s.batch {
		for h := range s.heads {
			q := func(i, k int) float64 { return qkv[(b*s.seq+i)*ld+h*d+k] }
			key := func(j, k int) float64 { return qkv[(b*s.seq+j)*ld+s.hid+h/group*d+k] }
			v := func(j, k int) float64 { return qkv[(b*s.seq+j)*ld+s.hid+kw+h/group*d+k] }
			pr := probs[(b*s.heads+h)*s.seq*s.seq:]
			for i := range s.seq {
				n := s.seq
				if s.causal {
					n = i + 1
				}
				m := math.Inf(-1)
				row := make([]float64, n)
				for j := range n {
					for k := range d {
						row[j] += q(i, k) * key(j, k)
					}
					row[j] /= math.Sqrt(float64(d))
					m = max(m, row[j])
				}
				var sum float64
				for j := range row {
					row[j] = math.Exp(row[j] - m)
					sum += row[j]
				}
				for j := range row {
					pr[i*s.seq+j] = row[j] / sum
					for k := range d {
						out[(b*s.seq+i)*s.hid+h*d+k] += row[j] / sum * v(j, k)
					}
				}
			}
		}
	}
	return out, probs
}

// scaledQKV returns qkv spread over [−2, 2), so that the softmaxes are
// far from flat.
func scaledQKV(seed uint64, s attnShape) []float32 {
	x := randSlice(newRNG(seed), s.batch*s.seq*s.width())
	Scale(nil, 2, x, x)
	return x
}

func TestAttentionForward(t *testing.T) {
	for i, s := range attentionCases {
		qkv := scaledQKV(uint64(i), s)
		wantOut, wantProbs := attentionRef(to64(qkv), s)
		for _, tp := range testPools {
			t.Run(s.String()+"/"+tp.name, func(t *testing.T) {
				out := randSlice(newRNG(99), len(wantOut)) // garbage to overwrite
				probs := randSlice(newRNG(98), len(wantProbs))
				AttentionForward(tp.p, qkv, out, probs, s.batch, s.seq, s.heads, s.kvHeads(), s.hid, s.causal)
				checkClose(t, "out", out, wantOut, fwdTol)
				checkClose(t, "probs", probs, wantProbs, fwdTol)
			})
		}
	}
}

// attnImpls are the kernels' two ways of attention, each a forward and a
// backward pass: keeping the probabilities, and flash attention.
var attnImpls = []struct {
	name string
	run  func(p *Pool, s attnShape, qkv, dout []float32) (out, dqkv []float32)
}{
	{"math", func(p *Pool, s attnShape, qkv, dout []float32) (out, dqkv []float32) {
		out, dqkv = make([]float32, len(dout)), randSlice(newRNG(97), len(qkv)) // garbage to overwrite
		probs := make([]float32, s.batch*s.heads*s.seq*s.seq)
		AttentionForward(p, qkv, out, probs, s.batch, s.seq, s.heads, s.kvHeads(), s.hid, s.causal)
		AttentionBackward(p, qkv, probs, dout, dqkv, s.batch, s.seq, s.heads, s.kvHeads(), s.hid, s.causal)
		return out, dqkv
	}},
	{"flash", func(p *Pool, s attnShape, qkv, dout []float32) (out, dqkv []float32) {
		out, dqkv = make([]float32, len(dout)), randSlice(newRNG(97), len(qkv))
		lse := make([]float32, s.batch*s.heads*s.seq)
		FlashAttentionForward(p, qkv, out, lse, s.batch, s.seq, s.heads, s.kvHeads(), s.hid, s.causal)
		FlashAttentionBackward(p, qkv, out, lse, dout, dqkv, s.batch, s.seq, s.heads, s.kvHeads(), s.hid, s.causal)
		return out, dqkv
	}},
}

// Both ways' gradients against central differences of the reference, on
// the cases small enough for them (finite differences are slow), those
// longer sequences included.
func TestAttentionBackward(t *testing.T) {
	for i, s := range flashCases {
		if s.batch*s.seq*s.hid > 1200 {
			continue
		}
		qkv := scaledQKV(uint64(i)+20, s)
		r := randSlice(newRNG(uint64(i)+21), s.batch*s.seq*s.hid)
		want := centralDiff(projected(r, func(x []float64) []float64 {
			out, _ := attentionRef(x, s)
			return out
		}), to64(qkv), fdStep)
		for _, impl := range attnImpls {
			for _, tp := range testPools {
				t.Run(impl.name+"/"+s.String()+"/"+tp.name, func(t *testing.T) {
					_, dqkv := impl.run(tp.p, s, qkv, r)
					checkClose(t, "dqkv", dqkv, want, gradTol)
				})
			}
		}
	}
}

// The results do not depend on the number of workers, bit for bit, either
// way: the plans' numerics must not depend on how a batch is split.
func TestAttentionWorkerIndependent(t *testing.T) {
	s := attnShape{2, attnBlock + 20, 6, 18, true, 2}
	qkv := scaledQKV(5, s)
	dout := randSlice(newRNG(6), s.batch*s.seq*s.hid)
	for _, impl := range attnImpls {
		out1, d1 := impl.run(nil, s, qkv, dout)
		for _, w := range []int{2, 3, 6} {
			out, d := impl.run(NewPool(w), s, qkv, dout)
			for i := range out {
				if out[i] != out1[i] {
					t.Fatalf("%s, %d workers: out[%d] got %v, want %v as serially", impl.name, w, i, out[i], out1[i])
				}
			}
			for i := range d {
				if d[i] != d1[i] {
					t.Fatalf("%s, %d workers: dqkv[%d] got %v, want %v as serially", impl.name, w, i, d[i], d1[i])
				}
			}
		}
	}
}

func TestAttentionPanicsOnBadCall(t *testing.T) {
	qkv, out, probs := make([]float32, 2*4*12), make([]float32, 2*4*4), make([]float32, 2*2*4*4)
	for name, f := range map[string]func(){
		"heads do not divide hid":   func() { AttentionForward(nil, qkv, out, probs, 2, 4, 3, 3, 4, false) },
		"no heads":                  func() { AttentionForward(nil, qkv, out, probs, 2, 4, 0, 1, 4, false) },
		"kv heads do not divide":    func() { AttentionForward(nil, qkv, out, probs, 2, 4, 2, 3, 4, false) },
		"no kv heads":               func() { AttentionForward(nil, qkv, out, probs, 2, 4, 2, 0, 4, false) },
		"qkv too wide for kv heads": func() { AttentionForward(nil, qkv, out, probs, 2, 4, 2, 1, 4, false) },
		"short probs":               func() { AttentionForward(nil, qkv, out, probs[1:], 2, 4, 2, 2, 4, false) },
		"long out":                  func() { AttentionForward(nil, qkv, append(out, 0), probs, 2, 4, 2, 2, 4, false) },
		"short dqkv":                func() { AttentionBackward(nil, qkv, probs, out, qkv[1:], 2, 4, 2, 2, 4, true) },
		"short dout":                func() { AttentionBackward(nil, qkv, probs, out[1:], qkv, 2, 4, 2, 2, 4, true) },
	} {
		t.Run(name, func(t *testing.T) { mustPanicShape(t, f) })
	}
}

// attentionGradRef returns the gradient of attention's out with respect to
// qkv given dout, by the formulas AttentionBackward documents, in float64
// from attentionRef's probabilities.
func attentionGradRef(qkv, dout []float64, s attnShape) []float64 {
	_, probs := attentionRef(qkv, s)
	d := s.hid / s.heads
	ld, kw, group := s.width(), s.kvHeads()*d, s.heads/s.kvHeads()
	scale := 1 / math.Sqrt(float64(d))
	dqkv := make([]float64, len(qkv))
	for b := range s.batch {
		for h := range s.heads {
			row := func(i int) int { return (b*s.seq + i) * ld }
			q, k, v := h*d, s.hid+h/group*d, s.hid+kw+h/group*d
			do := func(i, c int) float64 { return dout[(b*s.seq+i)*s.hid+h*d+c] }
			pr := probs[(b*s.heads+h)*s.seq*s.seq:]
			for i := range s.seq {
				dp := make([]float64, s.seq)
				var dot float64
				for j := range s.seq {
					for c := range d {
						dp[j] += do(i, c) * qkv[row(j)+v+c]
					}
					dot += dp[j] * pr[i*s.seq+j]
				}
				for j := range s.seq {
					p := pr[i*s.seq+j]
					ds := p * (dp[j] - dot) * scale
					for c := range d {
						dqkv[row(j)+v+c] += p * do(i, c)
						dqkv[row(i)+q+c] += ds * qkv[row(j)+k+c]
						dqkv[row(j)+k+c] += ds * qkv[row(i)+q+c]
					}
				}
			}
		}
	}
	return dqkv
}

// Causal attention's products run on blocks of attnBlock rows that skip the
// zeros above the diagonal: sequences shorter than a block, of one block,
// just over, over two and over several, against float64 references
// forward and backward, on every test pool.
func TestAttentionCausalBlocks(t *testing.T) {
	for i, s := range []attnShape{
		{1, 1, 1, 6, true, 0},
		{2, attnBlock - 1, 1, 6, true, 0},
		{1, attnBlock, 2, 8, true, 0},
		{1, attnBlock + 1, 3, 9, true, 0},
		{2, 2*attnBlock + 1, 2, 12, true, 1},
		{1, 3*attnBlock + 17, 4, 16, true, 2},
		{1, 2*attnBlock + 1, 2, 12, false, 0},
	} {
		qkv := scaledQKV(uint64(i)+40, s)
		dout := randSlice(newRNG(uint64(i)+41), s.batch*s.seq*s.hid)
		wantOut, wantProbs := attentionRef(to64(qkv), s)
		wantGrad := attentionGradRef(to64(qkv), to64(dout), s)
		for _, tp := range testPools {
			t.Run(s.String()+"/"+tp.name, func(t *testing.T) {
				out := randSlice(newRNG(99), len(wantOut)) // garbage to overwrite
				probs := randSlice(newRNG(98), len(wantProbs))
				AttentionForward(tp.p, qkv, out, probs, s.batch, s.seq, s.heads, s.kvHeads(), s.hid, s.causal)
				checkClose(t, "out", out, wantOut, fwdTol)
				checkClose(t, "probs", probs, wantProbs, fwdTol)
				dqkv := randSlice(newRNG(97), len(qkv))
				AttentionBackward(tp.p, qkv, probs, dout, dqkv, s.batch, s.seq, s.heads, s.kvHeads(), s.hid, s.causal)
				checkClose(t, "dqkv", dqkv, wantGrad, fwdTol)
			})
		}
	}
}

// lseRef returns, for attention over qkv, the log of each softmax row's
// normalizer, [b, heads, seq], from the definition.
func lseRef(qkv []float64, s attnShape) []float64 {
	d := s.hid / s.heads
	ld, group := s.width(), s.heads/s.kvHeads()
	lse := make([]float64, 0, s.batch*s.heads*s.seq)
	for b := range s.batch {
		for h := range s.heads {
			for i := range s.seq {
				n := s.seq
				if s.causal {
					n = i + 1
				}
				var sum float64
				for j := range n {
					var dot float64
					for k := range d {
						dot += qkv[(b*s.seq+i)*ld+h*d+k] * qkv[(b*s.seq+j)*ld+s.hid+h/group*d+k]
					}
					sum += math.Exp(dot / math.Sqrt(float64(d)))
				}
				lse = append(lse, math.Log(sum))
			}
		}
	}
	return lse
}

// flashCases add to attentionCases sequences longer than a block of query
// rows (attnBlock), causal and not, so that the scores are held block by
// block and dK, dV summed over blocks.
var flashCases = append(attentionCases[:len(attentionCases):len(attentionCases)],
	attnShape{1, 2*attnBlock + 5, 2, 8, true, 1}, attnShape{2, attnBlock + 1, 1, 4, false, 0})

func TestFlashAttentionForward(t *testing.T) {
	for i, s := range flashCases {
		qkv := scaledQKV(uint64(i), s)
		x := to64(qkv)
		wantOut, _ := attentionRef(x, s)
		wantLSE := lseRef(x, s)
		for _, tp := range testPools {
			t.Run(s.String()+"/"+tp.name, func(t *testing.T) {
				out := randSlice(newRNG(99), len(wantOut)) // garbage to overwrite
				lse := randSlice(newRNG(98), len(wantLSE))
				FlashAttentionForward(tp.p, qkv, out, lse, s.batch, s.seq, s.heads, s.kvHeads(), s.hid, s.causal)
				checkClose(t, "out", out, wantOut, fwdTol)
				checkClose(t, "lse", lse, wantLSE, fwdTol)
				// The same products and softmax as AttentionForward's.
				plain := make([]float32, len(out))
				AttentionForward(tp.p, qkv, plain, make([]float32, s.batch*s.heads*s.seq*s.seq), s.batch, s.seq, s.heads, s.kvHeads(), s.hid, s.causal)
				for j := range out {
					if out[j] != plain[j] {
						t.Fatalf("out[%d] = %v, AttentionForward's %v", j, out[j], plain[j])
					}
				}
			})
		}
	}
}
