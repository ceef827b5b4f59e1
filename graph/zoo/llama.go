package zoo

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/flowkit/flowkit/graph"
)

// llamaSizes are a LLaMA's default sizes; kvHeads and ffn 0 derive from
// the others (see deriveLLaMA).
type llamaSizes struct {
	layers, hidden, heads, kvHeads, ffn, seq, vocab, theta int
}

// llamaEps are the RMSNorm epsilons a LLaMA may use: LLaMA-2, LLaMA-3 and
// Mistral's 1e-5, and LLaMA-1's 1e-6. The option holds the index.
var llamaEps = []string{"1e-5", "1e-6"}

// llamaModel is a LLaMA of the given default sizes (see buildLLaMA):
// token ids in, tensor- and sequence-parallel layouts.
func llamaModel(doc string, d llamaSizes) builder {
	return builder{doc: doc,
		sizes: []sizeOption{{name: "layers", def: d.layers}, {name: "hidden", def: d.hidden}, {name: "heads", def: d.heads},
			{name: "kv_heads", def: d.kvHeads}, {name: "ffn", def: d.ffn}, {name: "seq", def: d.seq}, {name: "vocab", def: d.vocab},
			{name: "theta", def: d.theta}, {name: "eps", choices: llamaEps}, tieOption, attentionOption},
		input:  func(sz sizes) graph.Shape { return graph.Shape{sz["seq"]} },
		tokens: true, build: buildLLaMA, loss: gptLoss, derive: deriveLLaMA, check: checkLLaMA,
		tp: llamaTP, sp: true,
	}
}

// llamaBlocksModel is llama's blocks as a workload (buildLLaMABlocks): a
// random input [seq, hidden] per sample, the mean square of the output as
// the loss, and a tensor-parallel layout.
func llamaBlocksModel() builder {
	b := llamaModel("LLaMA blocks: llama's pre-RMSNorm blocks alone (RoPE, grouped-query attention, SwiGLU), input [seq, hidden], loss mean(out²); options as llama's but vocab",
		llamaSizes{layers: 32, hidden: 4096, heads: 32, seq: 4096, theta: 10000})
	b.sizes = slices.DeleteFunc(b.sizes, func(o sizeOption) bool { return o.name == "vocab" || o.name == "tie" })
	b.input = func(sz sizes) graph.Shape { return graph.Shape{sz["seq"], sz["hidden"]} }
	b.tokens, b.build, b.loss, b.sp = false, buildLLaMABlocks, nil, false
	b.tp = func(sz sizes) map[string]int {
		return map[string]int{"heads": sz["heads"], "kv_heads": sz["kv_heads"], "ffn": sz["ffn"]}
	}
	return b
}

// deriveLLaMA fills the sizes that default to functions of others: as
// many key/value heads as heads (multi-head attention), and LLaMA's MLP
// width, 2/3 of 4·hidden rounded up to a multiple of 256 (11008 for
// hidden 4096).
func deriveLLaMA(sz sizes, set map[string]bool) {
	if sz["kv_heads"] == 0 && !set["kv_heads"] {
		sz["kv_heads"] = sz["heads"]
	}
	if sz["ffn"] == 0 && !set["ffn"] {
		const multiple = 256
		ffn := 8 * sz["hidden"] / 3
		sz["ffn"] = (ffn + multiple - 1) / multiple * multiple
	}
}

// checkLLaMA refuses sizes no LLaMA has, in the model's terms.
func checkLLaMA(sz sizes) error {
	h, heads, kv := sz["hidden"], sz["heads"], sz["kv_heads"]
	switch {
	case h%heads != 0:
		return fmt.Errorf("hidden size %d does not divide into %d heads", h, heads)
	case heads%kv != 0:
		return fmt.Errorf("kv_heads (%d) must divide heads (%d): each key/value head serves a group of query heads", kv, heads)
	case (h/heads)%2 != 0:
		return fmt.Errorf("head width %d (hidden/heads) is odd: rotary embeddings rotate pairs of columns", h/heads)
	}
	return nil
}

// llamaTP is what a LLaMA's tensor-parallel group must divide: the query
// heads and the key/value heads (each device keeps whole groups), the MLP
// width and the vocabulary.
func llamaTP(sz sizes) map[string]int {
	return map[string]int{"heads": sz["heads"], "kv_heads": sz["kv_heads"], "ffn": sz["ffn"], "vocab": sz["vocab"]}
}

