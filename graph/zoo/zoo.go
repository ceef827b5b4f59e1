// Package zoo builds flowkit's reference models as logical graphs.
//
// The classifiers (mlp, mnist-cnn, cifar-cnn, and the ResNets resnet and
// resnet50 on 1000 classes; see buildResNet) take images NCHW and integer
// labels (i32) and end in the mean softmax cross-entropy. The workloads
// mlp3x4096 and gpt2s-blocks mirror PyTorch reference workloads: they take
// a random input and no labels, and their loss is the mean square of their
// output, computed in f32 (out.float().pow(2).mean()). Parameters are named
// and initialized as PyTorch's modules name and initialize them (see
// pytorchInit and xavierInit), so results are comparable with a PyTorch
// reference. The GPT language models (gpt, gpt3-1.3b, gpt3-175b) take
// token ids (i32, [N, seq]) and the next token at every position as
// labels, and end in the mean cross-entropy over all positions (see
// buildGPT); so do the LLaMAs (llama, llama2-7b, llama3-8b: RMSNorm,
// rotary embeddings, grouped-query attention, SwiGLU; see buildLLaMA).
// BERT (bert, bert-large), a masked language model, takes token ids and,
// as labels, the original token at the masked positions (graph.IgnoreLabel
// elsewhere), its attention over the whole sequence (see buildBERT). A Hugging Face config.json names a
// llama, mistral, gpt2 or bert model too (see Resolve).
//
// Every float tensor of a model — input, parameters, activations,
// gradients and optimizer state — has the dtype of Config.DType (f32 by
// default), but for losses, f32 scalars, and the statistics layer norms
// keep for their backward pass, f32.
//
// Fully-connected layers without an activation or with ReLU are one
// graph.Dense (the GEMM, bias and ReLU in one op: one cuBLASLt call on a
// GPU); a convolution's bias and ReLU, and a bias followed by GELU, are one
// graph.BiasAct. Both compute what the unfused ops would, bit for bit in
// f32, without writing the pre-activation.
//
// # Sizes
//
// A model name may carry size options after a colon, "name:key=value,…",
// for the models that have them:
//
//   - mlp3x4096: depth (Linear layers, 3) and width (4096);
//   - gpt2s-blocks: layers (12), hidden (768), heads (12), seq (1024) and
//     norm (layer, or rms for RMSNorm);
//   - gpt, gpt3-1.3b, gpt3-175b: layers, hidden, heads, seq and vocab
//     (50257), defaulting to GPT-2 small's 12, 768, 12, 1024, GPT-3 XL's
//     24, 2048, 16, 2048 (the GPT-3 paper lists 24 heads of 128, which do
//     not make 2048; 16 heads of 128 do) and GPT-3's 96, 12288, 96, 2048;
//   - llama, llama2-7b, llama3-8b: layers, hidden, heads, kv_heads (key
//     and value heads; heads by default), ffn (the SwiGLU width; by
//     default LLaMA's 2/3·4·hidden rounded up to a multiple of 256), seq,
//     vocab, theta (RoPE's base) and eps (RMSNorm's: 1e-5 or 1e-6),
//     defaulting to LLaMA-2 7B's 32, 4096, 32, 32, 11008, 4096, 32000,
//     10000, 1e-5 and LLaMA-3 8B's 32, 4096, 32, 8, 14336, 8192, 128256,
//     500000, 1e-5;
//   - bert, bert-large: layers, hidden, heads, seq and vocab (30522),
//     defaulting to BERT-base's 12, 768, 12, 512 and BERT-large's 24,
//     1024, 16, 512;
//   - the GPTs, LLaMAs and BERTs: tie (off, or on: the head is the token
//     embedding's weight, as GPT-2's and BERT's; a pipeline is then
//     refused);
//   - llama-blocks: llama's options but vocab and tie;
//   - resnet, resnet50: depth (18, 34, 50, 101 or 152; 50) and image
//     (the images' height and width, 224).
//
// "gpt2s-blocks:layers=2,hidden=64,heads=4,seq=16" is a small transformer
// for tests. The name, options included, is the model's name everywhere:
// in a plan, on a command line.
//
// # Tensor parallelism
//
// Config.TP > 1 builds what one device of a tensor-parallel group runs, for
// the models with a layout (TPModels): Megatron-LM's column- then
// row-parallel pairs, attention split by heads, marked by graph.TPCopy and
// graph.TPSum; a split weight carries its graph.Shard.
package zoo

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/flowkit/flowkit/graph"
)

// Config parameterizes a model build.
type Config struct {
	// Batch is the number of samples per iteration.
	Batch int
	// Train includes the training-only ops (dropout).
	Train bool
	// Seed seeds the dropout masks.
	Seed uint64
	// DType is the dtype of the model's float tensors: f32 (the zero
	// value means f32) or bf16.
	DType graph.DType
	// TP, when > 1, builds the graph one device of a tensor-parallel group
	// of TP devices runs (Megatron-LM's layout; see graph.TPSum): the
	// models that have such a layout split their layers' weights, the
	// others refuse. 0 and 1 build the whole model.
	TP int
	// SP, with TP > 1, adds sequence parallelism (Korthikanti et al.,
	// 2022; see graph.TPGather): the activations between the
	// tensor-parallel layers (residual adds, layer norms) are split along
	// the sequence over the group. The GPTs have it.
	SP bool
}

