package zoo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowkit/flowkit/graph"
	"github.com/stretchr/testify/require"
)

// llamaParams is a LLaMA's parameter count by hand: the embedding and the
// untied head (V·h each), per layer the q and o projections (h² each), k
// and v (h·kv·d each), gate, up and down (h·ffn each) and two norms, and
// the final norm.
func llamaParams(l, h, heads, kv, ffn, v int) int {
	d := h / heads
	return 2*v*h + l*(2*h*h+2*h*kv*d+3*h*ffn+2*h) + h
}

// LLaMA-2 7B and LLaMA-3 8B have their published parameter counts, and the
// hand count agrees with the graph for other sizes.
func TestLLaMAParamCounts(t *testing.T) {
	require.Equal(t, 6_738_415_616, llamaParams(32, 4096, 32, 32, 11008, 32000))
	require.Equal(t, 8_030_261_248, llamaParams(32, 4096, 32, 8, 14336, 128256))
	for _, tt := range []struct {
		model string
		want  int
	}{
		{"llama2-7b", 6_738_415_616},
		{"llama3-8b", 8_030_261_248},
		{"llama", 6_738_415_616}, // LLaMA-2 7B's sizes by default, its ffn derived from hidden
		{"testdata/llama-2-7b.json", 6_738_415_616},
		{"testdata/llama-3-8b.json", 8_030_261_248},
		{"testdata/llama-3-8b.json:layers=2,seq=128", llamaParams(2, 4096, 32, 8, 14336, 128256)},
		{"llama:layers=3,hidden=64,heads=8,kv_heads=2,ffn=96,seq=16,vocab=100", llamaParams(3, 64, 8, 2, 96, 100)},
		{"llama:layers=1,hidden=96,heads=4,seq=8,vocab=50", llamaParams(1, 96, 4, 4, 256, 50)}, // ffn 2/3·4·96 → 256
		// the blocks alone: no embedding, head or final norm
		{"llama-blocks:layers=3,hidden=64,heads=8,kv_heads=2,ffn=96,seq=16", llamaParams(3, 64, 8, 2, 96, 0) - 64},
		// GPT-2 small's config: the gpt model, its head tied as GPT2Config
		// ties it by default (GPT-2 small's 124,439,808 parameters); untied
		// on request.
		{"testdata/gpt2.json", 124_439_808},
		{"testdata/gpt2.json:tie=off", 124_439_808 + 50257*768},
		// LLaMA-3.2 1B's sizes tie too: the head is the embedding.
		{"llama:layers=16,hidden=2048,heads=32,kv_heads=8,ffn=8192,seq=128,vocab=128256,tie=on", llamaParams(16, 2048, 32, 8, 8192, 128256) - 128256*2048},
	} {
		t.Run(tt.model, func(t *testing.T) {
			m, err := Build(tt.model, Config{Batch: 1})
			require.NoError(t, err)
			if got := m.Graph.NumParams(); got != tt.want {
				t.Errorf("got %d parameters, want %d", got, tt.want)
			}
		})
	}
}

// llamaFLOPs is a LLaMA training step's FLOPs by the usual formula: 6 per
// weight of the products and token (2 forward, 4 backward) and, for
// attention's two products per query head, 3·4·s·h per token (counted
// whole, as for the GPT, though causal).
func llamaFLOPs(b, s, l, h, heads, kv, ffn, v float64) float64 {
	d := h / heads
	weights := l*(2*h*h+2*h*kv*d+3*h*ffn) + v*h
	return b * s * (6*weights + 12*l*s*h)
}

// A training step's FLOPs agree with the formula within 2% (the norms,
// rotary embeddings, SwiGLU and softmaxes are the rest).
func TestLLaMATrainingFLOPs(t *testing.T) {
	for _, tt := range []struct {
		model   string
		formula float64
	}{
		{"llama2-7b", llamaFLOPs(1, 4096, 32, 4096, 32, 32, 11008, 32000)},
		{"llama3-8b", llamaFLOPs(1, 8192, 32, 4096, 32, 8, 14336, 128256)},
	} {
		t.Run(tt.model, func(t *testing.T) {
			m, err := Build(tt.model, Config{Batch: 1, Train: true, DType: graph.BF16})
			require.NoError(t, err)
			require.NoError(t, m.Graph.Minimize(m.Loss, graph.SGD{LR: 0.01}))
			got := float64(m.Graph.Cost().FLOPs)
			t.Logf("%s: %.5g FLOPs per step, formula %.5g (ratio %.4f)", tt.model, got, tt.formula, got/tt.formula)
			if r := got / tt.formula; r < 1 || r > 1.02 {
				t.Errorf("got %.5g FLOPs, %.4f of the formula's %.5g; want within 2%% above it", got, r, tt.formula)
			}
		})
	}
}