// buildLLaMA is a LLaMA-style language model (Touvron et al., 2023): a
// token embedding, then per block x += o(Attention(RoPE(qkv(norm1(x))))),
// causal with grouped-query attention where kv_heads < heads, and x +=
// down(silu(gate(norm2(x)))·up(norm2(x))); a final RMSNorm and an untied
// head; no biases anywhere. Parameters are named as Hugging Face's
// LlamaForCausalLM names them, but q, k and v are one packed projection
// (self_attn.qkv_proj.weight: the q_proj, k_proj and v_proj weights
// stacked), which the Attention op reads without a split. Every weight is
// initialized normal with standard deviation 0.02 (initializer_range),
// the norms to ones. Under tensor parallelism q/k/v (by heads, whole
// groups of query heads with their key/value head on each device), gate
// and up are column-parallel, o and down row-parallel, and the embedding
// and head split the vocabulary, as buildGPT's; under sequence
// parallelism the norms and residual adds work on parts of the sequence.
func buildLLaMA(l *layers, tokens *graph.Tensor, _ Config, sz sizes) *graph.Tensor {
	h, seq, vocab := sz["hidden"], sz["seq"], sz["vocab"]
	init := graph.Init{Kind: graph.Normal, Scale: 0.02}
	emb := l.vocabWeight("model.embed_tokens.weight", vocab, h, init)
	x := l.tokenEmbedding(emb, tokens)
	x = l.llamaBlocks(x, sz, false)
	x = l.llamaNorm("model.norm", x, sz)
	return l.lmHead(x, l.headWeight("lm_head.weight", emb, sz, init), tokens.Spec.Shape[0], seq, h)
}

// buildLLaMABlocks is llama's blocks alone, without the embedding, the
// final norm and the head: the workload of llama-blocks, whose float
// input [n, seq, hidden] and mean-square loss run wherever the
// transformer workloads run (GPUs included).
func buildLLaMABlocks(l *layers, x *graph.Tensor, _ Config, sz sizes) *graph.Tensor {
	return l.llamaBlocks(x, sz, true)
}

// llamaNorm is an RMSNorm of width hidden named name (weight ones, eps from
// the sizes), its weight's gradient summed over a sequence-parallel group.
func (l *layers) llamaNorm(name string, x *graph.Tensor, sz sizes) *graph.Tensor {
	eps, _ := strconv.ParseFloat(llamaEps[sz["eps"]], 32)
	w := l.replicated(l.param(name+".weight", graph.Shape{sz["hidden"]}, graph.Init{Kind: graph.Ones}))
	return l.g.RMSNorm(x, w, float32(eps))
}

// llamaBlocks adds the layers of buildLLaMA's blocks to x [n, seq, h]; a
// layer starts at every block (first: at the first one too, where nothing
// comes before it).
func (l *layers) llamaBlocks(x *graph.Tensor, sz sizes, first bool) *graph.Tensor {
	h, heads, kv, ffn, seq := sz["hidden"], sz["heads"], sz["kv_heads"], sz["ffn"], sz["seq"]
	d := h / heads
	theta := float64(sz["theta"])
	init := graph.Init{Kind: graph.Normal, Scale: 0.02}
	norm := func(name string, x *graph.Tensor) *graph.Tensor { return l.llamaNorm(name, x, sz) }
	qkvSizes := []int{heads * d, kv * d, kv * d}
	for i := range sz["layers"] {
		if i > 0 || first { // the embedding goes with the first block, the head with the last
			l.g.StartLayer()
		}
		p := "model.layers." + strconv.Itoa(i) + "."
		a := l.enter(norm(p+"input_layernorm", x))
		qkv := l.colProj(p+"self_attn.qkv_proj.weight", a, h, qkvSizes, init)
		qkv = l.g.RoPE(qkv, heads/l.tp, kv/l.tp, seq, theta)
		a = l.attention(qkv, heads, kv, seq, true)
		x = l.g.Add(x, l.rowProj(p+"self_attn.o_proj.weight", a, heads*d, h, init))
		f := l.enter(norm(p+"post_attention_layernorm", x))
		gate := l.colProj(p+"mlp.gate_proj.weight", f, h, []int{ffn}, init)
		up := l.colProj(p+"mlp.up_proj.weight", f, h, []int{ffn}, init)
		x = l.g.Add(x, l.rowProj(p+"mlp.down_proj.weight", l.g.SwiGLU(gate, up), ffn, h, init))
	}
	return x
}

