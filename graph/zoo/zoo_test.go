package zoo

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/flowkit/flowkit/graph"
	"github.com/stretchr/testify/require"
)

// Hand counts: a conv layer has K·C·R·S + K parameters, a linear layer
// out·in + out.
func TestParamCounts(t *testing.T) {
	tests := []struct {
		model string
		want  int
	}{
		{"mnist-cnn", (32*1*9 + 32) + (64*32*9 + 64) + (3136*128 + 128) + (128*10 + 10)}, // 421,642
		{"cifar-cnn", (32*3*9 + 32) + (64*32*9 + 64) + (4096*512 + 512) + (512*10 + 10)}, // 2,122,186
		{"mlp", (784*256 + 256) + (256*256 + 256) + (256*10 + 10)},                       // 269,322
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			m, err := Build(tt.model, Config{Batch: 4, Train: true})
			require.NoError(t, err)
			if got := m.Graph.NumParams(); got != tt.want {
				t.Errorf("got %d parameters, want %d", got, tt.want)
			}
		})
	}
}

// Forward FLOPs per sample, by hand. Conv: 2·K·OH·OW·C·R·S; linear:
// 2·in·out (a Dense's GEMM); bias add, ReLU: one per element; 2×2 pooling: four compares per
// output; softmax cross-entropy: five per logit.
func TestForwardFLOPsPerSample(t *testing.T) {
	mnistDense := 2*32*28*28*9 + 2*64*14*14*288 + 2*3136*128 + 2*128*10 // 8,482,304
	mnistElem := 3*(32*28*28) + 3*(64*14*14) + 2*128 + 10 + 5*10        // 113,212
	cifarDense := 2*32*32*32*27 + 2*64*16*16*288 + 2*4096*512 + 2*512*10
	cifarElem := 3*(32*32*32) + 3*(64*16*16) + 2*512 + 10 + 5*10
	tests := []struct {
		model        string
		dense, total int
	}{
		{"mnist-cnn", mnistDense, mnistDense + mnistElem},
		{"cifar-cnn", cifarDense, cifarElem + cifarDense},
		{"mlp", 2 * (784*256 + 256*256 + 256*10), 2*(784*256+256*256+256*10) + 2*256 + 2*256 + 10 + 50},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			const batch = 8
			m, err := Build(tt.model, Config{Batch: batch}) // eval: no dropout
			require.NoError(t, err)
			var dense, total float64
			for _, n := range m.Graph.Nodes {
				f := float64(n.Cost().FLOPs)
				total += f
				switch op := n.Op.(type) {
				case graph.Conv2D, graph.MatMul:
					dense += f
				case graph.Dense: // the GEMM's share: less one add (and one ReLU) per output
					perOut := 1.0
					if op.Act == "relu" {
						perOut++
					}
					dense += f - perOut*float64(n.Outputs[0].Spec.Shape.NumElements())
				}
			}
			if got := dense / batch; got != float64(tt.dense) {
				t.Errorf("dense FLOPs/sample: got %.0f, want %d", got, tt.dense)
			}
			if got := total / batch; got != float64(tt.total) {
				t.Errorf("total FLOPs/sample: got %.0f, want %d", got, tt.total)
			}
		})
	}
}

// The training graph's FLOPs are about three times the forward pass's
// (BASELINES.md: about 25 MFLOP per MNIST CNN sample).
func TestTrainingFLOPs(t *testing.T) {
	m, err := Build("mnist-cnn", Config{Batch: 64, Train: true})
	require.NoError(t, err)
	require.NoError(t, m.Graph.Minimize(m.Loss, graph.SGD{LR: 0.01, Momentum: 0.9}))
	perSample := float64(m.Graph.Cost().FLOPs) / 64
	if perSample < 24e6 || perSample < 2.9*8.5e6 || perSample > 26e6 {
		t.Errorf("got %.3g FLOP per sample for a training step, want about 25e6", perSample)
	}
	// conv1's data gradient is not needed (its input is the images).
	for _, n := range m.Graph.Nodes {
		if g, ok := n.Op.(graph.Conv2DGradData); ok && g.X[1] == 1 {
			t.Errorf("got a data gradient for the first conv (node %s), want none", n.Name)
		}
	}
}

