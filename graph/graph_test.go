package graph

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestInfer(t *testing.T) {
	f := func(s ...int) Spec { return Spec{Shape(s), F32} }
	tests := []struct {
		name string
		op   Op
		in   []Spec
		want []Spec // nil: an error whose text contains err
		err  string
	}{
		{"matmul", MatMul{}, []Spec{f(4, 3), f(3, 5)}, []Spec{f(4, 5)}, ""},
		{"matmul transB", MatMul{TransB: true}, []Spec{f(4, 3), f(5, 3)}, []Spec{f(4, 5)}, ""},
		{"matmul transA", MatMul{TransA: true}, []Spec{f(3, 4), f(3, 5)}, []Spec{f(4, 5)}, ""},
		{"matmul rank 3 keeps leading axes", MatMul{}, []Spec{f(2, 7, 3), f(3, 5)}, []Spec{f(2, 7, 5)}, ""},
		{"matmul rank 3 transposed is a matrix", MatMul{TransA: true}, []Spec{f(2, 7, 3), f(14, 5)}, []Spec{f(3, 5)}, ""},
		{"matmul mismatch", MatMul{}, []Spec{f(4, 3), f(4, 5)}, nil, "inner dimensions differ: 3 vs 4"},
		{"matmul rank 1", MatMul{}, []Spec{f(4), f(4, 5)}, nil, "rank ≥ 2"},
		{"dense", Dense{Act: "relu"}, []Spec{f(4, 3), f(5, 3), f(5)}, []Spec{f(4, 5)}, ""},
		{"dense rank 3 keeps leading axes", Dense{}, []Spec{f(2, 7, 3), f(5, 3), f(5)}, []Spec{f(2, 7, 5)}, ""},
		{"dense bf16", Dense{}, []Spec{{Shape{4, 3}, BF16}, {Shape{5, 3}, BF16}, {Shape{5}, BF16}}, []Spec{{Shape{4, 5}, BF16}}, ""},
		{"dense features", Dense{}, []Spec{f(4, 3), f(5, 4), f(5)}, nil, "x has 3 features, w takes 4"},
		{"dense bias", Dense{}, []Spec{f(4, 3), f(5, 3), f(4)}, nil, "bias must be [5] (w's rows)"},
		{"dense act", Dense{Act: "gelu"}, []Spec{f(4, 3), f(5, 3), f(5)}, nil, `unknown activation "gelu"`},
		{"dense dtypes", Dense{}, []Spec{f(4, 3), {Shape{5, 3}, BF16}, f(5)}, nil, "dtypes differ"},
		{"dense rank", Dense{}, []Spec{f(3), f(5, 3), f(5)}, nil, "rank ≥ 2"},
		{"dense arity", Dense{}, []Spec{f(4, 3), f(5, 3)}, nil, "takes 3 inputs, got 2"},
		{"dense grad", DenseGrad{}, []Spec{f(4, 5), f(4, 3)}, []Spec{f(5, 3), f(5)}, ""},
		{"dense grad rank 3", DenseGrad{}, []Spec{f(2, 7, 5), f(2, 7, 3)}, []Spec{f(5, 3), f(5)}, ""},
		{"dense grad rows", DenseGrad{}, []Spec{f(4, 5), f(3, 3)}, nil, "same leading axes"},
		{"dense grad ranks", DenseGrad{}, []Spec{f(2, 2, 5), f(4, 3)}, nil, "same leading axes"},
		{"dense grad dtypes", DenseGrad{}, []Spec{f(4, 5), {Shape{4, 3}, BF16}}, nil, "dtypes differ"},
		{"conv", Conv2D{Window{1, 1, 1, 1}}, []Spec{f(8, 3, 32, 32), f(16, 3, 3, 3)}, []Spec{f(8, 16, 32, 32)}, ""},
		{"conv stride 2", Conv2D{Window{2, 2, 0, 0}}, []Spec{f(1, 1, 7, 7), f(2, 1, 3, 3)}, []Spec{f(1, 2, 3, 3)}, ""},
		{"conv channels", Conv2D{Window{1, 1, 0, 0}}, []Spec{f(1, 3, 8, 8), f(2, 4, 3, 3)}, nil, "3 channels, w expects 4"},
		{"conv too small", Conv2D{Window{1, 1, 0, 0}}, []Spec{f(1, 1, 2, 2), f(1, 1, 3, 3)}, nil, "does not fit"},
		{"conv stride 0", Conv2D{Window{0, 1, 0, 0}}, []Spec{f(1, 1, 4, 4), f(1, 1, 3, 3)}, nil, "stride"},
		{"pool", MaxPool2D{KH: 2, KW: 2, Window: Window{2, 2, 0, 0}}, []Spec{f(2, 4, 7, 7)}, []Spec{f(2, 4, 3, 3)}, ""},
		{"bias add", BiasAdd{Axis: 1}, []Spec{f(2, 4, 3, 3), f(4)}, []Spec{f(2, 4, 3, 3)}, ""},
		{"bias add wrong size", BiasAdd{Axis: 1}, []Spec{f(2, 4, 3, 3), f(3)}, nil, "bias must be [4]"},
		{"bias act", BiasAct{Axis: 1, Act: "relu"}, []Spec{f(2, 4, 3, 3), f(4)}, []Spec{f(2, 4, 3, 3)}, ""},
		{"bias act bf16", BiasAct{Axis: 2, Act: "gelu"}, []Spec{{Shape{2, 5, 8}, BF16}, {Shape{8}, BF16}}, []Spec{{Shape{2, 5, 8}, BF16}}, ""},
		{"bias act unknown", BiasAct{Axis: 1, Act: "tanh"}, []Spec{f(2, 4), f(4)}, nil, `unknown activation "tanh" (want relu or gelu)`},
		{"bias act no act", BiasAct{Axis: 1}, []Spec{f(2, 4), f(4)}, nil, `unknown activation ""`},
		{"bias act wrong size", BiasAct{Axis: 1, Act: "relu"}, []Spec{f(2, 4), f(3)}, nil, "bias must be [4] (axis 1 of x)"},
		{"bias act axis", BiasAct{Axis: 2, Act: "relu"}, []Spec{f(2, 4), f(4)}, nil, "axis 2 out of range for rank 2"},
		{"bias act dtypes", BiasAct{Axis: 1, Act: "gelu"}, []Spec{f(2, 4), {Shape{4}, BF16}}, nil, "dtypes differ: x is f32, input 1 is bf16"},
		{"bias act ints", BiasAct{Axis: 0, Act: "relu"}, []Spec{{Shape{4}, I32}, {Shape{4}, I32}}, nil, "floating point"},
		{"bias act arity", BiasAct{Axis: 0, Act: "relu"}, []Spec{f(4)}, nil, "takes 2 inputs, got 1"},
		{"bias act grad", BiasActGrad{Axis: 1, Act: "gelu"}, []Spec{f(3, 4), f(4), f(3, 4)}, []Spec{f(3, 4)}, ""},
		{"bias act grad dy", BiasActGrad{Axis: 1, Act: "gelu"}, []Spec{f(3, 4), f(4), f(4, 3)}, nil, "dy must be [3,4], x's shape"},
		{"bias act grad dtypes", BiasActGrad{Axis: 1, Act: "relu"}, []Spec{f(3, 4), f(4), {Shape{3, 4}, BF16}}, nil, "input 2 is bf16"},
		{"bias act grad unknown", BiasActGrad{Axis: 1, Act: "Relu"}, []Spec{f(3, 4), f(4), f(3, 4)}, nil, "unknown activation"},
		{"add mismatch", Add{}, []Spec{f(2, 3), f(3, 2)}, nil, "same shape"},
		{"reshape", Reshape{Shape{6}}, []Spec{f(2, 3)}, []Spec{f(6)}, ""},
		{"reshape count", Reshape{Shape{7}}, []Spec{f(2, 3)}, nil, "cannot reshape"},
		{"reduce", ReduceSum{Axis: 1}, []Spec{f(2, 3, 4)}, []Spec{f(2, 4)}, ""},
		{"broadcast", BroadcastAxis{Axis: 1, Size: 3}, []Spec{f(2, 4)}, []Spec{f(2, 3, 4)}, ""},
		{"softmax ce", SoftmaxCrossEntropy{}, []Spec{f(8, 10), {Shape{8}, I32}}, []Spec{f()}, ""},
		{"softmax ce float labels", SoftmaxCrossEntropy{}, []Spec{f(8, 10), f(8)}, nil, "labels must be i32 [8]"},
		{"layer norm", LayerNorm{Eps: 1e-5}, []Spec{f(2, 5, 8), f(8), f(8)}, []Spec{f(2, 5, 8), f(2, 5), f(2, 5)}, ""},
		{"rms norm", RMSNorm{Eps: 1e-6}, []Spec{f(2, 5, 8), f(8)}, []Spec{f(2, 5, 8), f(2, 5)}, ""},
		{"rms norm bf16", RMSNorm{Eps: 1e-6}, []Spec{{Shape{4, 8}, BF16}, {Shape{8}, BF16}}, []Spec{{Shape{4, 8}, BF16}, f(4)}, ""},
		{"rms norm gamma", RMSNorm{Eps: 1e-6}, []Spec{f(2, 8), f(4)}, nil, "gamma must be [8]"},
		{"rms norm eps", RMSNorm{}, []Spec{f(2, 8), f(8)}, nil, "eps must be positive, got 0"},
		{"rms norm rank 0", RMSNorm{Eps: 1e-6}, []Spec{f(), f(1)}, nil, "x must have rank ≥ 1"},
		{"rms norm ints", RMSNorm{Eps: 1e-6}, []Spec{{Shape{2, 8}, I32}, f(8)}, nil, "floating point"},
		{"rms norm arity", RMSNorm{Eps: 1e-6}, []Spec{f(2, 8), f(8), f(8)}, nil, "takes 2 inputs, got 3"},
		{"rms norm grad", RMSNormGrad{}, []Spec{f(2, 5, 8), f(8), f(2, 5, 8), f(2, 5)}, []Spec{f(2, 5, 8), f(8)}, ""},
		{"rms norm grad rstd", RMSNormGrad{}, []Spec{f(2, 5, 8), f(8), f(2, 5, 8), f(2, 8)}, nil, "inconsistent shapes"},
		{"rms norm grad arity", RMSNormGrad{}, []Spec{f(2, 8), f(8), f(2, 8)}, nil, "takes 4 inputs, got 3"},
		{"embedding", Embedding{}, []Spec{f(100, 16), {Shape{4, 7}, I32}}, []Spec{f(4, 7, 16)}, ""},
		{"dropout rate", Dropout{Rate: 1}, []Spec{f(3)}, nil, "rate"},
		{"attention", Attention{Heads: 4, Seq: 5}, []Spec{f(10, 48)}, []Spec{f(10, 16), f(2, 4, 5, 5)}, ""},
		{"attention rank 3", Attention{Heads: 2, Seq: 7, Causal: true}, []Spec{f(3, 7, 12)}, []Spec{f(3, 7, 4), f(3, 2, 7, 7)}, ""},
		{"attention bf16", Attention{Heads: 1, Seq: 2}, []Spec{{Shape{2, 6}, BF16}}, []Spec{{Shape{2, 2}, BF16}, {Shape{1, 1, 2, 2}, BF16}}, ""},
		{"attention not 3·hidden", Attention{Heads: 1, Seq: 5}, []Spec{f(10, 16)}, nil, "16 columns, not 3·hidden"},
		{"attention rows", Attention{Heads: 2, Seq: 4}, []Spec{f(10, 12)}, nil, "10 rows are not a whole number of sequences of 4"},
		{"attention heads", Attention{Heads: 3, Seq: 5}, []Spec{f(10, 24)}, nil, "hidden size 8 does not divide into 3 heads"},
		{"attention no heads", Attention{Seq: 5}, []Spec{f(10, 24)}, nil, "heads and seq must be ≥ 1"},
		{"attention rank 1", Attention{Heads: 1, Seq: 1}, []Spec{f(12)}, nil, "rank ≥ 2"},
		{"attention ints", Attention{Heads: 1, Seq: 1}, []Spec{{Shape{2, 3}, I32}}, nil, "floating point"},
		{"attention grad", AttentionGrad{Heads: 2, Seq: 5}, []Spec{f(10, 12), f(2, 2, 5, 5), f(10, 4)}, []Spec{f(10, 12)}, ""},
		{"gqa", Attention{Heads: 4, Seq: 5, KVHeads: 2}, []Spec{f(10, 8*3)}, []Spec{f(10, 4*3), f(2, 4, 5, 5)}, ""},
		{"gqa kv heads", Attention{Heads: 4, Seq: 5, KVHeads: 3}, []Spec{f(10, 30)}, nil, "3 kv heads do not divide 4 heads"},
		{"gqa columns", Attention{Heads: 4, Seq: 5, KVHeads: 2}, []Spec{f(10, 20)}, nil, "20 columns, not (heads + 2·kv heads)·d = 8·d"},
		{"gqa grad", AttentionGrad{Heads: 4, Seq: 5, KVHeads: 1}, []Spec{f(10, 12), f(2, 4, 5, 5), f(10, 8)}, []Spec{f(10, 12)}, ""},
		{"flash", Attention{Heads: 4, Seq: 5, Flash: true}, []Spec{f(10, 48)}, []Spec{f(10, 16), f(2, 4, 5)}, ""},
		{"flash bf16 lse is f32", Attention{Heads: 1, Seq: 2, Flash: true}, []Spec{{Shape{2, 6}, BF16}}, []Spec{{Shape{2, 2}, BF16}, f(1, 1, 2)}, ""},
		{"flash grad", AttentionGrad{Heads: 4, Seq: 5, KVHeads: 2, Flash: true}, []Spec{f(10, 32), f(10, 16), f(2, 4, 5), f(10, 16)}, []Spec{f(10, 32)}, ""},
		{"flash grad arity", AttentionGrad{Heads: 2, Seq: 5, Flash: true}, []Spec{f(10, 12), f(2, 2, 5, 5), f(10, 4)}, nil, "takes 4 inputs, got 3"},
		{"flash grad out", AttentionGrad{Heads: 2, Seq: 5, Flash: true}, []Spec{f(10, 12), f(10, 12), f(2, 2, 5), f(10, 4)}, nil, "out must be [10,4]"},
		{"flash grad lse", AttentionGrad{Heads: 2, Seq: 5, Flash: true}, []Spec{f(10, 12), f(10, 4), f(2, 2, 5, 5), f(10, 4)}, nil, "lse must be [2,2,5] of f32"},
		{"flash grad lse dtype", AttentionGrad{Heads: 2, Seq: 5, Flash: true}, []Spec{f(10, 12), f(10, 4), {Shape{2, 2, 5}, BF16}, f(10, 4)}, nil, "lse must be [2,2,5] of f32"},
		{"flash grad dout", AttentionGrad{Heads: 2, Seq: 5, Flash: true}, []Spec{f(10, 12), f(10, 4), f(2, 2, 5), f(10, 12)}, nil, "dout must be [10,4]"},
		{"flash grad out dtype", AttentionGrad{Heads: 2, Seq: 5, Flash: true}, []Spec{{Shape{10, 12}, BF16}, f(10, 4), f(2, 2, 5), {Shape{10, 4}, BF16}}, nil, "out is f32, qkv bf16: they must have one dtype"},
		{"attention grad dout dtype", AttentionGrad{Heads: 2, Seq: 5}, []Spec{f(10, 12), f(2, 2, 5, 5), {Shape{10, 4}, BF16}}, nil, "dout is bf16, qkv f32: they must have one dtype"},
		{"rope", RoPE{Heads: 4, KVHeads: 2, Seq: 5, Theta: 1e4}, []Spec{f(2, 5, 16)}, []Spec{f(2, 5, 16)}, ""},
		{"rope bf16", RoPE{Heads: 2, Seq: 5, Theta: 1e4}, []Spec{{Shape{5, 12}, BF16}}, []Spec{{Shape{5, 12}, BF16}}, ""},
		{"rope odd d", RoPE{Heads: 2, Seq: 5, Theta: 1e4}, []Spec{f(5, 18)}, nil, "not (heads + 2·kv heads)·d = 6·d for an even d"},
		{"rope rows", RoPE{Heads: 2, Seq: 4, Theta: 1e4}, []Spec{f(5, 12)}, nil, "5 rows are not a whole number of sequences of 4"},
		{"rope theta", RoPE{Heads: 2, Seq: 5}, []Spec{f(5, 12)}, nil, "theta must be positive"},
		{"rope kv heads", RoPE{Heads: 2, KVHeads: 4, Seq: 5, Theta: 1}, []Spec{f(5, 20)}, nil, "kv heads dividing heads"},
		{"rope grad", RoPEGrad{Heads: 2, Seq: 5, Theta: 1e4}, []Spec{f(5, 12)}, []Spec{f(5, 12)}, ""},
		{"swiglu", SwiGLU{}, []Spec{f(3, 4), f(3, 4)}, []Spec{f(3, 4)}, ""},
		{"swiglu shapes", SwiGLU{}, []Spec{f(3, 4), f(4, 3)}, nil, "same shape"},
		{"swiglu grad", SwiGLUGrad{}, []Spec{f(3, 4), f(3, 4), f(3, 4)}, []Spec{f(3, 4), f(3, 4)}, ""},

		{"attention grad probs", AttentionGrad{Heads: 2, Seq: 5}, []Spec{f(10, 12), f(2, 1, 5, 5), f(10, 4)}, nil, "probs must be [2,2,5,5]"},
		{"attention grad dout", AttentionGrad{Heads: 2, Seq: 5}, []Spec{f(10, 12), f(2, 2, 5, 5), f(10, 12)}, nil, "dout must be [10,4]"},
		{"mean square", MeanSquare{}, []Spec{{Shape{2, 3, 4}, BF16}}, []Spec{f()}, ""},
		{"mean square ints", MeanSquare{}, []Spec{{Shape{2}, I32}}, nil, "floating point"},
		{"mean square grad", MeanSquareGrad{}, []Spec{{Shape{2, 3}, BF16}, f()}, []Spec{{Shape{2, 3}, BF16}}, ""},
		{"mean square grad dloss", MeanSquareGrad{}, []Spec{f(2, 3), f(1)}, nil, "dloss must be a scalar"},
		{"softmax ce of bf16 is f32", SoftmaxCrossEntropy{}, []Spec{{Shape{8, 10}, BF16}, {Shape{8}, I32}}, []Spec{f()}, ""},
		{"update", SGDUpdate{LR: 1}, []Spec{f(3), f(3)}, nil, ""},
		{"arity", ReLU{}, []Spec{f(3), f(3)}, nil, "takes 1 inputs, got 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.op.Infer(tt.in)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				require.ErrorContains(t, err, tt.op.Type(), "the error names the op")
				return
			}
			require.NoError(t, err)
			require.Equal(t, len(tt.want), len(got))
			for i := range got {
				if !got[i].Shape.Equal(tt.want[i].Shape) || got[i].DType != tt.want[i].DType {
					t.Errorf("output %d: got %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func hasSignature(sigs []Signature, want string) bool {
	for _, s := range sigs {
		if s.String() == want {
			return true
		}
	}
	return false
}

// MatMul's signatures are OneFlow's (DESIGN §4.1), with the axes following
// the transposes.
func TestMatMulSignatures(t *testing.T) {
	f := func(s ...int) Spec { return Spec{Shape(s), F32} }
	tests := []struct {
		op   MatMul
		in   []Spec
		want []string
	}{
		{MatMul{}, []Spec{f(4, 3), f(3, 5)}, []string{"S(0)←S(0),B", "S(1)←B,S(1)", "P←S(1),S(0)", "P←P,B", "B←B,B"}},
		{MatMul{TransB: true}, []Spec{f(4, 3), f(5, 3)}, []string{"S(0)←S(0),B", "S(1)←B,S(0)", "P←S(1),S(1)"}},
		{MatMul{TransA: true}, []Spec{f(3, 4), f(3, 5)}, []string{"S(0)←S(1),B", "P←S(0),S(0)"}},
		{MatMul{}, []Spec{f(2, 7, 3), f(3, 5)}, []string{"S(0)←S(0),B", "S(1)←S(1),B", "S(2)←B,S(1)", "P←S(2),S(0)"}},
	}
	for _, tt := range tests {
		out, err := tt.op.Infer(tt.in)
		require.NoError(t, err)
		sigs := tt.op.Signatures(tt.in, out)
		for _, w := range tt.want {
			if !hasSignature(sigs, w) {
				t.Errorf("%+v on %v: got %v, want it to include %s", tt.op, tt.in, sigs, w)
			}
		}
	}
}

// Dense's and DenseGrad's signatures are MatMul's and BiasAdd's (or
// BiasGrad's) together: a split of the rows or of the output features, or
// broadcast; the gradients of split rows are partial sums.
func TestDenseSignatures(t *testing.T) {
	f := func(s ...int) Spec { return Spec{Shape(s), F32} }
	for _, tt := range []struct {
		op   Op
		in   []Spec
		want []string
	}{
		{Dense{Act: "relu"}, []Spec{f(2, 7, 3), f(5, 3), f(5)}, []string{"S(0)←S(0),B,B", "S(1)←S(1),B,B", "S(2)←B,S(0),S(0)", "B←B,B,B"}},
		{DenseGrad{}, []Spec{f(4, 5), f(4, 3)}, []string{"P,P←S(0),S(0)", "S(0),S(0)←S(1),B", "S(1),B←B,S(1)", "P,P←P,B", "B,B←B,B"}},
	} {
		out, err := tt.op.Infer(tt.in)
		require.NoError(t, err)
		sigs := tt.op.Signatures(tt.in, out)
		require.Len(t, sigs, len(tt.want), "%v", sigs)
		for _, w := range tt.want {
			if !hasSignature(sigs, w) {
				t.Errorf("%+v on %v: got %v, want it to include %s", tt.op, tt.in, sigs, w)
			}
		}
	}
}

// Every signature of every op names one layout per input and output, and
// split axes exist.
func TestSignaturesWellFormed(t *testing.T) {
	for name, g := range map[string]*Graph{"cnn": signatureGraph(t), "transformer": transformerGraph(t), "fused": fusedGraph(t, true), "llama": llamaGraph(t), "resnet": residualGraph(t)} {
		t.Run(name, func(t *testing.T) { checkSignatures(t, g) })
	}
}

// residualGraph is a residual block of convolutions with batch
// normalization, global average pooling and a linear head, trained by
// momentum SGD.
func residualGraph(t *testing.T) *Graph {
	g := New()
	x := g.Input("x", Shape{4, 3, 6, 6}, F32)
	p := func(name string, s ...int) *Tensor { return g.Param(name, Shape(s), Init{}) }
	bn := func(h *Tensor, name string, c int) *Tensor {
		return g.BatchNorm(h, p(name+".weight", c), p(name+".bias", c), 1e-5)
	}
	h := g.ReLU(bn(g.Conv2D(x, p("w1", 5, 3, 3, 3), 1, 1), "bn1", 5))
	h = g.ReLU(g.Add(h, bn(g.Conv2D(h, p("w2", 5, 5, 3, 3), 1, 1), "bn2", 5)))
	h = g.Scale(g.ReduceSum(g.Reshape(h, Shape{4, 5, 36}), 2), 1.0/36)
	h = g.Linear(h, p("fc.weight", 2, 5), p("fc.bias", 2))
	require.NoError(t, g.Minimize(g.MeanSquare(h), SGD{LR: 0.01, Momentum: 0.9}))
	return g
}

// transformerGraph is a pre-norm transformer block in bf16 trained by
// momentum SGD on the mean square of its output.
func transformerGraph(t *testing.T) *Graph {
	g := New()
	x := g.Input("x", Shape{2, 5, 8}, BF16)
	p := func(name string, s ...int) *Tensor { return g.TypedParam(name, Shape(s), BF16, Init{}) }
	h := g.LayerNorm(x, p("norm.weight", 8), p("norm.bias", 8), 1e-5)
	h = g.Attention(g.Linear(h, p("in_proj_weight", 24, 8), p("in_proj_bias", 24)), 2, 5, true)
	h = g.Add(x, g.GELU(g.Linear(h, p("out_proj.weight", 8, 8), nil)))
	require.NoError(t, g.Minimize(g.MeanSquare(h), SGD{LR: 0.01, Momentum: 0.9}))
	for _, s := range g.byKind(State) {
		require.Equal(t, BF16, s.Spec.DType, "%s takes its weight's dtype", s.Name)
	}
	return g
}

// llamaGraph is a LLaMA-style block, grouped-query attention with rotary
// embeddings and a SwiGLU MLP, trained by Adam.
func llamaGraph(t *testing.T) *Graph {
	g := New()
	x := g.Input("x", Shape{2, 4, 8}, F32)
	p := func(name string, s ...int) *Tensor { return g.Param(name, Shape(s), Init{}) }
	h := g.RMSNorm(x, p("norm1", 8), 1e-5)
	qkv := g.RoPE(g.MatMul(h, p("qkv", 16, 8), false, true), 4, 2, 4, 1e4) // 4 heads of 2, 2 kv heads
	h = g.Add(x, g.MatMul(g.GQAttention(qkv, 4, 2, 4, true), p("o", 8, 8), false, true))
	f := g.RMSNorm(h, p("norm2", 8), 1e-5)
	f = g.SwiGLU(g.MatMul(f, p("gate", 12, 8), false, true), g.MatMul(f, p("up", 12, 8), false, true))
	h = g.Add(h, g.MatMul(f, p("down", 8, 12), false, true))
	require.NoError(t, g.Minimize(g.MeanSquare(h), Adam{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}))
	return g
}

// fusedGraph is a conv layer with ReLU and a linear layer with GELU, their
// biases and activations fused or not, trained by SGD.
func fusedGraph(t *testing.T, fused bool) *Graph {
	g := New()
	x := g.Input("x", Shape{4, 3, 6, 6}, F32)
	p := func(name string, s ...int) *Tensor { return g.Param(name, Shape(s), Init{}) }
	act := func(h, b *Tensor, axis int, name string) *Tensor {
		if fused {
			return g.BiasAct(h, b, axis, name)
		}
		h = g.BiasAdd(h, b, axis)
		if name == "relu" {
			return g.ReLU(h)
		}
		return g.GELU(h)
	}
	h := act(g.Conv2D(x, p("w1", 5, 3, 3, 3), 1, 1), p("b1", 5), 1, "relu")
	h = act(g.MatMul(g.Flatten(h), p("w2", 5*6*6, 7), false, false), p("b2", 7), 1, "gelu")
	if fused {
		h = g.Dense(g.Dense(h, p("w3", 6, 7), p("b3", 6), "relu"), p("w4", 2, 6), p("b4", 2), "")
	} else {
		h = g.Linear(g.ReLU(g.Linear(h, p("w3", 6, 7), p("b3", 6))), p("w4", 2, 6), p("b4", 2))
	}
	require.NoError(t, g.Minimize(g.MeanSquare(h), SGD{LR: 0.01}))
	return g
}

func signatureGraph(t *testing.T) *Graph {
	g := New()
	x := g.Input("x", Shape{4, 3, 8, 8}, F32)
	y := g.Input("y", Shape{4}, I32)
	w := g.Param("w", Shape{6, 3, 3, 3}, Init{})
	b := g.Param("b", Shape{6}, Init{})
	h := g.MaxPool2D(g.ReLU(g.BiasAdd(g.Conv2D(x, w, 1, 1), b, 1)), 2, 2)
	h = g.Flatten(h)
	gm := g.Param("gamma", Shape{96}, Init{})
	h = g.GELU(g.LayerNorm(h, gm, gm, 1e-5))
	w2 := g.Param("w2", Shape{10, 96}, Init{})
	logits := g.Softmax(g.Linear(h, w2, nil))
	loss := g.SoftmaxCrossEntropy(g.Dropout(logits, 0.1, 1), y)
	require.NoError(t, g.Minimize(loss, Adam{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}))
	return g
}

func checkSignatures(t *testing.T, g *Graph) {
	for _, n := range g.Nodes {
		sigs := n.Op.Signatures(specs(n.Inputs), specs(n.Outputs))
		require.NotEmpty(t, sigs, n.Name)
		for _, s := range sigs {
			require.Len(t, s.In, len(n.Inputs), "%s: %v", n.Name, s)
			require.Len(t, s.Out, len(n.Outputs), "%s: %v", n.Name, s)
			check := func(l []SBP, ts []*Tensor) {
				for i, p := range l {
					if p.Kind == Split && (p.Axis < 0 || p.Axis >= len(ts[i].Spec.Shape)) {
						t.Errorf("%s: signature %v splits %s on axis %d", n.Name, s, ts[i], p.Axis)
					}
				}
			}
			check(s.In, n.Inputs)
			check(s.Out, n.Outputs)
		}
	}
}

func TestBackwardErrors(t *testing.T) {
	g := New()
	w := g.Param("w", Shape{3}, Init{})
	v := g.Param("v", Shape{3}, Init{})
	loss := g.ReduceSum(w, 0)
	_, err := g.Backward(loss, []*Tensor{w, v})
	require.True(t, errors.Is(err, ErrNoGradient), "got %v, want ErrNoGradient", err)
	require.ErrorContains(t, err, "v")

	_, err = g.Backward(w, []*Tensor{w})
	require.ErrorContains(t, err, "scalar")

	g2 := New()
	x := g2.Input("x", Shape{2, 3}, F32)
	w2 := g2.Param("w", Shape{3, 4}, Init{})
	y := g2.MatMul(x, w2, false, false)
	l2 := g2.ReduceSum(g2.ReduceSum(y, 1), 0)
	grads, err := g2.Backward(l2, []*Tensor{w2})
	require.NoError(t, err)
	require.True(t, grads[0].Spec.Shape.Equal(Shape{3, 4}), "got %v", grads[0].Spec.Shape)
	for _, n := range g2.Nodes {
		if n.Phase == Backward {
			if m, ok := n.Op.(MatMul); ok && !m.TransA {
				t.Errorf("got a backward matmul %+v for the input x, want only dW", m)
			}
		}
	}
}

func TestDTypeAndShape(t *testing.T) {
	for _, d := range []DType{F32, BF16, F16, I32} {
		got, err := ParseDType(d.String())
		require.NoError(t, err)
		require.Equal(t, d, got)
	}
	_, err := ParseDType("f64")
	require.ErrorContains(t, err, "f64")
	require.Equal(t, 120, Shape{2, 3, 4, 5}.NumElements())
	require.Equal(t, 1, Shape{}.NumElements())
	o, m, i := Shape{2, 3, 4, 5}.Split3(2)
	require.Equal(t, []int{6, 4, 5}, []int{o, m, i})
	require.Equal(t, "[2,3]", Shape{2, 3}.String())
}

func TestUniqueNames(t *testing.T) {
	g := New()
	x := g.Input("x", Shape{2}, F32)
	a, b := g.ReLU(x), g.ReLU(x)
	require.NotEqual(t, a.Name, b.Name)
	require.True(t, strings.HasPrefix(b.Name, "relu"))
}

// Attention's FLOPs are those of its two products per sequence and head
// plus the softmax; its gradient's, four products plus dS.
func TestAttentionAndMeanSquareCost(t *testing.T) {
	f := func(s ...int) Spec { return Spec{Shape(s), F32} }
	const batch, heads, seq, hid = 3, 2, 5, 8
	d := hid / heads
	scores := batch * heads * seq * seq
	qkv, out, probs := f(batch*seq, 3*hid), f(batch*seq, hid), f(batch, heads, seq, seq)
	tests := []struct {
		name  string
		op    Op
		in    []Spec
		flops int
	}{
		{"attention", Attention{Heads: heads, Seq: seq}, []Spec{qkv}, 2*batch*heads*(2*seq*seq*d) + 5*scores},
		{"attention_grad", AttentionGrad{Heads: heads, Seq: seq}, []Spec{qkv, probs, out}, 4*batch*heads*(2*seq*seq*d) + 4*scores},
		// Flash: the same forward products; backward a fifth, which
		// recomputes the scores, and the exponentials.
		{"flash", Attention{Heads: heads, Seq: seq, Flash: true}, []Spec{qkv}, 2*batch*heads*(2*seq*seq*d) + 5*scores},
		{"flash_grad", AttentionGrad{Heads: heads, Seq: seq, Flash: true}, []Spec{qkv, out, f(batch, heads, seq), out}, 5*batch*heads*(2*seq*seq*d) + 8*scores},
		// Causal flash attention computes the scores on and below the
		// diagonal only; the others compute them all.
		{"flash causal", Attention{Heads: heads, Seq: seq, Causal: true, Flash: true}, []Spec{qkv}, (2*batch*heads*(2*seq*seq*d) + 5*scores) * (seq + 1) / (2 * seq)},
		{"flash_grad causal", AttentionGrad{Heads: heads, Seq: seq, Causal: true, Flash: true}, []Spec{qkv, out, f(batch, heads, seq), out}, (5*batch*heads*(2*seq*seq*d) + 8*scores) * (seq + 1) / (2 * seq)},
		{"causal", Attention{Heads: heads, Seq: seq, Causal: true}, []Spec{qkv}, 2*batch*heads*(2*seq*seq*d) + 5*scores},
		// Grouped-query attention: the products per query head are the same.
		{"gqa", Attention{Heads: heads, Seq: seq, KVHeads: 1}, []Spec{f(batch*seq, hid+2*d)}, 2*batch*heads*(2*seq*seq*d) + 5*scores},
		// RoPE: three per rotated element, queries and keys (2 + 1 heads of d).
		{"rope", RoPE{Heads: heads, KVHeads: 1, Seq: seq, Theta: 1e4}, []Spec{f(batch*seq, hid+2*d)}, 3 * batch * seq * 3 * d},
		{"swiglu", SwiGLU{}, []Spec{f(4, 6), f(4, 6)}, 6 * 24},
		{"swiglu_grad", SwiGLUGrad{}, []Spec{f(4, 6), f(4, 6), f(4, 6)}, 11 * 24},
		{"mean_square", MeanSquare{}, []Spec{{Shape{4, 6}, BF16}}, 2 * 24},
		{"mean_square_grad", MeanSquareGrad{}, []Spec{{Shape{4, 6}, BF16}, f()}, 24},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			outs, err := tt.op.Infer(tt.in)
			require.NoError(t, err)
			c := tt.op.Cost(tt.in, outs)
			if int(c.FLOPs) != tt.flops {
				t.Errorf("got %v FLOPs, want %d", float64(c.FLOPs), tt.flops)
			}
			if least := bytesOf(tt.in, outs); c.Bytes < least {
				t.Errorf("got %d bytes, want at least the %d of inputs and outputs", c.Bytes, least)
			}
		})
	}
	mse := MeanSquare{}.Cost([]Spec{{Shape{4, 6}, BF16}}, []Spec{f()})
	require.EqualValues(t, 24*2+4, mse.Bytes, "bf16 elements are 2 bytes")
}

// Only the backward pass reads the probabilities: a loss that depends on
// them is refused, not differentiated wrongly.
func TestAttentionProbsTakeNoGradient(t *testing.T) {
	g := New()
	w := g.Param("w", Shape{4, 6}, Init{})
	out := g.Apply(Attention{Heads: 1, Seq: 2}, w)
	require.NotNil(t, out)
	_, err := g.Backward(g.MeanSquare(out[1]), []*Tensor{w})
	require.ErrorContains(t, err, "probabilities")

	g = New()
	w = g.Param("w", Shape{4, 6}, Init{})
	out = g.Apply(Attention{Heads: 1, Seq: 2, Flash: true}, w)
	_, err = g.Backward(g.MeanSquare(out[1]), []*Tensor{w})
	require.ErrorContains(t, err, "log-normalizers")
}

// Flash attention's backward pass reads qkv, out, lse and dout, and its
// traffic is only theirs: no score leaves the chip.
func TestFlashAttentionGrad(t *testing.T) {
	g := New()
	w := g.Param("w", Shape{8, 12}, Init{})
	out := g.Apply(Attention{Heads: 2, Seq: 4, Causal: true, Flash: true}, w)
	grads, err := g.Backward(g.MeanSquare(out[0]), []*Tensor{w})
	require.NoError(t, err)
	n := grads[0].Producer
	require.Equal(t, AttentionGrad{Heads: 2, Seq: 4, Causal: true, Flash: true}, n.Op)
	require.Equal(t, []*Tensor{w, out[0], out[1]}, n.Inputs[:3])
	in := []Spec{w.Spec, out[0].Spec, out[1].Spec, out[0].Spec}
	require.Equal(t, bytesOf(in, []Spec{w.Spec}), n.Op.Cost(in, []Spec{w.Spec}).Bytes)
	fwd := out[0].Producer
	require.Equal(t, bytesOf([]Spec{w.Spec}, []Spec{out[0].Spec, out[1].Spec}), fwd.Op.Cost([]Spec{w.Spec}, []Spec{out[0].Spec, out[1].Spec}).Bytes)
}

func TestTypedParams(t *testing.T) {
	g := New()
	w := g.TypedParam("w", Shape{2, 3}, BF16, Init{Kind: Ones})
	require.Equal(t, Spec{Shape{2, 3}, BF16}, w.Spec)
	require.EqualValues(t, 12, w.Spec.Bytes())
	require.Nil(t, g.TypedState("s", Shape{2}, I32, Init{}))
	require.ErrorContains(t, g.Err(), "dtype i32 is not floating point")
}

// BiasAct costs what BiasAdd and its activation cost together, but for the
// pre-activation it neither writes nor reads back; its gradient counts the
// add it redoes.
func TestBiasActCost(t *testing.T) {
	x, b := Spec{Shape{8, 16}, BF16}, Spec{Shape{16}, BF16}
	in, out := []Spec{x, b}, []Spec{x}
	for _, tt := range []struct {
		act       string
		unfused   Op
		flops     int
		gradFLOPs int
	}{
		{"relu", ReLU{}, 2 * 128, 2 * 128},
		{"gelu", GELU{}, 9 * 128, 13 * 128},
	} {
		t.Run(tt.act, func(t *testing.T) {
			c := BiasAct{Axis: 1, Act: tt.act}.Cost(in, out)
			add, act := BiasAdd{Axis: 1}.Cost(in, out), tt.unfused.Cost(out, out)
			require.EqualValues(t, tt.flops, c.FLOPs)
			require.Equal(t, add.FLOPs+act.FLOPs, c.FLOPs, "the unfused ops' FLOPs")
			require.EqualValues(t, 2*(128+16+128), c.Bytes, "x and b read, y written")
			require.Equal(t, add.Bytes+act.Bytes-2*x.Bytes(), c.Bytes, "the unfused bytes less the pre-activation's write and read")
			gc := BiasActGrad{Axis: 1, Act: tt.act}.Cost([]Spec{x, b, x}, out)
			require.EqualValues(t, tt.gradFLOPs, gc.FLOPs)
			require.EqualValues(t, 2*(128+16+128+128), gc.Bytes, "x, b and dy read, dz written")
		})
	}
}

// BiasAct's gradient adds a BiasActGrad for whichever of x and b takes a
// gradient, and a BiasGrad only for b; the fused graph has one node fewer
// per layer than the unfused one and as many backward nodes.
func TestBiasActGrad(t *testing.T) {
	for _, tt := range []struct {
		name   string
		xParam bool
	}{
		{"x and b", true},
		{"b only", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := New()
			var x *Tensor
			if tt.xParam {
				x = g.Param("x", Shape{3, 4}, Init{})
			} else {
				x = g.Input("x", Shape{3, 4}, F32)
			}
			b := g.Param("b", Shape{4}, Init{})
			wrt := []*Tensor{b}
			if tt.xParam {
				wrt = append(wrt, x)
			}
			grads, err := g.Backward(g.MeanSquare(g.BiasAct(x, b, 1, "gelu")), wrt)
			require.NoError(t, err)
			var got []string
			for _, n := range g.Nodes {
				if n.Phase == Backward && n.Op.Type() != "fill" && n.Op.Type() != "mean_square_grad" {
					got = append(got, n.Op.Type())
				}
			}
			require.Equal(t, []string{"bias_act_grad", "bias_grad"}, got)
			require.Equal(t, "bias_grad", grads[0].Producer.Op.Type())
			if tt.xParam {
				require.Equal(t, "bias_act_grad", grads[1].Producer.Op.Type())
			}
		})
	}
	// Only x takes a gradient: no BiasGrad.
	g := New()
	x := g.Param("x", Shape{3, 4}, Init{})
	b := g.Input("b", Shape{4}, F32)
	grads, err := g.Backward(g.MeanSquare(g.BiasAct(x, b, 1, "relu")), []*Tensor{x})
	require.NoError(t, err)
	require.Equal(t, BiasActGrad{Axis: 1, Act: "relu"}, grads[0].Producer.Op)
	for _, n := range g.Nodes {
		require.NotEqual(t, "bias_grad", n.Op.Type(), "no gradient of b was asked for")
	}

	count := func(g *Graph, phase Phase) int {
		c := 0
		for _, n := range g.Nodes {
			if n.Phase == phase {
				c++
			}
		}
		return c
	}
	// Forward: one node fewer per BiasAct, two for the Dense with ReLU, one
	// for the other; backward: one fewer per DenseGrad.
	fused, unfused := fusedGraph(t, true), fusedGraph(t, false)
	require.Equal(t, count(unfused, Forward)-5, count(fused, Forward))
	require.Equal(t, count(unfused, Backward)-2, count(fused, Backward))
}

// Dense's gradient: ReLU's read off y, then one DenseGrad when both w and b
// take gradients, a MatMul or a BiasGrad when one does, and x's MatMul
// only when x takes one.
func TestDenseGrad(t *testing.T) {
	for _, tt := range []struct {
		name string
		need []bool // x, w, b
		want []string
	}{
		{"all", []bool{true, true, true}, []string{"relu_grad", "matmul", "dense_grad"}},
		{"w and b", []bool{false, true, true}, []string{"relu_grad", "dense_grad"}},
		{"w", []bool{false, true, false}, []string{"relu_grad", "matmul"}},
		{"b", []bool{false, false, true}, []string{"relu_grad", "bias_grad"}},
		{"x", []bool{true, false, false}, []string{"relu_grad", "matmul"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := New()
			in := []*Tensor{g.Param("x", Shape{2, 3, 4}, Init{}), g.Param("w", Shape{5, 4}, Init{}), g.Param("b", Shape{5}, Init{})}
			y := g.Dense(in[0], in[1], in[2], "relu")
			var wrt []*Tensor
			for i, n := range tt.need {
				if n {
					wrt = append(wrt, in[i])
				}
			}
			loss := g.MeanSquare(y)
			grads, err := g.Backward(loss, wrt)
			require.NoError(t, err)
			var got []string
			for _, n := range g.Nodes {
				if n.Phase == Backward && n.Op.Type() != "mean_square_grad" && n.Op.Type() != "fill" && n.Op.Type() != "reshape" {
					got = append(got, n.Op.Type())
				}
			}
			require.Equal(t, tt.want, got)
			for i, gr := range grads {
				require.True(t, gr.Spec.Shape.Equal(wrt[i].Spec.Shape), "gradient %d is %v, want %v", i, gr.Spec.Shape, wrt[i].Spec.Shape)
			}
			for _, n := range g.Nodes {
				if n.Op.Type() == "relu_grad" {
					require.Same(t, y, n.Inputs[0], "ReLU's gradient reads y")
				}
			}
		})
	}
}

func TestNewOptimizerRejects(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name         string
		lr, momentum float64
		err          string // "" for none
	}{
		{"sgd", 0.01, 0.9, ""},
		{"adam", 1e-3, 0, ""},
		{"sgd", nan, 0.9, "learning rate (lr) NaN"},
		{"sgd", 0, 0.9, "learning rate (lr) 0"},
		{"sgd", -1, 0.9, "learning rate (lr) -1"},
		{"sgd", inf, 0.9, "learning rate (lr) +Inf"},
		{"adam", 1e40, 0, "learning rate (lr) 1e+40"}, // +Inf in float32
		{"sgd", 0.01, nan, "momentum NaN"},
		{"sgd", 0.01, -0.5, "momentum -0.5"},
		{"sgd", 0.01, 1, "momentum 1"},
		{"adam", 0.01, 5, ""}, // Adam ignores momentum
		{"rmsprop", 0.01, 0, `unknown optimizer "rmsprop"`},
	}
	for _, tc := range tests {
		_, err := NewOptimizer(OptimizerSpec{Name: tc.name, LR: tc.lr, Momentum: tc.momentum})
		if tc.err == "" {
			require.NoError(t, err, "%s lr %g momentum %g", tc.name, tc.lr, tc.momentum)
			continue
		}
		require.ErrorContains(t, err, tc.err, "%s lr %g momentum %g", tc.name, tc.lr, tc.momentum)
	}
}