// A small LLaMA is made of what its description says: per block two
// RMSNorms, one packed q/k/v product with rotary embeddings, causal
// grouped-query attention, a SwiGLU between bias-free products; no biases,
// no LayerNorm, no position embedding.
func TestLLaMAStructure(t *testing.T) {
	m, err := Build("llama:layers=2,hidden=32,heads=4,kv_heads=2,ffn=48,seq=8,vocab=64,theta=500000,eps=1e-6", Config{Batch: 3})
	require.NoError(t, err)
	count := map[string]int{}
	for _, n := range m.Graph.Nodes {
		count[n.Op.Type()]++
		switch op := n.Op.(type) {
		case graph.Attention:
			require.Equal(t, graph.Attention{Heads: 4, KVHeads: 2, Seq: 8, Causal: true}, op)
			require.Equal(t, graph.Shape{3, 8, 32 + 2*2*8}, n.Inputs[0].Spec.Shape, "q, k, v packed")
		case graph.RoPE:
			require.Equal(t, graph.RoPE{Heads: 4, KVHeads: 2, Seq: 8, Theta: 500000}, op)
		case graph.RMSNorm:
			require.Equal(t, float32(1e-6), op.Eps)
		}
	}
	require.Equal(t, map[string]int{"embedding": 1, "rms_norm": 5, "matmul": 2*5 + 1, "rope": 2, "attention": 2, "swiglu": 2,
		"add": 4, "reshape": 1, "softmax_cross_entropy": 1}, count)
	require.Equal(t, graph.Shape{3 * 8, 64}, m.Logits.Spec.Shape)
	var names []string
	for _, p := range m.Graph.Params()[:6] {
		names = append(names, p.Name)
	}
	require.Equal(t, []string{"model.embed_tokens.weight", "model.layers.0.input_layernorm.weight", "model.layers.0.self_attn.qkv_proj.weight",
		"model.layers.0.self_attn.o_proj.weight", "model.layers.0.post_attention_layernorm.weight", "model.layers.0.mlp.gate_proj.weight"}, names)

	for _, tt := range []struct{ name, want string }{
		{"llama:hidden=30,heads=4", "hidden size 30 does not divide into 4 heads"},
		{"llama:hidden=64,heads=4,kv_heads=3", "kv_heads (3) must divide heads (4)"},
		{"llama:hidden=36,heads=4", "head width 9 (hidden/heads) is odd"},
		{"llama:eps=1e-4", "eps must be one of 1e-5, 1e-6"},
		{"llama:kv_heads=0", "kv_heads must be a positive integer"},
	} {
		_, err := Build(tt.name, Config{Batch: 1})
		require.ErrorContains(t, err, tt.want, tt.name)
		require.False(t, Known(tt.name), tt.name)
	}
}

// The tensor-parallel group must divide the kv heads too: each device
// keeps whole groups of query heads with their key/value head.
func TestLLaMATensorParallelRefused(t *testing.T) {
	_, err := Build("llama:layers=1,hidden=32,heads=4,kv_heads=2,ffn=48,seq=8,vocab=64", Config{Batch: 1, TP: 4})
	require.ErrorContains(t, err, "tp=4 does not divide kv_heads (2)")
	_, err = Build("llama:layers=1,hidden=32,heads=4,kv_heads=2,ffn=51,seq=8,vocab=64", Config{Batch: 1, TP: 2})
	require.ErrorContains(t, err, "tp=2 does not divide ffn (51)")
	m, err := Build("llama3-8b:layers=1", Config{Batch: 1, TP: 8, SP: true})
	require.NoError(t, err)
	for _, p := range m.Graph.Params() {
		if p.Name == "model.layers.0.self_attn.qkv_proj.weight" {
			// 4 query heads and one key and one value head of 128 on each device
			require.Equal(t, graph.Shape{6 * 128, 4096}, p.Spec.Shape)
			require.Equal(t, []int{4096, 1024, 1024}, p.Init.Shard.Sizes)
		}
	}
}

