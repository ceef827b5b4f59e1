package zoo

import (
	"fmt"
	"strconv"

	"github.com/flowkit/flowkit/graph"
)

// bertModel is a BERT of the given default sizes (see buildBERT): token
// ids in, tensor- and sequence-parallel layouts as a GPT's.
func bertModel(doc string, layers, hidden, heads, seq int) builder {
	return builder{doc: doc,
		sizes: []sizeOption{{name: "layers", def: layers}, {name: "hidden", def: hidden}, {name: "heads", def: heads},
			{name: "seq", def: seq}, {name: "vocab", def: bertVocab}, tieOption, attentionOption},
		input:  func(sz sizes) graph.Shape { return graph.Shape{sz["seq"]} },
		tokens: true, masked: true, build: buildBERT, loss: gptLoss, check: checkBERT,
		tp: gptTP, sp: true,
	}
}

// bertVocab is the vocabulary of BERT's uncased WordPiece model.
const bertVocab = 30522

// bertEps is the epsilon of BERT's layer norms (layer_norm_eps).
const bertEps = 1e-12

// checkBERT refuses sizes no BERT has, in the model's terms.
func checkBERT(sz sizes) error {
	if h, heads := sz["hidden"], sz["heads"]; h%heads != 0 {
		return fmt.Errorf("hidden size %d does not divide into %d heads", h, heads)
	}
	return nil
}

// buildBERT is BERT (Devlin et al., 2019) for masked-language-model
// pre-training, as Hugging Face's BertForMaskedLM: the sum of token,
// learned position and token-type embeddings, a layer norm, post-norm
// encoder blocks — per block x = LN(x + Dense(Attention(QKV(x)))) and
// x = LN(x + Dense(GELU(Dense(x)))), attention bidirectional (not
// causal) — and the prediction head: a dense layer with GELU, a layer
// norm, and the decoder over the vocabulary with a bias of its own. The
// logits cover every position, as BERT's do, and the loss is the mean
// cross-entropy against labels [n·seq] over the positions not labelled
// graph.IgnoreLabel: a masked input's masked positions, labelled with
// their original tokens.
//
// Differences from the published model, each stated where it matters:
// every sequence is one segment, so the token-type table has one row
// (RoBERTa's; BERT's second row serves only two-segment inputs, for the
// next-sentence prediction that is not built, nor is the pooler that feeds
// it); the decoder is its own weight unless tie=on (BERT ties it to the
// token embedding; untied, a pipeline's last stage holds it, as buildGPT's
// head); there is no dropout; q, k and v are one packed projection
// (attention.self.qkv: the query, key and value weights stacked).
// Parameters are otherwise named as Hugging Face's, without the "bert."
// prefix, and initialized as BERT does: normal with standard deviation
// 0.02 (initializer_range), biases zero, norms one. With tie=on the
// parameters are BertForMaskedLM's less the second token-type row:
// 109,513,530 for BERT-base.
//
// Under tensor parallelism the blocks split as a GPT's (q/k/v and the
// first MLP layer column-parallel, the output projections row-parallel)
// and so do the token embedding, the decoder and its bias, by rows of the
// vocabulary; under sequence parallelism the layer norms, residual adds
// and the head's transform work on parts of the sequence.
func buildBERT(l *layers, tokens *graph.Tensor, _ Config, sz sizes) *graph.Tensor {
	h, heads, seq, vocab := sz["hidden"], sz["heads"], sz["seq"], sz["vocab"]
	init := graph.Init{Kind: graph.Normal, Scale: 0.02}
	zeros := graph.Init{Kind: graph.Zeros}
	n := tokens.Spec.Shape[0]

	wte := l.vocabWeight("embeddings.word_embeddings.weight", vocab, h, init)
	x := l.tokenEmbedding(wte, tokens) // [n, seq, h]; [n, seq/tp, h] under sequence parallelism
	x = l.positions("embeddings.position_embeddings.weight", x, n, seq, h, init)
	types := l.replicated(l.param("embeddings.token_type_embeddings.weight", graph.Shape{1, h}, init))
	x = l.g.BiasAdd(x, l.g.Reshape(types, graph.Shape{h}), 2)
	x = l.bertNorm("embeddings.LayerNorm", x, h)

	for i := range sz["layers"] {
		if i > 0 { // the embeddings go with the first block, the head with the last
			l.g.StartLayer()
		}
		p := "encoder.layer." + strconv.Itoa(i) + "."
		a := l.colAffine(p+"attention.self.qkv.weight", p+"attention.self.qkv.bias", x, h, 3*h, init, zeros, noAct, 3)
		a = l.attention(a, heads, heads, seq, false)
		a = l.rowAffine(p+"attention.output.dense.weight", p+"attention.output.dense.bias", a, h, h, init, zeros, noAct)
		x = l.bertNorm(p+"attention.output.LayerNorm", l.g.Add(x, a), h)
		f := l.colAffine(p+"intermediate.dense.weight", p+"intermediate.dense.bias", x, h, 4*h, init, zeros, gelu, 1)
		f = l.rowAffine(p+"output.dense.weight", p+"output.dense.bias", f, 4*h, h, init, zeros, noAct)
		x = l.bertNorm(p+"output.LayerNorm", l.g.Add(x, f), h)
	}

	const head = "cls.predictions."
	w := l.replicated(l.param(head+"transform.dense.weight", graph.Shape{h, h}, init))
	b := l.replicated(l.param(head+"transform.dense.bias", graph.Shape{h}, zeros))
	t := l.bertNorm(head+"transform.LayerNorm", l.fc(x, w, b, gelu), h)
	logits := l.lmHead(t, l.headWeight(head+"decoder.weight", wte, sz, init), n, seq, h)
	var bias *graph.Tensor // this device's columns of the vocabulary under tensor parallelism
	if l.tp == 1 {
		bias = l.param(head+"bias", graph.Shape{vocab}, zeros)
	} else {
		bias = l.shard(head+"bias", graph.Shape{vocab}, zeros, 0, 1)
	}
	return l.g.BiasAdd(logits, bias, 1)
}

// bertNorm is a BERT layer norm of width h named name (weight one, bias
// zero, eps 1e-12), its weights' gradients summed over a
// sequence-parallel group.
func (l *layers) bertNorm(name string, x *graph.Tensor, h int) *graph.Tensor {
	return l.layerNormEps(name, x, h, bertEps)
}