// Model is a built model graph and its distinguished tensors.
type Model struct {
	Name  string
	Graph *graph.Graph
	// Images is the input: [N,C,H,W] images of a classifier, [N,width]
	// or [N,seq,hidden] for the other models; of the model's dtype.
	Images *graph.Tensor
	Labels *graph.Tensor // [N] i32; nil for a model without labels
	Logits *graph.Tensor // [N,classes] of a classifier; nil for the others
	Loss   *graph.Tensor // f32 scalar
}

// builder builds one kind of model.
type builder struct {
	doc string
	// sizes are the size options a name may set, with their defaults.
	sizes []sizeOption
	// input returns the per-sample input shape.
	input func(sz sizes) graph.Shape
	// classes is, for a classifier, the number of classes: it takes labels
	// and ends in the softmax cross-entropy. 0 for a model whose loss is
	// the mean square of its output.
	classes int
	// tokens marks a language model: its input is token ids (i32,
	// [N, seq]), its labels the next token at every position ([N·seq]),
	// its logits [N·seq, vocab], and classes is the vocab size option.
	tokens bool
	// masked marks, among the models of tokens, a masked language model
	// (an encoder whose attention sees the whole sequence): its labels are
	// the original tokens at the masked positions, not the next ones.
	masked bool
	// build builds the forward graph from the input to the output.
	build func(l *layers, x *graph.Tensor, cfg Config, sz sizes) *graph.Tensor
	// tp, for a model with a tensor-parallel layout, names the sizes the
	// group's size must divide; nil for a model without one.
	tp func(sz sizes) map[string]int
	// sp marks a layout with sequence parallelism (Config.SP).
	sp bool
	// loss, if set, replaces a classifier's softmax cross-entropy of the
	// logits build returns.
	loss func(l *layers, logits, labels *graph.Tensor) *graph.Tensor
	// derive, if set, fills the size options whose default depends on
	// others (a default of 0) and were not given: set says which were.
	derive func(sz sizes, set map[string]bool)
	// check, if set, reports sizes the model cannot be built with, in
	// the model's terms rather than an op's.
	check func(sz sizes) error
}

type sizeOption struct {
	name string
	def  int
	// choices, if set, are the option's values by name: the option holds
	// the index of the one given ("norm=rms" → 1).
	choices []string
}

// most is the largest value option o takes: 1024 layers (compiling a
// plan's memory takes time quadratic in them: a minute near the bound), a
// RoPE theta up to 2^30, every other size up to 2^20, so that products of
// sizes, in elements and bytes, stay far within int64.
func (o sizeOption) most() int {
	switch o.name {
	case "layers", "depth":
		return 1 << 10
	case "theta":
		return 1 << 30
	}
	return 1 << 20
}

// sizes are a model's size options by name.
type sizes map[string]int

func fixedInput(s graph.Shape) func(sizes) graph.Shape { return func(sizes) graph.Shape { return s } }

