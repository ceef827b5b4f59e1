package zoo

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/graph"
)

// BERT's parameters, from the published counts of Hugging Face's
// BertModel (bert-base-uncased 109,482,240; bert-large-uncased
// 335,141,888): without the pooler (a dense h×h layer and its bias) and
// the second token-type row (h), with the masked-LM head (a dense h×h
// layer, its bias, a layer norm's 2h and the decoder's bias over the
// vocabulary), the decoder tied to the token embedding (tie=on) — the
// BertForMaskedLM count less h; untied, V·h more.
func TestBERTParamCounts(t *testing.T) {
	for _, tt := range []struct {
		model     string
		bertModel int // published
		h, vocab  int
	}{
		{"bert", 109_482_240, 768, 30522},
		{"bert-large", 335_141_888, 1024, 30522},
	} {
		t.Run(tt.model, func(t *testing.T) {
			h := tt.h
			want := tt.bertModel - (h*h + h) - h + (h*h + h + 2*h + tt.vocab)
			m, err := Build(tt.model+":tie=on", Config{Batch: 1})
			require.NoError(t, err)
			require.Equal(t, want, m.Graph.NumParams(), "tied")
			m, err = Build(tt.model, Config{Batch: 1})
			require.NoError(t, err)
			require.Equal(t, want+tt.vocab*h, m.Graph.NumParams(), "untied")
		})
	}
	m, err := Build("bert:tie=on", Config{Batch: 1})
	require.NoError(t, err)
	require.Equal(t, 109_513_530, m.Graph.NumParams(), "BertForMaskedLM's 109,514,298 less one token-type row")
}

// A training step's FLOPs agree with 6 per weight of the products and
// token plus attention's 12·l·s·h per token (bidirectional: every query
// sees every key), within 1% (the norms, GELUs, softmaxes and the rest).
func TestBERTTrainingFLOPs(t *testing.T) {
	for _, tt := range []struct {
		model                 string
		layers, hidden, vocab float64
	}{
		{"bert", 12, 768, 30522},
		{"bert-large", 24, 1024, 30522},
	} {
		t.Run(tt.model, func(t *testing.T) {
			const batch, seq = 2, 512
			m, err := Build(tt.model, Config{Batch: batch, Train: true, DType: graph.BF16})
			require.NoError(t, err)
			require.NoError(t, m.Graph.Minimize(m.Loss, graph.SGD{LR: 0.01}))
			l, h := tt.layers, tt.hidden
			weights := l*12*h*h + h*h + tt.vocab*h // blocks, the head's transform, the decoder
			formula := batch * seq * (6*weights + 12*l*seq*h)
			got := float64(m.Graph.Cost().FLOPs)
			t.Logf("%s: %.5g FLOPs per step, formula %.5g (ratio %.4f)", tt.model, got, formula, got/formula)
			if r := got / formula; r < 1 || r > 1.01 {
				t.Errorf("got %.5g FLOPs, %.4f of the formula's %.5g; want within 1%% above it", got, r, formula)
			}
		})
	}
}

// A small BERT is made of what its description says: three embeddings
// summed and normalized, post-norm blocks (each layer norm reads a
// residual sum) with bidirectional attention over packed q/k/v, the head's
// transform (GELU, layer norm) and the decoder with its bias.
func TestBERTStructure(t *testing.T) {
	m, err := Build("bert:layers=2,hidden=32,heads=4,seq=8,vocab=64", Config{Batch: 3})
	require.NoError(t, err)
	require.False(t, IsLanguageModel("bert"), "not a next-token model")
	require.True(t, IsMaskedLanguageModel("bert-large:layers=2"))
	require.False(t, IsMaskedLanguageModel("gpt"))
	count := map[string]int{}
	var norms []*graph.Node
	for _, n := range m.Graph.Nodes {
		count[n.Op.Type()]++
		switch op := n.Op.(type) {
		case graph.Attention:
			require.Equal(t, graph.Attention{Heads: 4, Seq: 8}, op, "bidirectional")
			require.Equal(t, graph.Shape{3, 8, 3 * 32}, n.Inputs[0].Spec.Shape, "q, k, v packed")
		case graph.LayerNorm:
			require.Equal(t, float32(1e-12), op.Eps)
			norms = append(norms, n)
		}
	}
	// Per block: Dense for q/k/v and the two output projections, MatMul and
	// BiasAct (GELU) for the first MLP layer; the head's transform is a
	// MatMul and a BiasAct too, its decoder a MatMul and a BiasAdd.
	require.Equal(t, map[string]int{"embedding": 1, "bias_add": 3, "reshape": 5, "layer_norm": 1 + 2*2 + 1,
		"dense": 3 * 2, "matmul": 2*1 + 2, "bias_act": 2 + 1, "attention": 2, "add": 4, "softmax_cross_entropy": 1}, count)
	for _, n := range norms[1 : len(norms)-1] { // the embeddings' and the head's read no residual sum
		_, isAdd := n.Inputs[0].Producer.Op.(graph.Add)
		require.True(t, isAdd, "a block's layer norm reads the residual sum, not %s", n.Inputs[0].Producer.Op.Type())
	}
	require.Equal(t, graph.Shape{3 * 8, 64}, m.Logits.Spec.Shape)
	var names []string
	for _, p := range m.Graph.Params()[:8] {
		names = append(names, p.Name)
	}
	require.Equal(t, []string{"embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight", "embeddings.token_type_embeddings.weight",
		"embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias", "encoder.layer.0.attention.self.qkv.weight",
		"encoder.layer.0.attention.self.qkv.bias", "encoder.layer.0.attention.output.dense.weight"}, names)
	_, err = Build("bert:hidden=30,heads=4", Config{Batch: 1})
	require.ErrorContains(t, err, "hidden size 30 does not divide into 4 heads")
}