// tokenEmbedding looks tokens up in a [vocab, h] table named name: under
// tensor parallelism each device looks up its rows of the vocabulary and
// the group sums (Megatron-LM's vocab-parallel embedding), each device
// keeping its part of the sequence under sequence parallelism.
func (l *layers) tokenEmbedding(w, tokens *graph.Tensor) *graph.Tensor {
	switch {
	case l.tp == 1:
		return l.g.Embedding(w, tokens)
	case l.sp:
		return l.g.TPScatter(l.g.VocabEmbedding(w, tokens), seqAxis, l.tp)
	}
	return l.g.TPSum(l.g.VocabEmbedding(w, tokens))
}

// vocabWeight is a [vocab, h] weight over the vocabulary, a token
// embedding's or a head's: whole, or under tensor parallelism this
// device's rows of it.
func (l *layers) vocabWeight(name string, vocab, h int, init graph.Init) *graph.Tensor {
	if l.tp == 1 {
		return l.param(name, graph.Shape{vocab, h}, init)
	}
	return l.shard(name, graph.Shape{vocab, h}, init, 0, 1)
}

// lmHead is the head over the vocabulary, [n·seq, vocab] logits from x
// [n, seq, h] and w (vocabWeight: the head's own, or with tie=on the token
// embedding's): under tensor parallelism each device's columns of them
// (see gptLoss), from the whole sequence.
func (l *layers) lmHead(x, w *graph.Tensor, n, seq, h int) *graph.Tensor {
	return l.g.MatMul(l.g.Reshape(l.enter(x), graph.Shape{n * seq, h}), w, false, true)
}

// headWeight is a language model's head: its own weight named name, or
// under tie=on the token embedding's, emb (GPT-2's and many small models'
// tying, which keeps the model on one pipeline stage: see plans).
func (l *layers) headWeight(name string, emb *graph.Tensor, sz sizes, init graph.Init) *graph.Tensor {
	if sz["tie"] == 1 {
		return emb
	}
	return l.vocabWeight(name, sz["vocab"], sz["hidden"], init)
}

// enter marks x as entering column-parallel layers: the whole sequence
// gathered under sequence parallelism, a TPCopy under tensor parallelism
// (one for all the layers reading x, so that their input gradients are
// summed over the group once), x itself otherwise.
func (l *layers) enter(x *graph.Tensor) *graph.Tensor {
	switch {
	case l.tp == 1:
		return x
	case l.sp:
		return l.g.TPGather(x, seqAxis, l.tp)
	}
	return l.g.TPCopy(x)
}

// colProj is a bias-free linear layer x·wᵀ, w [Σ blocks, in] named name,
// made column-parallel under tensor parallelism: each device holds its
// part of every block of rows (several matrices packed in one, of the
// given sizes) and computes those outputs from x, which enter has made
// whole.
func (l *layers) colProj(name string, x *graph.Tensor, in int, blocks []int, init graph.Init) *graph.Tensor {
	out := 0
	for _, b := range blocks {
		out += b
	}
	if l.tp == 1 {
		return l.g.MatMul(x, l.param(name, graph.Shape{out, in}, init), false, true)
	}
	init.Shard = &graph.Shard{Of: name, Full: graph.Shape{out, in}, Axis: 0, Parts: l.tp, Blocks: len(blocks)}
	for _, b := range blocks {
		if b != blocks[0] { // grouped-query attention's q, k and v
			init.Shard.Sizes = append([]int(nil), blocks...)
			break
		}
	}
	return l.g.MatMul(x, l.param(name, init.Shard.Shape(), init), false, true)
}

// rowProj is a bias-free linear layer x·wᵀ, w [out, in] named name, made
// row-parallel under tensor parallelism after colProj: each device
// multiplies its split x by its columns of w and the group sums the
// partial products (each device keeping its part of the sequence under
// sequence parallelism).
func (l *layers) rowProj(name string, x *graph.Tensor, in, out int, init graph.Init) *graph.Tensor {
	if l.tp == 1 {
		return l.g.MatMul(x, l.param(name, graph.Shape{out, in}, init), false, true)
	}
	y := l.g.MatMul(x, l.shard(name, graph.Shape{out, in}, init, 1, 1), false, true)
	if l.sp {
		return l.g.TPScatter(y, seqAxis, l.tp)
	}
	return l.g.TPSum(y)
}