var models = map[string]builder{
	"mlp": {doc: "MNIST MLP: 784-256-256-10 with ReLU", input: fixedInput(graph.Shape{1, 28, 28}), classes: 10, build: buildMLP,
		tp: func(sizes) map[string]int { return map[string]int{"the hidden width": 256} }},
	"mnist-cnn": {doc: "MNIST CNN: two 3×3 conv+ReLU+max-pool, 3136-128-10", input: fixedInput(graph.Shape{1, 28, 28}), classes: 10, build: buildMNISTCNN},
	"cifar-cnn": {doc: "CIFAR-10 CNN: two 3×3 conv+ReLU+max-pool, 4096-512-10, dropout 0.5", input: fixedInput(graph.Shape{3, 32, 32}), classes: 10, build: buildCIFARCNN},
	"resnet":    resnetModel("ResNet (He et al., 2016; torchvision's v1.5) on ImageNet: 7×7 conv, batch norm, max-pool, four stages of residual blocks, average pool, 1000 classes; options depth (18, 34, 50, 101, 152) and image (224)", 50),
	"resnet50":  resnetModel("ResNet-50 (He et al., 2016; torchvision's v1.5): resnet with depth 50, 25.6M parameters", 50),
	"mlp3x4096": {
		doc:   "deep MLP: nn.Sequential(Linear(4096,4096), ReLU, …) of 3 Linear layers, loss mean(out²); options depth, width",
		sizes: []sizeOption{{name: "depth", def: 3}, {name: "width", def: 4096}},
		input: func(sz sizes) graph.Shape { return graph.Shape{sz["width"]} },
		build: buildDeepMLP,
		tp:    func(sz sizes) map[string]int { return map[string]int{"width": sz["width"]} },
	},
	"bert":       bertModel("BERT (Devlin et al., 2019) for masked-language-model pre-training: token, position and token-type embeddings, post-norm bidirectional blocks, the prediction head; options layers, hidden, heads, seq, vocab (BERT-base's by default), tie (off: the decoder's own weight; on: the token embedding's, as BERT's), attention (math or flash)", 12, 768, 12, 512),
	"bert-large": bertModel("BERT-large (Devlin et al., 2019): bert with 24 layers, hidden 1024, 16 heads, seq 512", 24, 1024, 16, 512),
	"gpt": gptModel("GPT language model: token and position embeddings, causal pre-norm blocks, final norm, head; options layers, hidden, heads, seq, vocab (GPT-2 small's by default), tie (off: the head's own weight; on: the token embedding's), attention (math: probabilities kept; flash: recomputed)",
		12, 768, 12, 1024),
	"gpt3-1.3b": gptModel("GPT-3 XL (Brown et al., 2020): gpt with 24 layers, hidden 2048, 16 heads, seq 2048", 24, 2048, 16, 2048),
	"gpt3-175b": gptModel("GPT-3 (Brown et al., 2020): gpt with 96 layers, hidden 12288, 96 heads, seq 2048", 96, 12288, 96, 2048),
	"llama": llamaModel("LLaMA-style language model: token embedding, pre-RMSNorm causal blocks with rotary embeddings (grouped-query attention when kv_heads < heads) and a SwiGLU MLP without biases, final RMSNorm, head; options layers, hidden, heads, kv_heads, ffn, seq, vocab, theta, eps (LLaMA-2 7B's by default), tie (off: the head's own weight; on: the token embedding's), attention (math or flash)",
		llamaSizes{layers: 32, hidden: 4096, heads: 32, seq: 4096, vocab: 32000, theta: 10000}),
	"llama-blocks": llamaBlocksModel(),
	"llama2-7b": llamaModel("LLaMA-2 7B (Touvron et al., 2023): llama with 32 layers, hidden 4096, 32 heads, ffn 11008, vocab 32000, seq 4096",
		llamaSizes{layers: 32, hidden: 4096, heads: 32, kvHeads: 32, ffn: 11008, seq: 4096, vocab: 32000, theta: 10000}),
	"llama3-8b": llamaModel("LLaMA-3 8B (Meta, 2024): llama with 32 layers, hidden 4096, 32 heads, 8 kv heads, ffn 14336, vocab 128256, rope theta 500000, seq 8192",
		llamaSizes{layers: 32, hidden: 4096, heads: 32, kvHeads: 8, ffn: 14336, seq: 8192, vocab: 128256, theta: 500000}),
	"gpt2s-blocks": {
		doc: "GPT-2 small blocks: nn.TransformerEncoder of 12 pre-norm layers (h 768, 12 heads, GELU), seq 1024, loss mean(out²); options layers, hidden, heads, seq, norm (layer or rms), attention (math or flash)",
		sizes: []sizeOption{{name: "layers", def: 12}, {name: "hidden", def: 768}, {name: "heads", def: 12}, {name: "seq", def: 1024},
			{name: "norm", choices: []string{"layer", "rms"}}, attentionOption},
		input: func(sz sizes) graph.Shape { return graph.Shape{sz["seq"], sz["hidden"]} },
		build: buildTransformerBlocks,
		tp:    func(sz sizes) map[string]int { return map[string]int{"heads": sz["heads"]} },
	},
}

// gptModel is a GPT of the given default sizes (see buildGPT): token ids
// in, tensor- and sequence-parallel layouts.
func gptModel(doc string, layers, hidden, heads, seq int) builder {
	return builder{doc: doc, sizes: gptSizes(layers, hidden, heads, seq),
		input: func(sz sizes) graph.Shape { return graph.Shape{sz["seq"]} }, tokens: true, build: buildGPT, loss: gptLoss,
		tp: gptTP, sp: true}
}

// gptTP is what a GPT's tensor-parallel group must divide: its heads, and
// its vocabulary, which the group splits (pad it, as Megatron-LM does:
// vocab=50304 for GPT-2's 50257).
func gptTP(sz sizes) map[string]int {
	return map[string]int{"heads": sz["heads"], "vocab": sz["vocab"]}
}

// gptSizes are a GPT's size options with the given defaults and GPT-2's
// vocabulary.
func gptSizes(layers, hidden, heads, seq int) []sizeOption {
	return []sizeOption{{name: "layers", def: layers}, {name: "hidden", def: hidden}, {name: "heads", def: heads},
		{name: "seq", def: seq}, {name: "vocab", def: 50257}, tieOption, attentionOption}
}

// tieOption is a language model's tie=off|on: a head of its own (flowkit's
// default, GPT-NeoX's and LLaMA's), or the token embedding's weight
// (GPT-2's).
var tieOption = sizeOption{name: "tie", choices: []string{"off", "on"}}

// attentionOption is a transformer's attention=math|flash, named after
// PyTorch's scaled-dot-product backends: math keeps each softmax row for
// the backward pass (memory quadratic in seq), flash only its
// log-normalizer and recomputes the row (Dao et al., 2022; linear in seq).
var attentionOption = sizeOption{name: "attention", choices: []string{"math", "flash"}}