// Hugging Face configs map onto the zoo's names, their size options
// overriding the file's.
func TestResolveConfig(t *testing.T) {
	for _, tt := range []struct{ name, want string }{
		{"testdata/llama-3-8b.json", "llama:layers=32,hidden=4096,heads=32,ffn=14336,seq=8192,vocab=128256,kv_heads=8,theta=500000,eps=1e-5"},
		{"testdata/llama-2-7b.json:seq=2048,layers=2", "llama:hidden=4096,heads=32,ffn=11008,vocab=32000,kv_heads=32,theta=10000,eps=1e-5,seq=2048,layers=2"},
		{"testdata/gpt2.json", "gpt:layers=12,hidden=768,heads=12,seq=1024,vocab=50257,tie=on"},
		{"testdata/gpt2.json:tie=off", "gpt:layers=12,hidden=768,heads=12,seq=1024,vocab=50257,tie=off"},
		{"gpt:layers=2", "gpt:layers=2"},
	} {
		got, err := Resolve(tt.name)
		require.NoError(t, err)
		require.Equal(t, tt.want, got)
	}
	require.Contains(t, Describe("testdata/gpt2.json:layers=2"), "GPT language model")
	// The preset and its config build the same graph.
	for preset, file := range map[string]string{"llama3-8b": "testdata/llama-3-8b.json", "llama2-7b": "testdata/llama-2-7b.json"} {
		a, err := Build(preset+":layers=2,seq=64", Config{Batch: 1})
		require.NoError(t, err)
		b, err := Build(file+":layers=2,seq=64", Config{Batch: 1})
		require.NoError(t, err)
		require.Equal(t, len(a.Graph.Nodes), len(b.Graph.Nodes))
		for i, n := range a.Graph.Nodes {
			require.Equal(t, n.Op, b.Graph.Nodes[i].Op, "%s node %d", preset, i)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	llama3, err := os.ReadFile("testdata/llama-3-8b.json")
	require.NoError(t, err)
	edit := func(old, new string) string {
		require.Contains(t, string(llama3), old)
		return strings.Replace(string(llama3), old, new, 1)
	}
	mistral := `{"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
		"num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 32768, "rope_theta": 10000.0,
		"rms_norm_eps": 1e-05, "sliding_window": 4096, "vocab_size": 32000, "tie_word_embeddings": false}`
	for _, tt := range []struct{ data, opts, want string }{
		{edit(`"num_hidden_layers": 32,`, ``), "", "cfg.json: field num_hidden_layers: missing (required for model_type llama)"},
		{edit(`"model_type": "llama",`, `"model_type": "t5",`), "", `cfg.json: field model_type: "t5" is not supported`},
		{edit(`"model_type": "llama",`, ``), "", "cfg.json: field model_type: missing"},
		{edit(`"hidden_size": 4096,`, `"hidden_size": "big",`), "", `field hidden_size: want a number, got "big"`},
		{edit(`"hidden_size": 4096,`, `"hidden_size": 40.5,`), "", "field hidden_size: want a positive integer, got 40.5"},
		{edit(`"rope_theta": 500000.0,`, `"rope_theta": 0.5,`), "", "field rope_theta: want a positive integer"},
		{edit(`"rms_norm_eps": 1e-05,`, `"rms_norm_eps": 1e-07,`), "", "field rms_norm_eps: 1e-07 is not supported"},
		{edit(`"tie_word_embeddings": false,`, `"tie_word_embeddings": "yes",`), "", "field tie_word_embeddings: want true or false"},
		{edit(`"attention_bias": false,`, `"attention_bias": 1,`), "", "field attention_bias: want true or false"},
		{edit(`"hidden_act": "silu",`, `"hidden_act": "gelu",`), "", `field hidden_act: "gelu" is not supported`},
		{edit(`"rope_scaling": null,`, `"rope_scaling": {"rope_type": "llama3", "factor": 8.0},`), "", "field rope_scaling: scaled rotary embeddings are not supported"},
		{edit(`"vocab_size": 128256`, `"vocab_size": 128256,`), "", "cfg.json:27: invalid character '}'"},
		{`[1, 2]`, "", "want a JSON object of fields"},
		{`null`, "", "want a JSON object of fields, got null"},
		{mistral, "", "field sliding_window: 4096 is shorter than the sequence (32768)"},
		{edit(`"max_position_embeddings": 8192,`, ``), "layers=2", "field max_position_embeddings: missing"},
		{edit(`"hidden_size": 4096,`, ``), "hidden=x", "size option hidden must be a positive integer"},
	} {
		_, err := parseHFConfig("cfg.json", []byte(tt.data), tt.opts)
		require.ErrorContains(t, err, tt.want)
	}
	got, err := parseHFConfig("cfg.json", []byte(mistral), "seq=4096")
	require.NoError(t, err, "within the window, sliding-window attention is causal attention")
	require.True(t, Known(got))
	got, err = parseHFConfig("cfg.json", []byte(edit(`"max_position_embeddings": 8192,`, ``)), "seq=512")
	require.NoError(t, err, "a missing sequence length given by the name")
	require.Contains(t, got, "seq=512")

	_, err = Build("testdata/no-such.json", Config{Batch: 1})
	require.ErrorContains(t, err, "testdata/no-such.json")
	_, err = Build("testdata/gpt2.json:depth=3", Config{Batch: 1})
	require.ErrorContains(t, err, `unknown size option "depth"`)
	require.True(t, Known("testdata/gpt2.json:layers=1"))
	require.True(t, HasTP("testdata/llama-3-8b.json"))
	// Sizes that do not fit together are the file's error, named so.
	_, err = Resolve("testdata/llama-3-8b.json:heads=3,kv_heads=3")
	require.ErrorContains(t, err, "testdata/llama-3-8b.json: zoo: llama:")
	require.ErrorContains(t, err, "hidden size 4096 does not divide into 3 heads")
}

// A LLaMA config that ties its head resolves with tie=on, and builds
// without a head of its own.
func TestResolveTiedConfig(t *testing.T) {
	llama3, err := os.ReadFile("testdata/llama-3-8b.json")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "tied.json")
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(llama3), `"tie_word_embeddings": false,`, `"tie_word_embeddings": true,`, 1)), 0o644))
	name, err := Resolve(path + ":layers=1,seq=16")
	require.NoError(t, err)
	require.Contains(t, name, ",tie=on,")
	m, err := Build(path+":layers=1,seq=16", Config{Batch: 1})
	require.NoError(t, err)
	for _, p := range m.Graph.Params() {
		require.NotEqual(t, "lm_head.weight", p.Name)
	}
}
