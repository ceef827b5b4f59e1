package graph

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOpCodecRoundTrip(t *testing.T) {
	ops := []Op{
		MatMul{TransA: true}, BiasAdd{Axis: 1}, BiasGrad{Axis: 2},
		BiasAct{Axis: 1, Act: "gelu"}, BiasActGrad{Axis: 3, Act: "relu"}, Dense{Act: "relu"}, DenseGrad{},
		Conv2D{Window{2, 1, 1, 0}}, Conv2DGradData{Window{1, 1, 1, 1}, Shape{2, 3, 4, 4}},
		Conv2DGradFilter{Window{1, 1, 1, 1}, Shape{8, 3, 3, 3}},
		MaxPool2D{KH: 2, KW: 3, Window: Window{2, 2, 0, 1}}, MaxPool2DGrad{KH: 2, KW: 2},
		ReLU{}, ReLUGrad{}, GELU{}, GELUGrad{}, Add{}, Mul{}, Scale{Alpha: 0.5},
		Fill{Value: 1, Shape: Shape{}}, Dropout{Rate: 0.25, Seed: 1 << 60}, DropoutGrad{Rate: 0.5, Seed: 3},
		Reshape{Shape{4, 5}}, ReduceSum{Axis: 1}, BroadcastAxis{Axis: 0, Size: 3},
		SoftmaxCrossEntropy{}, SoftmaxCrossEntropyGrad{}, Softmax{}, SoftmaxGrad{},
		LayerNorm{Eps: 1e-5}, LayerNormGrad{}, RMSNorm{Eps: 1e-6}, RMSNormGrad{}, BatchNorm{Eps: 1e-5}, BatchNormGrad{Eps: 1e-5}, Embedding{}, EmbeddingGrad{Table: Shape{10, 4}},
		Attention{Heads: 12, Seq: 1024, Causal: true}, AttentionGrad{Heads: 4, Seq: 16},
		Attention{Heads: 32, Seq: 8192, Causal: true, KVHeads: 8}, Attention{Heads: 12, Seq: 1024, Causal: true, Flash: true},
		AttentionGrad{Heads: 32, Seq: 4096, Causal: true, KVHeads: 8, Flash: true}, RoPE{Heads: 32, KVHeads: 8, Seq: 8192, Theta: 500000},
		RoPEGrad{Heads: 4, Seq: 16, Theta: 10000}, SwiGLU{}, SwiGLUGrad{}, MeanSquare{}, MeanSquareGrad{},
		SGDUpdate{LR: 0.1}, MomentumUpdate{LR: 0.01, Momentum: 0.9}, AdamUpdate{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8},
		SGDUpdate{LR: 0.1, Schedule: Schedule{Warmup: 10}}, MomentumUpdate{LR: 0.01, Momentum: 0.9, Schedule: Schedule{Decay: "linear", Steps: 100}},
		AdamUpdate{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Schedule: Schedule{Decay: "cosine", Warmup: 10, Steps: 1000, MinRatio: 0.1}},
		AdamUpdate{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, Decoupled: true},
		VocabEmbedding{Rows: 8, Lo: 16}, VocabEmbeddingGrad{Table: Shape{8, 4}, Lo: 8}, VocabStats{Width: 8, Lo: 8, Part: 1, Parts: 2},
		VocabStatsGrad{Width: 8, Lo: 0, Part: 0, Parts: 2}, VocabLoss{}, VocabLossGrad{},
	}
	types := map[string]bool{}
	for _, op := range ops {
		types[op.Type()] = true
	}
	require.Len(t, types, len(OpTypes()), "every registered op is tested")
	for _, op := range ops {
		j, err := EncodeOp(op)
		require.NoError(t, err)
		got, err := DecodeOp(j)
		require.NoError(t, err)
		if !reflect.DeepEqual(got, op) {
			t.Errorf("got %#v, want %#v", got, op)
		}
	}
	// Multi-head attention encodes as it did before grouped-query attention.
	j, err := EncodeOp(Attention{Heads: 2, Seq: 4})
	require.NoError(t, err)
	require.JSONEq(t, `{"Heads":2,"Seq":4,"Causal":false}`, string(j.Attrs))
	// Updates without a schedule encode as they did before schedules.
	j, err = EncodeOp(AdamUpdate{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
	require.NoError(t, err)
	require.JSONEq(t, `{"LR":0.001,"Beta1":0.9,"Beta2":0.999,"Eps":1e-8,"WeightDecay":0}`, string(j.Attrs))
	_, err = DecodeOp(OpJSON{Type: "warp_drive"})
	require.ErrorContains(t, err, "warp_drive")
	_, err = DecodeOp(OpJSON{Type: "scale", Attrs: []byte(`{"Alpha":"x"}`)})
	require.ErrorContains(t, err, "scale")
	// An attribute this build does not know is refused, not dropped.
	_, err = DecodeOp(OpJSON{Type: "sgd_update", Attrs: []byte(`{"LR":0.1,"Nesterov":true}`)})
	require.ErrorContains(t, err, `graph: op sgd_update: bad attributes {"LR":0.1,"Nesterov":true}: json: unknown field "Nesterov"`)
}