// Under tensor parallelism the decoder, its bias and the token embedding
// are split by the vocabulary; under sequence parallelism the position
// embedding by positions, and every other replicated weight (layer norms,
// the token type, the head's transform) passes a TPCopy, so that its
// partial gradients are summed.
func TestBERTParallelBuild(t *testing.T) {
	const model = "bert:layers=2,hidden=32,heads=4,seq=8,vocab=64"
	m, err := Build(model, Config{Batch: 2, TP: 4})
	require.NoError(t, err)
	require.Equal(t, graph.Shape{16, 16}, m.Logits.Spec.Shape, "each device's columns of the logits")
	for _, p := range m.Graph.Params() {
		switch p.Name {
		case "embeddings.word_embeddings.weight", "cls.predictions.decoder.weight":
			require.Equal(t, graph.Shape{16, 32}, p.Spec.Shape, p.Name)
		case "cls.predictions.bias":
			require.Equal(t, graph.Shape{16}, p.Spec.Shape, p.Name)
		}
	}
	_, ok := m.Loss.Producer.Op.(graph.VocabLoss)
	require.True(t, ok)

	m, err = Build(model, Config{Batch: 2, TP: 4, SP: true})
	require.NoError(t, err)
	copied := map[string]bool{}
	for _, n := range m.Graph.Nodes {
		if _, ok := n.Op.(graph.TPCopy); ok && n.Inputs[0].Persistent() {
			copied[n.Inputs[0].Name] = true
		}
	}
	for _, p := range m.Graph.Params() {
		switch {
		case p.Name == "embeddings.position_embeddings.weight":
			require.Equal(t, graph.Shape{2, 32}, p.Spec.Shape, "two of the eight positions")
		case p.Init.Shard == nil:
			require.True(t, copied[p.Name], "%s is replicated: its gradient must be summed", p.Name)
		}
	}
}

// A Hugging Face BERT config maps onto bert, tied as BertConfig ties by
// default, and builds bert's graph; what bert does not build is refused
// naming the field.
func TestResolveBERTConfig(t *testing.T) {
	got, err := Resolve("testdata/bert-base-uncased.json")
	require.NoError(t, err)
	require.Equal(t, "bert:layers=12,hidden=768,heads=12,seq=512,vocab=30522,tie=on", got)
	a, err := Build("bert:layers=2,seq=64,tie=on", Config{Batch: 1})
	require.NoError(t, err)
	b, err := Build("testdata/bert-base-uncased.json:layers=2,seq=64", Config{Batch: 1})
	require.NoError(t, err)
	require.Equal(t, len(a.Graph.Nodes), len(b.Graph.Nodes))
	for i, n := range a.Graph.Nodes {
		require.Equal(t, n.Op, b.Graph.Nodes[i].Op, "node %d", i)
	}

	cfg, err := os.ReadFile("testdata/bert-base-uncased.json")
	require.NoError(t, err)
	edit := func(old, new string) string {
		require.Contains(t, string(cfg), old)
		return strings.Replace(string(cfg), old, new, 1)
	}
	for _, tt := range []struct{ data, want string }{
		{edit(`"intermediate_size": 3072,`, `"intermediate_size": 4096,`), "field intermediate_size: 4096 is not 4·hidden_size = 3072"},
		{edit(`"hidden_act": "gelu",`, `"hidden_act": "relu",`), `field hidden_act: "relu" is not supported`},
		{edit(`"layer_norm_eps": 1e-12,`, `"layer_norm_eps": 1e-05,`), "field layer_norm_eps: 1e-05 is not supported"},
		{edit(`"position_embedding_type": "absolute",`, `"position_embedding_type": "relative_key",`), `field position_embedding_type: "relative_key" is not supported`},
		{edit(`"use_cache": true,`, `"use_cache": true, "is_decoder": true,`), "field is_decoder: true is not supported"},
		{edit(`"num_attention_heads": 12,`, ``), "field num_attention_heads: missing (required for model_type bert)"},
	} {
		_, err := parseHFConfig("cfg.json", []byte(tt.data), "")
		require.ErrorContains(t, err, tt.want)
	}
}
