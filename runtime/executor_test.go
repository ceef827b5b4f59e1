package runtime

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/graph/zoo"
	"github.com/stretchr/testify/require"
)

// gradModel builds a small network using every differentiable op of the
// IR, on a 2×3×6×6 input with 4 classes.
func gradModel(t *testing.T) (g *graph.Graph, x, labels, ids, loss *graph.Tensor) {
	g = graph.New()
	x = g.Input("x", graph.Shape{2, 3, 6, 6}, graph.F32)
	labels = g.Input("labels", graph.Shape{2}, graph.I32)
	ids = g.Input("ids", graph.Shape{2, 3}, graph.I32)
	u := graph.Init{Kind: graph.Uniform, Scale: 0.5}
	w1 := g.Param("w1", graph.Shape{4, 3, 3, 3}, u)
	b1 := g.Param("b1", graph.Shape{4}, u)
	h := g.MaxPool2D(g.ReLU(g.BiasAdd(g.Conv2D(x, w1, 1, 1), b1, 1)), 2, 2) // [2,4,3,3]
	h = g.BiasAct(h, g.Param("b3", graph.Shape{4}, u), 1, "gelu")
	h = g.Flatten(h) // [2,36]
	emb := g.Param("emb", graph.Shape{5, 12}, u)
	e := g.Reshape(g.Embedding(emb, ids), graph.Shape{2, 36})
	h = g.Add(h, g.Mul(e, g.Scale(e, 0.5)))
	gamma := g.Param("gamma", graph.Shape{36}, graph.Init{Kind: graph.Ones})
	beta := g.Param("beta", graph.Shape{36}, graph.Init{Kind: graph.Zeros})
	h = g.GELU(g.LayerNorm(h, gamma, beta, 1e-5))
	w2 := g.Param("w2", graph.Shape{4, 36}, u)
	b2 := g.Param("b2", graph.Shape{4}, u)
	logits := g.Linear(h, w2, b2)
	sm := g.Softmax(logits)
	logits = g.Add(logits, g.BroadcastAxis(g.ReduceSum(sm, 1), 1, 4))
	loss = g.SoftmaxCrossEntropy(logits, labels)
	require.NoError(t, g.Err())
	return g, x, labels, ids, loss
}

// TestGradientsMatchFiniteDifferences checks the autodiff graph and the CPU
// kernels together: for random directions u, the directional derivative
// ∇L·u from the backward pass must match (L(w+hu) − L(w−hu))/2h.
func TestGradientsMatchFiniteDifferences(t *testing.T) {
	g, x, labels, ids, loss := gradModel(t)
	checkGradients(t, g, loss, func(ex *Executor, rng *rand.Rand) {
		for i := range ex.Buffer(x).F {
			ex.Buffer(x).F[i] = float32(rng.NormFloat64())
		}
		copy(ex.Buffer(labels).I, []int32{1, 3})
		copy(ex.Buffer(ids).I, []int32{0, 4, 2, 2, 1, 3})
	})
}

// The same check through attention (causal and not) and the mean-square
// loss: two pre-norm transformer blocks on 2 sequences of 5.
func TestAttentionGradientsMatchFiniteDifferences(t *testing.T) {
	for _, causal := range []bool{false, true} {
		g := graph.New()
		x := g.Input("x", graph.Shape{2, 5, 8}, graph.F32)
		u := graph.Init{Kind: graph.Uniform, Scale: 0.5}
		h := x
		for i := range 2 {
			p := func(name string, s ...int) *graph.Tensor { return g.Param(name+string(rune('0'+i)), graph.Shape(s), u) }
			a := g.LayerNorm(h, p("g", 8), p("b", 8), 1e-5)
			a = g.Attention(g.Linear(a, p("wqkv", 24, 8), p("bqkv", 24)), 2, 5, causal)
			h = g.Add(h, g.GELU(g.Linear(a, p("wo", 8, 8), p("bo", 8))))
		}
		loss := g.MeanSquare(h)
		require.NoError(t, g.Err())
		checkGradients(t, g, loss, func(ex *Executor, rng *rand.Rand) {
			for i := range ex.Buffer(x).F {
				ex.Buffer(x).F[i] = float32(rng.NormFloat64())
			}
		})
	}
}