// Every bias followed by an activation is fused with it, and every
// fully-connected layer without one or with ReLU is a Dense: no ReLU, GELU
// or BiasAdd is left on its own.
func TestBiasActFused(t *testing.T) {
	tests := []struct {
		model          string
		biasAct, dense int
		act            string
	}{
		{"mlp", 0, 3, "relu"},
		{"mnist-cnn", 2, 2, "relu"},
		{"cifar-cnn", 2, 2, "relu"},
		{"mlp3x4096:depth=4,width=8", 0, 4, "relu"},
		{"gpt2s-blocks:layers=2,hidden=16,heads=4,seq=8", 2, 3 * 2, "gelu"},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			m, err := Build(tt.model, Config{Batch: 2, Train: true})
			require.NoError(t, err)
			count := map[string]int{}
			for _, n := range m.Graph.Nodes {
				count[n.Op.Type()]++
				if a, ok := n.Op.(graph.BiasAct); ok && a.Act != tt.act {
					t.Errorf("%s: got activation %q, want %q", n.Name, a.Act, tt.act)
				}
			}
			require.Equal(t, tt.biasAct, count["bias_act"], "bias_act nodes")
			require.Equal(t, tt.dense, count["dense"], "dense nodes")
			require.Zero(t, count["relu"]+count["gelu"]+count["bias_add"], "unfused biases and activations")
		})
	}
}

func TestBuildErrors(t *testing.T) {
	_, err := Build("resnet-9000", Config{Batch: 1})
	require.Error(t, err)
	require.Contains(t, err.Error(), "mnist-cnn")
	_, err = Build("mlp", Config{Batch: 0})
	require.ErrorContains(t, err, "batch must be 1 to 1048576, got 0")
	// A batch whose tensors' sizes overflow is refused as such, not as a
	// reshape of a negative or wrapped shape.
	_, err = Build("gpt:layers=1", Config{Batch: 1 << 40})
	require.ErrorContains(t, err, "zoo: gpt:layers=1: batch must be 1 to 1048576, got 1099511627776")
}

func TestShapeErrorNamesOpAndShapes(t *testing.T) {
	g := graph.New()
	x := g.Input("x", graph.Shape{4, 3, 8, 8}, graph.F32)
	w := g.Param("w", graph.Shape{16, 5, 3, 3}, graph.Init{})
	y := g.Conv2D(x, w, 1, 1)
	require.Nil(t, y)
	var se *graph.ShapeError
	require.True(t, errors.As(g.Err(), &se), "got %v, want a ShapeError", g.Err())
	for _, want := range []string{"conv2d", "[4,3,8,8]", "[16,5,3,3]"} {
		if !strings.Contains(g.Err().Error(), want) {
			t.Errorf("got %q, want it to mention %s", g.Err(), want)
		}
	}
	// The error is sticky: later ops are not added.
	require.Nil(t, g.ReLU(x))
	require.Len(t, g.Nodes, 0)
}

func TestWorkloadParamCounts(t *testing.T) {
	const h = 768
	perLayer := (3*h*h + 3*h) + (h*h + h) + (4*h*h + 4*h) + (4*h*h + h) + 4*h // attention, MLP, two norms
	tests := []struct {
		model string
		want  int
	}{
		{"mlp3x4096", 3 * (4096*4096 + 4096)},        // 50,343,936
		{"gpt2s-blocks", 12 * perLayer},              // 85,054,464
		{"mlp3x4096:depth=2,width=8", 2 * (8*8 + 8)}, // sizes from the name
		{"gpt2s-blocks:layers=2,hidden=16,heads=4,seq=8", 2 * (12*16*16 + 13*16)},
		// GPT-2 small's 124,439,808 (tied), plus the untied head.
		{"gpt", 124_439_808 + 50257*768},
		{"gpt:tie=on", 124_439_808}, // GPT-2 small exactly
		{"gpt3-175b", gptParams(96, 12288, 2048, 50257)},
		{"gpt3-1.3b", gptParams(24, 2048, 2048, 50257)},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			m, err := Build(tt.model, Config{Batch: 2})
			require.NoError(t, err)
			if got := m.Graph.NumParams(); got != tt.want {
				t.Errorf("got %d parameters, want %d", got, tt.want)
			}
		})
	}
}