// Names lists the models Build knows, sorted (without size options).
func Names() []string {
	names := make([]string, 0, len(models))
	for n := range models {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Describe returns a one-line description of a model.
func Describe(name string) string {
	if resolved, err := Resolve(name); err == nil {
		name = resolved
	}
	base, _, _ := strings.Cut(name, ":")
	return models[base].doc
}

// InputShape returns a model's per-sample input shape: (C, H, W) for a
// classifier.
func InputShape(name string) (graph.Shape, error) {
	b, sz, err := lookup(name)
	if err != nil {
		return nil, err
	}
	return b.input(sz).Clone(), nil
}

// Classes returns a classifier's number of classes (a language model's
// vocabulary), or 0 for a model without labels.
func Classes(name string) (int, error) {
	b, sz, err := lookup(name)
	if err != nil {
		return 0, err
	}
	return b.classCount(sz), nil
}

func (b builder) classCount(sz sizes) int {
	if b.tokens {
		return sz["vocab"]
	}
	return b.classes
}

func unknown(name string) error {
	return fmt.Errorf("zoo: unknown model %q (known: %s)", name, strings.Join(Names(), ", "))
}

// option returns b's size option called name.
func (b builder) option(name string) sizeOption {
	for _, o := range b.sizes {
		if o.name == name {
			return o
		}
	}
	return sizeOption{}
}

// lookup returns the builder of a model name and the sizes it sets. A
// name whose base ends in ".json" is a Hugging Face config file (see
// Resolve).
func lookup(name string) (builder, sizes, error) {
	if isConfigFile(name) {
		canonical, err := Resolve(name)
		if err != nil {
			return builder{}, nil, err
		}
		name = canonical
	}
	b, sz, set, err := parseOptions(name)
	if err != nil {
		return builder{}, nil, err
	}
	if b.derive != nil {
		b.derive(sz, set)
	}
	if b.check != nil {
		if err := b.check(sz); err != nil {
			return builder{}, nil, fmt.Errorf("zoo: %s: %w", name, err)
		}
	}
	return b, sz, nil
}

// parseOptions returns the builder of a zoo name "base:key=value,…", the
// sizes it sets and which of them it gives.
func parseOptions(name string) (builder, sizes, map[string]bool, error) {
	base, opts, hasOpts := strings.Cut(name, ":")
	b, ok := models[base]
	if !ok {
		return builder{}, nil, nil, unknown(name)
	}
	sz := sizes{}
	var known []string
	for _, o := range b.sizes {
		sz[o.name] = o.def
		known = append(known, o.name)
	}
	set := map[string]bool{}
	if !hasOpts {
		return b, sz, set, nil
	}
	if len(b.sizes) == 0 {
		return builder{}, nil, nil, fmt.Errorf("zoo: %s: model %s has no size options", name, base)
	}
	for _, kv := range strings.Split(opts, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		switch _, isOption := sz[k]; {
		case !ok:
			return builder{}, nil, nil, fmt.Errorf("zoo: %s: size option %q is not key=value", name, kv)
		case !isOption:
			return builder{}, nil, nil, fmt.Errorf("zoo: %s: unknown size option %q (options: %s)", name, k, strings.Join(known, ", "))
		case set[k]:
			return builder{}, nil, nil, fmt.Errorf("zoo: %s: size option %s given twice", name, k)
		}
		if choices := b.option(k).choices; choices != nil {
			i := slices.Index(choices, v)
			if i < 0 {
				return builder{}, nil, nil, fmt.Errorf("zoo: %s: %s must be one of %s, got %q", name, k, strings.Join(choices, ", "), v)
			}
			sz[k], set[k] = i, true
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return builder{}, nil, nil, fmt.Errorf("zoo: %s: %s must be a positive integer, got %q", name, k, v)
		}
		if most := b.option(k).most(); n > most {
			return builder{}, nil, nil, fmt.Errorf("zoo: %s: %s=%d is more than the %d a model may have", name, k, n, most)
		}
		sz[k], set[k] = n, true
	}
	return b, sz, set, nil
}

// ParseDType returns the model dtype named s: f32 or bf16.
func ParseDType(s string) (graph.DType, error) {
	d, err := graph.ParseDType(s)
	if err != nil || (d != graph.F32 && d != graph.BF16) {
		return 0, fmt.Errorf("zoo: models are built in f32 or bf16, not %q", s)
	}
	return d, nil
}

// MaxBatch is the largest batch a model is built for: with the sizes'
// bounds (see sizeOption.most), its tensors' elements and bytes stay
// within int64.
const MaxBatch = 1 << 20

// Build builds the named model's forward graph and loss.
func Build(name string, cfg Config) (*Model, error) {
	b, sz, err := lookup(name)
	if err != nil {
		return nil, err
	}
	if cfg.Batch < 1 || cfg.Batch > MaxBatch {
		return nil, fmt.Errorf("zoo: %s: batch must be 1 to %d, got %d", name, MaxBatch, cfg.Batch)
	}
	dtype := cfg.DType
	if dtype == 0 {
		dtype = graph.F32
	}
	if dtype != graph.F32 && dtype != graph.BF16 {
		return nil, fmt.Errorf("zoo: %s: models are built in f32 or bf16, not %s", name, dtype)
	}
	tp := max(cfg.TP, 1)
	if tp > 1 {
		if b.tp == nil {
			return nil, fmt.Errorf("zoo: %s has no tensor-parallel layout (tp=%d); models with one: %s", name, tp, strings.Join(TPModels(), ", "))
		}
		for what, n := range b.tp(sz) {
			if n%tp != 0 {
				hint := ""
				if what == "vocab" {
					// Megatron-LM pads to a multiple of 128·tp (GPT-2's
					// 50257 to 50304 on one device).
					m := 128 * tp
					hint = fmt.Sprintf("; the group splits the vocabulary: pad it to a multiple, as Megatron-LM does to one of 128·tp (vocab=%d)", (n+m-1)/m*m)
				}
				return nil, fmt.Errorf("zoo: %s: tp=%d does not divide %s (%d)%s", name, tp, what, n, hint)
			}
		}
	}
	if cfg.SP {
		switch {
		case tp < 2:
			return nil, fmt.Errorf("zoo: %s: sequence parallelism splits the sequence over a tensor-parallel group: it needs tp ≥ 2", name)
		case !b.sp:
			return nil, fmt.Errorf("zoo: %s has no sequence-parallel layout; models with one: %s", name, strings.Join(SPModels(), ", "))
		case sz["seq"]%tp != 0:
			return nil, fmt.Errorf("zoo: %s: tp=%d does not divide seq (%d), which sequence parallelism splits", name, tp, sz["seq"])
		}
	}
	g := graph.New()
	m := &Model{Name: name, Graph: g}
	input := append(graph.Shape{cfg.Batch}, b.input(sz)...)
	classes, rows := b.classCount(sz), cfg.Batch // rows of logits and labels
	switch {
	case b.tokens:
		rows *= sz["seq"]
		m.Images = g.Input("tokens", input, graph.I32)
		m.Labels = g.Input("labels", graph.Shape{rows}, graph.I32)
	case classes > 0:
		m.Images = g.Input("images", input, dtype)
		m.Labels = g.Input("labels", graph.Shape{rows}, graph.I32)
	default:
		m.Images = g.Input("x", input, dtype)
	}
	l := &layers{g: g, dtype: dtype, tp: tp, sp: cfg.SP, flash: sz["attention"] == 1}
	out := b.build(l, m.Images, cfg, sz)
	switch {
	case classes > 0 && b.loss != nil:
		m.Logits = out
		m.Loss = b.loss(l, out, m.Labels)
	case classes > 0:
		m.Logits = out
		m.Loss = g.SoftmaxCrossEntropy(out, m.Labels)
	default:
		m.Loss = g.MeanSquare(out)
	}
	if err := g.Err(); err != nil {
		return nil, fmt.Errorf("zoo: %s: %w", name, err)
	}
	if got := out.Spec.Shape; classes > 0 && !got.Equal(graph.Shape{rows, classes / tp}) && !got.Equal(graph.Shape{rows, classes}) {
		return nil, fmt.Errorf("zoo: %s: logits are %v, want [%d,%d]", name, got, rows, classes)
	}
	return m, nil
}

// layers declares PyTorch-style layers on a graph, with parameters of the
// model's dtype.
type layers struct {
	g     *graph.Graph
	dtype graph.DType
	tp    int  // the tensor-parallel group's size (1: none)
	sp    bool // activations outside the tensor-parallel layers are split along axis 1, the sequence
	flash bool // attention=flash: the attention ops keep each row's log-normalizer, not its probabilities
}

// attention adds causal or bidirectional attention of heads query and kv
// key/value heads (of the whole model: a tensor-parallel device takes its
// share of both) over qkv, flash or not as the model's attention option
// says.
func (l *layers) attention(qkv *graph.Tensor, heads, kv, seq int, causal bool) *graph.Tensor {
	return l.g.AttentionOf(graph.Attention{Heads: heads / l.tp, KVHeads: kv / l.tp, Seq: seq, Causal: causal, Flash: l.flash}, qkv)
}

// seqAxis is the axis of [n, seq, hidden] activations that sequence
// parallelism splits.
const seqAxis = 1

// replicated returns a weight a device applies to its part of the
// sequence: under sequence parallelism its gradient is partial, summed
// over the group (TPCopy); otherwise the weight itself.
func (l *layers) replicated(w *graph.Tensor) *graph.Tensor {
	if l.sp {
		return l.g.TPCopy(w)
	}
	return w
}

// pytorchInit is the default initialization of nn.Linear and nn.Conv2d
// (kaiming_uniform with a=√5, which is uniform in ±1/√fan_in, and the same
// bound for the bias).
func pytorchInit(fanIn int) graph.Init {
	return graph.Init{Kind: graph.Uniform, Scale: 1 / math.Sqrt(float64(fanIn))}
}

// xavierInit is xavier_uniform: uniform in ±√(6/(fan_in+fan_out)).
func xavierInit(fanIn, fanOut int) graph.Init {
	return graph.Init{Kind: graph.Uniform, Scale: math.Sqrt(6 / float64(fanIn+fanOut))}
}

func (l *layers) param(name string, shape graph.Shape, init graph.Init) *graph.Tensor {
	return l.g.TypedParam(name, shape, l.dtype, init)
}

// The activations a layer may end in: BiasAct's, applied with the bias in
// one op; noAct leaves the bias alone (BiasAdd).
const (
	noAct = ""
	relu  = "relu"
	gelu  = "gelu"
)

// conv is nn.Conv2d(in, out, k, stride=stride, padding=pad) named name,
// followed by act.
func (l *layers) conv(name string, x *graph.Tensor, in, out, k, stride, pad int, act string) *graph.Tensor {
	init := pytorchInit(in * k * k)
	w := l.param(name+".weight", graph.Shape{out, in, k, k}, init)
	b := l.param(name+".bias", graph.Shape{out}, init)
	return l.bias(l.g.Conv2D(x, w, stride, pad), b, 1, act)
}

// linear is nn.Linear(in, out) named name, followed by act.
func (l *layers) linear(name string, x *graph.Tensor, in, out int, act string) *graph.Tensor {
	init := pytorchInit(in)
	return l.affine(name+".weight", name+".bias", x, in, out, init, init, act)
}

// affine adds act(x·wᵀ + b) for a weight w [out, in] and a bias b [out] of
// the given names and initializers: one Dense op without an activation or
// with ReLU, else a MatMul and a BiasAct.
func (l *layers) affine(wName, bName string, x *graph.Tensor, in, out int, wInit, bInit graph.Init, act string) *graph.Tensor {
	w := l.param(wName, graph.Shape{out, in}, wInit)
	b := l.param(bName, graph.Shape{out}, bInit)
	return l.fc(x, w, b, act)
}

// fc is act(x·wᵀ + b).
func (l *layers) fc(x, w, b *graph.Tensor, act string) *graph.Tensor {
	if act == noAct || act == relu {
		return l.g.Dense(x, w, b, act)
	}
	y := l.g.MatMul(x, w, false, true)
	if y == nil {
		return nil
	}
	return l.bias(y, b, len(y.Spec.Shape)-1, act)
}

// shard declares this device's part of a weight of the full shape that
// tensor parallelism splits along axis (in blocks equal blocks, each split
// over the group).
func (l *layers) shard(name string, full graph.Shape, init graph.Init, axis, blocks int) *graph.Tensor {
	init.Shard = &graph.Shard{Of: name, Full: full.Clone(), Axis: axis, Parts: l.tp, Blocks: blocks}
	return l.param(name, init.Shard.Shape(), init)
}

// colAffine is affine made column-parallel (Megatron-LM): each device of
// the tensor-parallel group computes out/TP of the outputs from the whole
// input, with its rows of w and b. The outputs stay split: a rowAffine
// must follow. blocks > 1 splits each of that many packed matrices (an
// attention's q, k and v). Without tensor parallelism it is affine.
func (l *layers) colAffine(wName, bName string, x *graph.Tensor, in, out int, wInit, bInit graph.Init, act string, blocks int) *graph.Tensor {
	if l.tp == 1 {
		return l.affine(wName, bName, x, in, out, wInit, bInit, act)
	}
	w := l.shard(wName, graph.Shape{out, in}, wInit, 0, blocks)
	b := l.shard(bName, graph.Shape{out}, bInit, 0, blocks)
	if l.sp { // every device needs the whole sequence
		return l.fc(l.g.TPGather(x, seqAxis, l.tp), w, b, act)
	}
	return l.fc(l.g.TPCopy(x), w, b, act)
}

// rowAffine is affine made row-parallel, after a colAffine: each device
// multiplies its split input by its columns of w, the group sums the
// partial products (TPSum), and every device adds the whole bias b and
// act. Without tensor parallelism it is affine.
func (l *layers) rowAffine(wName, bName string, x *graph.Tensor, in, out int, wInit, bInit graph.Init, act string) *graph.Tensor {
	if l.tp == 1 {
		return l.affine(wName, bName, x, in, out, wInit, bInit, act)
	}
	w := l.shard(wName, graph.Shape{out, in}, wInit, 1, 1)
	b := l.replicated(l.param(bName, graph.Shape{out}, bInit))
	var y *graph.Tensor
	if l.sp { // each device keeps its part of the sequence of the sum
		y = l.g.TPScatter(l.g.MatMul(x, w, false, true), seqAxis, l.tp)
	} else {
		y = l.g.TPSum(l.g.MatMul(x, w, false, true))
	}
	if y == nil {
		return nil
	}
	return l.bias(y, b, len(y.Spec.Shape)-1, act)
}

// bias adds act(x + b) along axis: BiasAct, or BiasAdd for noAct.
func (l *layers) bias(x, b *graph.Tensor, axis int, act string) *graph.Tensor {
	if act == noAct {
		return l.g.BiasAdd(x, b, axis)
	}
	return l.g.BiasAct(x, b, axis, act)
}

// layerNorm is nn.LayerNorm(width) (eps 1e-5, weight 1, bias 0) named name.
func (l *layers) layerNorm(name string, x *graph.Tensor, width int) *graph.Tensor {
	return l.layerNormEps(name, x, width, 1e-5)
}

// layerNormEps is nn.LayerNorm(width, eps) named name, its weights'
// gradients summed over a sequence-parallel group.
func (l *layers) layerNormEps(name string, x *graph.Tensor, width int, eps float32) *graph.Tensor {
	w := l.replicated(l.param(name+".weight", graph.Shape{width}, graph.Init{Kind: graph.Ones}))
	b := l.replicated(l.param(name+".bias", graph.Shape{width}, graph.Init{Kind: graph.Zeros}))
	return l.g.LayerNorm(x, w, b, eps)
}

// rmsNorm is nn.RMSNorm(width, eps=1e-5) (weight 1) named name.
func (l *layers) rmsNorm(name string, x *graph.Tensor, width int) *graph.Tensor {
	w := l.replicated(l.param(name+".weight", graph.Shape{width}, graph.Init{Kind: graph.Ones}))
	return l.g.RMSNorm(x, w, 1e-5)
}

func buildMLP(l *layers, x *graph.Tensor, _ Config, _ sizes) *graph.Tensor {
	h := l.g.Flatten(x)
	h = l.colAffine("fc1.weight", "fc1.bias", h, 784, 256, pytorchInit(784), pytorchInit(784), relu, 1)
	h = l.rowAffine("fc2.weight", "fc2.bias", h, 256, 256, pytorchInit(256), pytorchInit(256), relu)
	return l.linear("fc3", h, 256, 10, noAct)
}

func buildMNISTCNN(l *layers, x *graph.Tensor, _ Config, _ sizes) *graph.Tensor {
	h := l.g.MaxPool2D(l.conv("conv1", x, 1, 32, 3, 1, 1, relu), 2, 2)
	h = l.g.MaxPool2D(l.conv("conv2", h, 32, 64, 3, 1, 1, relu), 2, 2)
	h = l.linear("fc1", l.g.Flatten(h), 64*7*7, 128, relu)
	return l.linear("fc2", h, 128, 10, noAct)
}

func buildCIFARCNN(l *layers, x *graph.Tensor, cfg Config, _ sizes) *graph.Tensor {
	h := l.g.MaxPool2D(l.conv("conv1", x, 3, 32, 3, 1, 1, relu), 2, 2)
	h = l.g.MaxPool2D(l.conv("conv2", h, 32, 64, 3, 1, 1, relu), 2, 2)
	h = l.linear("fc1", l.g.Flatten(h), 64*8*8, 512, relu)
	if cfg.Train {
		h = l.g.Dropout(h, 0.5, cfg.Seed)
	}
	return l.linear("fc2", h, 512, 10, noAct)
}

// buildDeepMLP is nn.Sequential(Linear(w,w), ReLU, …, ReLU, Linear(w,w))
// of depth Linear layers, whose parameters the Sequential names by module
// index: 0.weight, 0.bias, 2.weight, ….
func buildDeepMLP(l *layers, x *graph.Tensor, _ Config, sz sizes) *graph.Tensor {
	w, depth := sz["width"], sz["depth"]
	init := pytorchInit(w)
	for i := range depth {
		act := relu
		if i == depth-1 {
			act = noAct
		}
		name := strconv.Itoa(2 * i)
		switch {
		case i%2 == 0 && i+1 < depth: // a column-parallel layer and the row-parallel one after it
			x = l.colAffine(name+".weight", name+".bias", x, w, w, init, init, act, 1)
		case i%2 == 1:
			x = l.rowAffine(name+".weight", name+".bias", x, w, w, init, init, act)
		default:
			x = l.linear(name, x, w, w, act)
		}
	}
	return x
}

// buildTransformerBlocks is nn.TransformerEncoder(nn.TransformerEncoderLayer(
// hidden, heads, 4·hidden, dropout=0, batch_first=True, norm_first=True,
// activation="gelu"), layers) without a final norm: per layer,
// x += OutProj(Attention(InProj(LN1(x)))) and x += Linear2(GELU(Linear1(LN2(x)))),
// attention not causal. nn.MultiheadAttention initializes its packed input
// projection with xavier_uniform and both projections' biases with zeros.
// (nn.TransformerEncoder deep-copies one layer, so in PyTorch every layer
// starts from the same weights; here each draws its own, by name.) With
// norm=rms the norms are nn.RMSNorm(hidden, eps=1e-5), as in LLaMA-style
// blocks.
func buildTransformerBlocks(l *layers, x *graph.Tensor, _ Config, sz sizes) *graph.Tensor {
	norm := l.layerNorm
	if sz["norm"] == 1 {
		norm = l.rmsNorm
	}
	for i := range sz["layers"] {
		l.g.StartLayer() // a block is a layer, as Megatron-LM's stages and recomputation take it
		x = l.block("layers."+strconv.Itoa(i)+".", x, sz, norm, false)
	}
	return x
}

// block is one pre-norm transformer block, parameters named from prefix p
// as nn.TransformerEncoderLayer names them: x += OutProj(Attention(
// InProj(norm1(x)))), x += Linear2(GELU(Linear1(norm2(x)))). Under tensor
// parallelism the projections are column- then row-parallel, attention
// split by heads.
func (l *layers) block(p string, x *graph.Tensor, sz sizes, norm func(string, *graph.Tensor, int) *graph.Tensor, causal bool) *graph.Tensor {
	h, heads, seq := sz["hidden"], sz["heads"], sz["seq"]
	zeros := graph.Init{Kind: graph.Zeros}
	a := norm(p+"norm1", x, h)
	a = l.colAffine(p+"self_attn.in_proj_weight", p+"self_attn.in_proj_bias", a, h, 3*h, xavierInit(h, 3*h), zeros, noAct, 3)
	a = l.attention(a, heads, heads, seq, causal)
	a = l.rowAffine(p+"self_attn.out_proj.weight", p+"self_attn.out_proj.bias", a, h, h, pytorchInit(h), zeros, noAct)
	x = l.g.Add(x, a)
	f := norm(p+"norm2", x, h)
	f = l.colAffine(p+"linear1.weight", p+"linear1.bias", f, h, 4*h, pytorchInit(h), pytorchInit(h), gelu, 1)
	x = l.g.Add(x, l.rowAffine(p+"linear2.weight", p+"linear2.bias", f, 4*h, h, pytorchInit(4*h), pytorchInit(4*h), noAct))
	return x
}

// buildGPT is a GPT language model (Radford et al., 2019): token and
// learned position embeddings, causal pre-norm blocks (see block), a final
// LayerNorm and a linear head over the vocabulary. The head is its own
// weight, not the token embedding's (GPT-NeoX and LLaMA untie them too), so
// that a pipeline's last stage holds it: the model has V·h more parameters
// than GPT-2's tied count, which tie=on gives (one stage only). Embeddings are initialized normal with standard
// deviation 0.02, as GPT-2 does. Under tensor parallelism the blocks are
// split, and so are the token embedding and the head by rows of the
// vocabulary (Megatron-LM's vocab-parallel layers); the position
// embedding is whole on every device.
func buildGPT(l *layers, tokens *graph.Tensor, _ Config, sz sizes) *graph.Tensor {
	h, seq, vocab := sz["hidden"], sz["seq"], sz["vocab"]
	emb := graph.Init{Kind: graph.Normal, Scale: 0.02}
	n := tokens.Spec.Shape[0]
	// Each device of a tensor-parallel group looks up its rows of the
	// vocabulary and the group sums the lookups; under sequence
	// parallelism each keeps its positions.
	wte := l.vocabWeight("wte.weight", vocab, h, emb)
	x := l.tokenEmbedding(wte, tokens) // [n, seq, h]; [n, seq/tp, h] under sequence parallelism
	x = l.positions("wpe.weight", x, n, seq, h, emb)
	for i := range sz["layers"] {
		if i > 0 { // the embeddings go with the first block, the head with the last
			l.g.StartLayer()
		}
		x = l.block("h."+strconv.Itoa(i)+".", x, sz, l.layerNorm, true)
	}
	x = l.layerNorm("ln_f", x, h)
	return l.lmHead(x, l.headWeight("lm_head.weight", wte, sz, emb), n, seq, h)
}

// positions adds to x [n, seq, h] (under sequence parallelism [n, seq/tp,
// h], this device's positions) a learned position embedding [seq, h] named
// name, split by positions under sequence parallelism.
func (l *layers) positions(name string, x *graph.Tensor, n, seq, h int, init graph.Init) *graph.Tensor {
	var pos *graph.Tensor // [seq, h]; this device's positions' rows under sequence parallelism
	if l.sp {
		pos = l.shard(name, graph.Shape{seq, h}, init, 0, 1)
	} else {
		pos = l.param(name, graph.Shape{seq, h}, init)
	}
	local := pos.Spec.Shape[0] // positions on this device
	sum := l.g.BiasAdd(l.g.Reshape(x, graph.Shape{n, local * h}), l.g.Reshape(pos, graph.Shape{local * h}), 1)
	return l.g.Reshape(sum, graph.Shape{n, local, h})
}

// gptLoss is a GPT's mean cross-entropy: the softmax cross-entropy of the
// logits, or, under tensor parallelism, Megatron-LM's vocab-parallel one:
// each device's statistics of its columns, summed over the group.
func gptLoss(l *layers, logits, labels *graph.Tensor) *graph.Tensor {
	if l.tp == 1 {
		return l.g.SoftmaxCrossEntropy(logits, labels)
	}
	return l.g.VocabLoss(l.g.TPSum(l.g.VocabStats(logits, labels, l.tp)))
}

// SplitNames splits a comma-separated list of model names, keeping each
// name's size options with it: "mlp,gpt2s-blocks:layers=2,heads=4" is mlp
// and gpt2s-blocks:layers=2,heads=4 (a part holding "=" but no ":"
// continues the name before it).
func SplitNames(list string) []string {
	var names []string
	for _, part := range strings.Split(list, ",") {
		part = strings.TrimSpace(part)
		if n := len(names); n > 0 && strings.Contains(part, "=") && !strings.Contains(part, ":") && strings.Contains(names[n-1], ":") {
			names[n-1] += "," + part
			continue
		}
		names = append(names, part)
	}
	return names
}

// HasTP reports whether the named model has a tensor-parallel layout.
func HasTP(name string) bool {
	b, _, err := lookup(name)
	return err == nil && b.tp != nil
}

// IsLanguageModel reports whether the named model is a causal language
// model: token ids in, a next-token loss at every position (Classes is its
// vocabulary).
func IsLanguageModel(name string) bool {
	b, _, err := lookup(name)
	return err == nil && b.tokens && !b.masked
}

// IsMaskedLanguageModel reports whether the named model is a masked
// language model (bert): token ids in, attention over the whole sequence,
// a loss against the original tokens at the masked positions.
func IsMaskedLanguageModel(name string) bool {
	b, _, err := lookup(name)
	return err == nil && b.masked
}

// KeepsAttentionProbs reports whether the named model has attention ops
// that keep their probabilities (graph.Graph.KeepsAttentionProbs): what
// selective recomputation recomputes. It builds the model at batch 1.
func KeepsAttentionProbs(name string) bool {
	m, err := Build(name, Config{Batch: 1})
	if err != nil {
		return false
	}
	return m.Graph.KeepsAttentionProbs()
}

// HasSP reports whether the named model has a sequence-parallel layout.
func HasSP(name string) bool {
	b, _, err := lookup(name)
	return err == nil && b.sp
}

// SPModels lists the models that have a sequence-parallel layout, sorted.
func SPModels() []string {
	var names []string
	for _, n := range Names() {
		if models[n].sp {
			names = append(names, n)
		}
	}
	return names
}

// TPModels lists the models that have a tensor-parallel layout, sorted.
func TPModels() []string {
	var names []string
	for _, n := range Names() {
		if models[n].tp != nil {
			names = append(names, n)
		}
	}
	return names
}

// Known reports whether name is a model of the zoo, with valid size
// options if any.
func Known(name string) bool {
	return Check(name) == nil
}

// Check says what is wrong with name as a model of the zoo, if anything:
// an unknown model (naming those it knows), or a size option it does not
// have or a value it does not take.
func Check(name string) error {
	_, _, err := lookup(name)
	return err
}