// The same check through RMSNorm: two layers, each behind a linear layer so
// that its gradient with respect to x reaches a parameter, on 2 sequences of
// 5.
func TestRMSNormGradientsMatchFiniteDifferences(t *testing.T) {
	g := graph.New()
	x := g.Input("x", graph.Shape{2, 5, 8}, graph.F32)
	u := graph.Init{Kind: graph.Uniform, Scale: 0.5}
	p := func(name string, s ...int) *graph.Tensor { return g.Param(name, graph.Shape(s), u) }
	h := g.RMSNorm(g.Linear(x, p("w1", 8, 8), p("b1", 8)), p("g1", 8), 1e-5)
	h = g.RMSNorm(g.GELU(g.Linear(h, p("w2", 6, 8), p("b2", 6))), p("g2", 6), 1e-5)
	loss := g.MeanSquare(h)
	require.NoError(t, g.Err())
	checkGradients(t, g, loss, func(ex *Executor, rng *rand.Rand) {
		for i := range ex.Buffer(x).F {
			ex.Buffer(x).F[i] = float32(rng.NormFloat64())
		}
	})
}

// The same check through batch normalization: a residual block of
// convolutions, each batch-normalized and through ReLU (the first's output
// also the shortcut), global average pooling and a linear head, on 2 images
// of 3×5×5. Batch normalization's dx reaches w1 by both paths, and each of
// its statistics' M = 2·5·5 values depends on both images. The images are
// drawn again until no value entering a ReLU lies within bnKinkMargin of 0:
// a finite difference across the kink would measure the jump in slope, not
// the gradient.
func TestBatchNormGradientsMatchFiniteDifferences(t *testing.T) {
	const bnKinkMargin = 1e-2 // checkGradients' steps move a ReLU input here by up to about 3e-3
	g := graph.New()
	x := g.Input("x", graph.Shape{2, 3, 5, 5}, graph.F32)
	u := graph.Init{Kind: graph.Uniform, Scale: 0.5}
	p := func(name string, s ...int) *graph.Tensor { return g.Param(name, graph.Shape(s), u) }
	bn1 := g.BatchNorm(g.Conv2D(x, p("w1", 4, 3, 3, 3), 1, 1), p("g1", 4), p("b1", 4), 1e-5)
	h := g.ReLU(bn1)
	bn2 := g.BatchNorm(g.Conv2D(h, p("w2", 4, 4, 3, 3), 1, 1), p("g2", 4), p("b2", 4), 1e-5)
	h = g.Add(h, g.ReLU(bn2))
	h = g.Scale(g.ReduceSum(g.Reshape(h, graph.Shape{2, 4, 25}), 2), 1.0/25) // [2,4]
	loss := g.MeanSquare(g.Linear(h, p("w3", 3, 4), p("b3", 3)))
	require.NoError(t, g.Err())
	checkGradients(t, g, loss, func(ex *Executor, rng *rand.Rand) {
		for try := 0; ; try++ {
			require.Less(t, try, 10000, "no images keep every ReLU input %g away from 0", bnKinkMargin)
			for i := range ex.Buffer(x).F {
				ex.Buffer(x).F[i] = float32(rng.NormFloat64())
			}
			require.NoError(t, ex.Run(0))
			near := false
			for _, bn := range []*graph.Tensor{bn1, bn2} {
				for _, v := range ex.Buffer(bn).F {
					near = near || math.Abs(float64(v)) < bnKinkMargin
				}
			}
			if !near {
				return
			}
		}
	})
}

// The same check through a whole GPT of the zoo: embeddings, causal
// blocks, the head and the cross-entropy over every position; with the
// head tied to the token embedding, whose gradient then sums both uses;
// and through a BERT: post-norm bidirectional blocks, the head's transform
// and the decoder's bias, its loss over the masked positions only; and
// both with flash attention.
func TestGPTGradientsMatchFiniteDifferences(t *testing.T) {
	for _, model := range []string{"gpt:layers=2,hidden=8,heads=2,seq=4,vocab=7", "gpt:layers=2,hidden=8,heads=2,seq=4,vocab=7,tie=on",
		"bert:layers=2,hidden=8,heads=2,seq=4,vocab=7", "bert:layers=1,hidden=8,heads=2,seq=4,vocab=7,tie=on",
		"gpt:layers=2,hidden=8,heads=2,seq=4,vocab=7,attention=flash", "bert:layers=1,hidden=8,heads=2,seq=4,vocab=7,attention=flash"} {
		t.Run(model, func(t *testing.T) {
			m, err := zoo.Build(model, zoo.Config{Batch: 2})
			require.NoError(t, err)
			for _, p := range m.Graph.Params() {
				p.Init = graph.Init{Kind: graph.Uniform, Scale: 0.5} // larger than GPT's 0.02, for the differences to show
			}
			checkGradients(t, m.Graph, m.Loss, func(ex *Executor, rng *rand.Rand) {
				for i := range ex.Buffer(m.Images).I {
					ex.Buffer(m.Images).I[i] = int32(rng.IntN(7))
				}
				for i := range ex.Buffer(m.Labels).I {
					ex.Buffer(m.Labels).I[i] = int32(rng.IntN(7))
					if zoo.IsMaskedLanguageModel(model) && i%3 != 0 {
						ex.Buffer(m.Labels).I[i] = graph.IgnoreLabel // a third of the positions masked
					}
				}
			})
		})
	}
}