// gptParams is DESIGN §4.1's GPT parameter count, 12·l·h²·(1 + 13/(12h) +
// (V+s)/(12·l·h)), plus what it leaves out: the final norm (2h) and the
// untied head (V·h).
func gptParams(l, h, s, v int) int {
	formula := 12 * float64(l) * float64(h) * float64(h) * (1 + 13/(12*float64(h)) + float64(v+s)/(12*float64(l)*float64(h)))
	return int(math.Round(formula)) + 2*h + v*h
}

// A training step's FLOPs agree with the usual formulas: three times the
// forward matmuls, 3·2·N·params for the MLP (less the gradient of the
// input, which no one asks for: 8 products instead of 9) and
// 3·(24·b·s·h²·L + 4·b·s²·h·L) for the transformer.
func TestWorkloadTrainingFLOPs(t *testing.T) {
	tests := []struct {
		model   string
		batch   int
		formula float64
		ratio   float64 // of our FLOPs to the formula's
		tol     float64
	}{
		{"mlp3x4096", 4096, 3 * 2 * 3 * math.Pow(4096, 3), 8.0 / 9, 0.002},
		{"gpt2s-blocks", 8, 3 * (24*8*1024*768*768*12 + 4*8*1024*1024*768*12.0), 1, 0.03},
		// DESIGN §4.1's 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) (Narayanan et
		// al., 2021), which counts attention's products whole, as the
		// Attention op's cost does for causal attention too.
		{"gpt3-175b", 1, gptFLOPs(1, 2048, 96, 12288, 50257), 1, 0.03},
		{"gpt", 8, gptFLOPs(8, 1024, 12, 768, 50257), 1, 0.03},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			m, err := Build(tt.model, Config{Batch: tt.batch, Train: true, DType: graph.BF16})
			require.NoError(t, err)
			require.NoError(t, m.Graph.Minimize(m.Loss, graph.SGD{LR: 0.01}))
			got := float64(m.Graph.Cost().FLOPs)
			t.Logf("%s batch %d: %.5g FLOPs per step, formula %.5g (ratio %.4f)", tt.model, tt.batch, got, tt.formula, got/tt.formula)
			if r := got / tt.formula; math.Abs(r-tt.ratio) > tt.tol*tt.ratio {
				t.Errorf("got %.5g FLOPs, %.4f of the formula's %.5g; want %.4f ± %.1f%%", got, r, tt.formula, tt.ratio, 100*tt.tol)
			}
		})
	}
}

func gptFLOPs(b, s, l, h, v float64) float64 {
	return 72 * b * s * l * h * h * (1 + s/(6*h) + v/(12*l*h))
}

// Every float tensor takes the model's dtype, except the f32 loss and the
// layer norms' saved statistics; parameters are named and initialized as
// in PyTorch.
func TestWorkloadDTypeAndInit(t *testing.T) {
	m, err := Build("gpt2s-blocks:layers=2,hidden=16,heads=4,seq=8", Config{Batch: 3, Train: true, DType: graph.BF16})
	require.NoError(t, err)
	require.Nil(t, m.Labels)
	require.Nil(t, m.Logits)
	require.Equal(t, graph.Spec{Shape: graph.Shape{3, 8, 16}, DType: graph.BF16}, m.Images.Spec)
	require.NoError(t, m.Graph.Minimize(m.Loss, graph.SGD{LR: 0.01, Momentum: 0.9}))
	require.Equal(t, graph.Spec{Shape: graph.Shape{}, DType: graph.F32}, m.Loss.Spec)
	for _, tn := range m.Graph.Tensors {
		stat := tn.Producer != nil && tn.Producer.Op.Type() == "layer_norm" && tn != tn.Producer.Outputs[0]
		scalar := len(tn.Spec.Shape) == 0 // the loss and its gradient seed
		if !stat && !scalar && tn.Spec.DType != graph.BF16 {
			t.Errorf("%s: got %v, want bf16", tn.Name, tn.Spec)
		}
	}
	init := map[string]graph.Init{}
	for _, p := range m.Graph.Params() {
		init[p.Name] = p.Init
	}
	uniform := func(b float64) graph.Init { return graph.Init{Kind: graph.Uniform, Scale: b} }
	for name, want := range map[string]graph.Init{
		"layers.1.self_attn.in_proj_weight":  uniform(math.Sqrt(6.0 / (16 + 48))),
		"layers.1.self_attn.in_proj_bias":    {Kind: graph.Zeros},
		"layers.1.self_attn.out_proj.weight": uniform(1 / math.Sqrt(16)),
		"layers.1.self_attn.out_proj.bias":   {Kind: graph.Zeros},
		"layers.0.linear1.weight":            uniform(1 / math.Sqrt(16)),
		"layers.0.linear2.bias":              uniform(1 / math.Sqrt(64)),
		"layers.0.norm1.weight":              {Kind: graph.Ones},
		"layers.0.norm2.bias":                {Kind: graph.Zeros},
	} {
		got, ok := init[name]
		require.True(t, ok, "parameter %s", name)
		require.Equal(t, want, got, name)
	}
	require.Len(t, init, 2*12)

	mlp, err := Build("mlp3x4096:width=8", Config{Batch: 2})
	require.NoError(t, err)
	var names []string
	for _, p := range mlp.Graph.Params() {
		names = append(names, p.Name)
	}
	require.Equal(t, []string{"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"}, names)
	require.Equal(t, graph.F32, mlp.Images.Spec.DType, "f32 by default")
}

func TestSizeOptions(t *testing.T) {
	s, err := InputShape("gpt2s-blocks:seq=16, hidden=32")
	require.NoError(t, err)
	require.Equal(t, graph.Shape{16, 32}, s)
	s, err = InputShape("mlp3x4096")
	require.NoError(t, err)
	require.Equal(t, graph.Shape{4096}, s)
	for n, want := range map[string]int{"mlp": 10, "cifar-cnn": 10, "mlp3x4096": 0, "gpt2s-blocks:seq=4": 0} {
		c, err := Classes(n)
		require.NoError(t, err)
		require.Equal(t, want, c, n)
	}
	require.True(t, Known("gpt2s-blocks:layers=1"))
	// norm=rms: RMSNorm in place of every LayerNorm, weights without biases.
	for norm, want := range map[string][2]int{"layer": {4, 0}, "rms": {0, 4}} {
		m, err := Build("gpt2s-blocks:layers=2,hidden=16,heads=4,seq=8,norm="+norm, Config{Batch: 1})
		require.NoError(t, err)
		count := map[string]int{}
		for _, n := range m.Graph.Nodes {
			count[n.Op.Type()]++
		}
		require.Equal(t, want, [2]int{count["layer_norm"], count["rms_norm"]}, norm)
	}
	for _, tt := range []struct{ name, want string }{
		{"gpt2s-blocks:layers=0", "layers must be a positive integer"},
		{"gpt2s-blocks:layers=99999999999", "layers=99999999999 is more than the 1024 a model may have"},
		{"gpt2s-blocks:seq=2000000", "seq=2000000 is more than the 1048576 a model may have"},
		{"mlp3x4096:depth=5000", "depth=5000 is more than the 1024"},
		{"gpt:vocab=99999999999999", "vocab=99999999999999 is more than the 1048576"},
		{"llama:theta=2000000000", "theta=2000000000 is more than the 1073741824"},
		{"gpt2s-blocks:depth=2", `unknown size option "depth" (options: layers, hidden, heads, seq, norm, attention)`},
		{"gpt2s-blocks:norm=batch", `norm must be one of layer, rms, got "batch"`},
		{"gpt2s-blocks:seq", "not key=value"},
		{"gpt2s-blocks:seq=8,seq=16", "seq given twice"},
		{"mnist-cnn:width=3", "has no size options"},
		{"gpt3:layers=2", "unknown model"},
		{"gpt2s-blocks:hidden=30,heads=4", "hidden size 30 does not divide into 4 heads"},
	} {
		_, err := Build(tt.name, Config{Batch: 1})
		require.ErrorContains(t, err, tt.want, tt.name)
		if !strings.Contains(tt.want, "divide") {
			require.False(t, Known(tt.name), tt.name)
		}
	}
	_, err = Build("mlp", Config{Batch: 1, DType: graph.I32})
	require.ErrorContains(t, err, "f32 or bf16")
	d, err := ParseDType("bf16")
	require.NoError(t, err)
	require.Equal(t, graph.BF16, d)
	_, err = ParseDType("f16")
	require.ErrorContains(t, err, `not "f16"`)
}