// The same check through a small LLaMA: rotary embeddings, grouped-query
// attention (two query heads per key/value head), SwiGLU, RMSNorms; with
// flash attention too.
func TestLLaMAGradientsMatchFiniteDifferences(t *testing.T) {
	for _, attn := range []string{"math", "flash"} {
		t.Run(attn, func(t *testing.T) {
			m, err := zoo.Build("llama:layers=2,hidden=16,heads=4,kv_heads=2,ffn=12,seq=4,vocab=7,theta=100,attention="+attn, zoo.Config{Batch: 2})
			require.NoError(t, err)
			for _, p := range m.Graph.Params() {
				if p.Init.Kind == graph.Normal {
					p.Init = graph.Init{Kind: graph.Uniform, Scale: 0.5} // larger than LLaMA's 0.02, for the differences to show
				}
			}
			checkGradients(t, m.Graph, m.Loss, func(ex *Executor, rng *rand.Rand) {
				for i := range ex.Buffer(m.Images).I {
					ex.Buffer(m.Images).I[i] = int32(rng.IntN(7))
				}
				for i := range ex.Buffer(m.Labels).I {
					ex.Buffer(m.Labels).I[i] = int32(rng.IntN(7))
				}
			})
		})
	}
}

// checkGradients compares, for every parameter of g and three random
// directions, the backward pass's directional derivative of loss with
// central finite differences; feed fills the inputs.
func checkGradients(t *testing.T, g *graph.Graph, loss *graph.Tensor, feed func(*Executor, *rand.Rand)) {
	t.Helper()
	params := g.Params()
	grads, err := g.Backward(loss, params)
	require.NoError(t, err)

	store := NewStore(7)
	ex, err := NewExecutor(g, NewCPU(2), store)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	feed(ex, rng)
	lossAt := func() float64 {
		require.NoError(t, ex.Run(0))
		return float64(ex.Buffer(loss).F[0])
	}
	lossAt()
	for pi, p := range params {
		w, _ := store.Get(p.Name)
		grad := append([]float32(nil), ex.Buffer(grads[pi]).F...)
		for trial := range 3 {
			u := make([]float32, len(w))
			var analytic float64
			for i := range u {
				u[i] = float32(rng.NormFloat64())
				analytic += float64(u[i]) * float64(grad[i])
			}
			const h = 2e-4
			orig := append([]float32(nil), w...)
			for i := range w {
				w[i] = orig[i] + h*u[i]
			}
			lp := lossAt()
			for i := range w {
				w[i] = orig[i] - h*u[i]
			}
			lm := lossAt()
			copy(w, orig)
			numeric := (lp - lm) / (2 * h)
			if d := math.Abs(numeric - analytic); d > 2e-2*math.Max(math.Abs(analytic), 1e-1) {
				t.Errorf("%s, direction %d: got ∇L·u = %.6f, want %.6f (finite differences)", p.Name, trial, analytic, numeric)
			}
		}
	}
}

// The same check through Dense layers, with and without ReLU, on a rank-3
// input (the weight gradient sums over both leading axes).
func TestDenseGradientsMatchFiniteDifferences(t *testing.T) {
	g := graph.New()
	x := g.Input("x", graph.Shape{2, 3, 5}, graph.F32)
	u := graph.Init{Kind: graph.Uniform, Scale: 0.5}
	p := func(name string, s ...int) *graph.Tensor { return g.Param(name, graph.Shape(s), u) }
	h := g.Dense(x, p("w1", 7, 5), p("b1", 7), "relu")
	h = g.Dense(h, p("w2", 4, 7), p("b2", 4), "")
	loss := g.MeanSquare(h)
	require.NoError(t, g.Err())
	checkGradients(t, g, loss, func(ex *Executor, rng *rand.Rand) {
		for i := range ex.Buffer(x).F {
			ex.Buffer(x).F[i] = float32(rng.NormFloat64())
		}
	})
}