// A tensor-parallel build is one device's part of the model: its sharded
// weights are parts of the whole model's, the rest are whole, so that the
// group holds every parameter once (the sharded ones) or on every device
// (norms, the biases after a TPSum); every layer sums twice going forward.
func TestTensorParallelBuild(t *testing.T) {
	for _, tt := range []struct {
		model string
		tp    int
		sums  int
	}{
		{"mlp", 2, 1},
		{"mlp3x4096:depth=5,width=64", 4, 2},
		{"gpt2s-blocks:layers=3,hidden=32,heads=4,seq=8", 2, 6},
		{"gpt2s-blocks:layers=1,hidden=32,heads=4,seq=8,norm=rms", 4, 2},
		// the embedding, two per block, and the vocabulary statistics
		{"llama:layers=2,hidden=32,heads=4,kv_heads=2,ffn=48,seq=8,vocab=64", 2, 1 + 2*2 + 1},
		{"llama:layers=1,hidden=32,heads=4,ffn=48,seq=8,vocab=64", 4, 1 + 2 + 1},
	} {
		t.Run(tt.model, func(t *testing.T) {
			whole, err := Build(tt.model, Config{Batch: 2})
			require.NoError(t, err)
			part, err := Build(tt.model, Config{Batch: 2, TP: tt.tp})
			require.NoError(t, err)
			params := map[string]*graph.Tensor{}
			for _, p := range whole.Graph.Params() {
				params[p.Name] = p
			}
			var got, want int
			for _, p := range part.Graph.Params() {
				w, ok := params[p.Name]
				require.True(t, ok, "%s is a parameter of the whole model", p.Name)
				if sh := p.Init.Shard; sh != nil {
					require.NoError(t, sh.Check())
					require.Equal(t, w.Spec.Shape, sh.Full, "%s is a part of the whole model's", p.Name)
					require.Equal(t, sh.Shape(), p.Spec.Shape)
					require.Equal(t, tt.tp, sh.Parts)
					got += tt.tp * p.Spec.Shape.NumElements()
				} else {
					require.Equal(t, w.Spec, p.Spec, "%s is whole", p.Name)
					got += p.Spec.Shape.NumElements()
				}
				want += w.Spec.Shape.NumElements()
				w.Init.Shard = nil
				init := p.Init
				init.Shard = nil
				require.Equal(t, w.Init, init, "%s is initialized as the whole model's", p.Name)
			}
			require.Equal(t, len(params), len(part.Graph.Params()))
			require.Equal(t, want, got, "the group holds every parameter")
			sums := 0
			for _, n := range part.Graph.Nodes {
				if _, ok := n.Op.(graph.TPSum); ok {
					sums++
				}
			}
			require.Equal(t, tt.sums, sums)
		})
	}
	_, err := Build("mnist-cnn", Config{Batch: 2, TP: 2})
	require.ErrorContains(t, err, "no tensor-parallel layout")
	_, err = Build("mlp3x4096:width=64", Config{Batch: 2, TP: 3})
	require.ErrorContains(t, err, "tp=3 does not divide width (64)")
}

func TestSplitNames(t *testing.T) {
	require.Equal(t, []string{"mlp", "gpt2s-blocks:layers=2,heads=4", "mnist-cnn", "mlp3x4096:width=64"},
		SplitNames("mlp, gpt2s-blocks:layers=2,heads=4,mnist-cnn,mlp3x4096:width=64"))
	require.Equal(t, []string{"mlp3x4096:width=64", "gpt2s-blocks:layers=2,seq=8"}, SplitNames("mlp3x4096:width=64,gpt2s-blocks:layers=2,seq=8"))
	require.Equal(t, []string{"mlp"}, SplitNames("mlp"))
	require.Equal(t, []string{"a=b", "mlp"}, SplitNames("a=b,mlp"), "a stray option is left to fail as a name")
}

// A GPT's tensor-parallel group splits its vocabulary too: one that does
// not divide is refused with the padding that would.
func TestGPTVocabParallel(t *testing.T) {
	_, err := Build("gpt:layers=1,hidden=16,heads=4,seq=4,vocab=50257", Config{Batch: 1, TP: 2})
	require.ErrorContains(t, err, "tp=2 does not divide vocab (50257); the group splits the vocabulary")
	m, err := Build("gpt:layers=1,hidden=16,heads=4,seq=4,vocab=64", Config{Batch: 2, TP: 4})
	require.NoError(t, err)
	require.Equal(t, graph.Shape{8, 16}, m.Logits.Spec.Shape, "each device's columns of the logits")
	for _, p := range m.Graph.Params() {
		if p.Name == "wte.weight" || p.Name == "lm_head.weight" {
			require.Equal(t, graph.Shape{16, 16}, p.Spec.Shape, p.Name)
		}
	}
	_, ok := m.Loss.Producer.Op.(graph.VocabLoss)
	require.True(t, ok)
}

// A GPT under sequence parallelism: its sums become reduce-scatters and
// all-gathers along the sequence, its position embedding is split by
// positions, and every replicated weight (layer norms, biases after a
// scatter) passes a TPCopy so that its partial gradients are summed. Models
// without the layout, and sequences the group does not divide, are refused.
func TestSequenceParallelBuild(t *testing.T) {
	const model = "gpt:layers=2,hidden=32,heads=4,seq=8,vocab=64"
	m, err := Build(model, Config{Batch: 2, TP: 4, SP: true})
	require.NoError(t, err)
	count := map[string]int{}
	copied := map[string]bool{}
	for _, n := range m.Graph.Nodes {
		count[n.Op.Type()]++
		if _, ok := n.Op.(graph.TPCopy); ok && n.Inputs[0].Persistent() {
			copied[n.Inputs[0].Name] = true
		}
	}
	// Per block two gathers (before the column-parallel layers) and two
	// scatters (after the row-parallel ones); the embedding scatters, the
	// head gathers; the vocabulary statistics are still summed.
	require.Equal(t, 2*2+1, count["tp_gather"])
	require.Equal(t, 2*2+1, count["tp_scatter"])
	require.Equal(t, 1, count["tp_sum"])
	for _, p := range m.Graph.Params() {
		switch {
		case p.Name == "wpe.weight":
			require.Equal(t, graph.Shape{2, 32}, p.Spec.Shape, "two of the eight positions")
			require.Equal(t, 0, p.Init.Shard.Axis)
		case p.Init.Shard == nil:
			require.True(t, copied[p.Name], "%s is replicated: its gradient must be summed", p.Name)
		}
	}
	for _, bad := range []struct {
		model string
		cfg   Config
		err   string
	}{
		{"gpt2s-blocks:layers=1,hidden=32,heads=4,seq=8", Config{Batch: 2, TP: 2, SP: true}, "no sequence-parallel layout; models with one: bert, bert-large, gpt, gpt3-1.3b, gpt3-175b, llama, llama2-7b, llama3-8b"},
		{"gpt:layers=1,hidden=32,heads=4,seq=6,vocab=64", Config{Batch: 2, TP: 4, SP: true}, "tp=4 does not divide"},
		{model, Config{Batch: 2, SP: true}, "needs tp ≥ 2"},
	} {
		_, err := Build(bad.model, bad.cfg)
		require.ErrorContains(t, err, bad.err)
	}
}

// KeepsAttentionProbs tells the models whose attention keeps its
// probabilities from those without attention or with flash attention:
// what recompute=selective recomputes.
func TestKeepsAttentionProbs(t *testing.T) {
	for _, name := range []string{"gpt:layers=1,hidden=16,heads=2,seq=4,vocab=32", "gpt2s-blocks:layers=1,hidden=16,heads=2,seq=4", "bert:layers=1,hidden=16,heads=2,seq=4,vocab=32", "llama:layers=1,hidden=16,heads=2,kv_heads=1,ffn=24,seq=4,vocab=32"} {
		if !KeepsAttentionProbs(name) {
			t.Errorf("%s: no attention found", name)
		}
		if KeepsAttentionProbs(name + ",attention=flash") {
			t.Errorf("%s with flash attention: probabilities found", name)
		}
	}
	for _, name := range []string{"mlp", "mnist-cnn", "mlp3x4096:depth=2,width=16", "resnet:depth=18,image=32", "nope"} {
		if KeepsAttentionProbs(name) {
			t.Errorf("%s: attention found", name)
		}
	}
}