// A model whose layers are fused (BiasAct, Dense) computes what the same
// model unfused computes, bit for bit in f32: the losses, and every
// parameter and momentum after two SGD steps.
func TestFusedOpsMatchUnfused(t *testing.T) {
	run := func(fused bool) (losses []float32, store *Store, nodes int) {
		g := graph.New()
		x := g.Input("x", graph.Shape{8, 3, 6, 6}, graph.F32)
		u := graph.Init{Kind: graph.Uniform, Scale: 0.5}
		p := func(name string, s ...int) *graph.Tensor { return g.Param(name, graph.Shape(s), u) }
		act := func(h, b *graph.Tensor, name string) *graph.Tensor {
			if fused {
				return g.BiasAct(h, b, 1, name)
			}
			h = g.BiasAdd(h, b, 1)
			if name == "relu" {
				return g.ReLU(h)
			}
			return g.GELU(h)
		}
		h := act(g.Conv2D(x, p("w1", 5, 3, 3, 3), 1, 1), p("b1", 5), "relu") // [8,5,6,6]
		h = g.Flatten(g.MaxPool2D(h, 2, 2))                                  // [8,45]
		h = act(g.MatMul(h, p("w2", 64, 45), false, true), p("b2", 64), "gelu")
		var loss *graph.Tensor
		if fused {
			h = g.Dense(h, p("w3", 64, 64), p("b3", 64), "relu")
			loss = g.MeanSquare(g.Dense(h, p("w4", 8, 64), p("b4", 8), ""))
		} else {
			h = act(g.MatMul(h, p("w3", 64, 64), false, true), p("b3", 64), "relu")
			loss = g.MeanSquare(g.Linear(h, p("w4", 8, 64), p("b4", 8)))
		}
		require.NoError(t, g.Minimize(loss, graph.SGD{LR: 0.01, Momentum: 0.9}))
		store = NewStore(3)
		ex, err := NewExecutor(g, NewCPU(3), store)
		require.NoError(t, err)
		rng := rand.New(rand.NewPCG(4, 5))
		for it := range 2 {
			for i := range ex.Buffer(x).F {
				ex.Buffer(x).F[i] = float32(rng.NormFloat64())
			}
			require.NoError(t, ex.Run(it))
			losses = append(losses, ex.Buffer(loss).F[0])
		}
		return losses, store, len(g.Nodes)
	}
	lf, sf, nf := run(true)
	lu, su, nu := run(false)
	// Forward: one node fewer per BiasAct, two for the Dense with ReLU, one
	// for the one without; backward: one fewer per Dense (DenseGrad).
	require.Equal(t, nu-7, nf, "nodes")
	bits := func(v []float32) []uint32 {
		b := make([]uint32, len(v))
		for i, f := range v {
			b[i] = math.Float32bits(f)
		}
		return b
	}
	require.Equal(t, bits(lu), bits(lf), "losses: got %v fused, %v unfused", lf, lu)
	require.Equal(t, su.Names(), sf.Names())
	for _, name := range su.Names() {
		want, _ := su.Get(name)
		got, _ := sf.Get(name)
		require.Equal(t, bits(want), bits(got), "%s after two steps", name)
	}
}

// A parameter read twice accumulates both gradient contributions.
func TestGradientAccumulates(t *testing.T) {
	g := graph.New()
	w := g.Param("w", graph.Shape{3}, graph.Init{Kind: graph.Ones})
	y := g.ReduceSum(g.Add(g.Scale(w, 2), g.Mul(w, w)), 0) // Σ 2w + w²
	grads, err := g.Backward(y, []*graph.Tensor{w})
	require.NoError(t, err)
	ex, err := NewExecutor(g, NewCPU(1), NewStore(1))
	require.NoError(t, err)
	require.NoError(t, ex.Run(0))
	for i, v := range ex.Buffer(grads[0]).F {
		if v != 4 { // 2 + 2w at w = 1
			t.Errorf("grad[%d]: got %g, want 4", i, v)
		}
	}
}

func TestStoreInitDeterministic(t *testing.T) {
	build := func(seed uint64) []float32 {
		m, err := zoo.Build("mnist-cnn", zoo.Config{Batch: 2})
		require.NoError(t, err)
		s := NewStore(seed)
		_, err = NewExecutor(m.Graph, NewCPU(1), s)
		require.NoError(t, err)
		w, ok := s.Get("fc1.weight")
		require.True(t, ok)
		return w
	}
	a, b, c := build(1), build(1), build(2)
	require.Equal(t, a, b)
	require.NotEqual(t, a, c)
	bound := float32(1 / math.Sqrt(3136))
	for _, v := range a {
		if v < -bound || v >= bound {
			t.Fatalf("got weight %g, want it in ±%g", v, bound)
		}
	}
}

func buildTrain(t *testing.T, model string, batch int) (*zoo.Model, *graph.Graph) {
	t.Helper()
	m, err := zoo.Build(model, zoo.Config{Batch: batch, Train: true, Seed: 5})
	require.NoError(t, err)
	require.NoError(t, m.Graph.Minimize(m.Loss, graph.SGD{LR: 0.05, Momentum: 0.9}))
	return m, m.Graph
}
