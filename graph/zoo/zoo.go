// Package zoo builds flowkit's reference models as logical graphs.
//
// Each model takes images NCHW (f32) and integer labels (i32) and ends in
// the mean softmax cross-entropy. Parameters are named and initialized as
// PyTorch's layers are (weights and biases uniform in ±1/√fan_in), so
// results are comparable with a PyTorch reference.
package zoo

import (
	"fmt"
	"math"
	"slices"
	"sort"
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
}

// Model is a built model graph and its distinguished tensors.
type Model struct {
	Name   string
	Graph  *graph.Graph
	Images *graph.Tensor // [N,C,H,W] f32
	Labels *graph.Tensor // [N] i32
	Logits *graph.Tensor // [N,classes]
	Loss   *graph.Tensor // scalar
}

// builder builds a model's forward graph.
type builder struct {
	input   graph.Shape // per sample, C×H×W
	classes int
	build   func(b *layers, x *graph.Tensor, cfg Config) *graph.Tensor
	doc     string
}

var models = map[string]builder{
	"mlp":       {graph.Shape{1, 28, 28}, 10, buildMLP, "MNIST MLP: 784-256-256-10 with ReLU"},
	"mnist-cnn": {graph.Shape{1, 28, 28}, 10, buildMNISTCNN, "MNIST CNN: two 3×3 conv+ReLU+max-pool, 3136-128-10"},
	"cifar-cnn": {graph.Shape{3, 32, 32}, 10, buildCIFARCNN, "CIFAR-10 CNN: two 3×3 conv+ReLU+max-pool, 4096-512-10, dropout 0.5"},
}

// Names lists the models Build knows, sorted.
func Names() []string {
	names := make([]string, 0, len(models))
	for n := range models {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Describe returns a one-line description of a model.
func Describe(name string) string { return models[name].doc }

// InputShape returns a model's per-sample input shape (C, H, W).
func InputShape(name string) (graph.Shape, error) {
	b, ok := models[name]
	if !ok {
		return nil, unknown(name)
	}
	return b.input.Clone(), nil
}

func unknown(name string) error {
	return fmt.Errorf("zoo: unknown model %q (known: %s)", name, strings.Join(Names(), ", "))
}

// Build builds the named model's forward graph and loss.
func Build(name string, cfg Config) (*Model, error) {
	b, ok := models[name]
	if !ok {
		return nil, unknown(name)
	}
	if cfg.Batch < 1 {
		return nil, fmt.Errorf("zoo: %s: batch must be ≥ 1, got %d", name, cfg.Batch)
	}
	g := graph.New()
	m := &Model{Name: name, Graph: g}
	m.Images = g.Input("images", append(graph.Shape{cfg.Batch}, b.input...), graph.F32)
	m.Labels = g.Input("labels", graph.Shape{cfg.Batch}, graph.I32)
	m.Logits = b.build(&layers{g: g}, m.Images, cfg)
	m.Loss = g.SoftmaxCrossEntropy(m.Logits, m.Labels)
	if err := g.Err(); err != nil {
		return nil, fmt.Errorf("zoo: %s: %w", name, err)
	}
	if got := m.Logits.Spec.Shape; !got.Equal(graph.Shape{cfg.Batch, b.classes}) {
		return nil, fmt.Errorf("zoo: %s: logits are %v, want [%d,%d]", name, got, cfg.Batch, b.classes)
	}
	return m, nil
}

// layers declares PyTorch-style layers on a graph.
type layers struct{ g *graph.Graph }

// pytorchInit is the default initialization of nn.Linear and nn.Conv2d
// (kaiming_uniform with a=√5, which is uniform in ±1/√fan_in, and the same
// bound for the bias).
func pytorchInit(fanIn int) graph.Init {
	return graph.Init{Kind: graph.Uniform, Scale: 1 / math.Sqrt(float64(fanIn))}
}

func (l *layers) conv(name string, x *graph.Tensor, in, out, k, stride, pad int) *graph.Tensor {
	init := pytorchInit(in * k * k)
	w := l.g.Param(name+".weight", graph.Shape{out, in, k, k}, init)
	b := l.g.Param(name+".bias", graph.Shape{out}, init)
	return l.g.BiasAdd(l.g.Conv2D(x, w, stride, pad), b, 1)
}

func (l *layers) linear(name string, x *graph.Tensor, in, out int) *graph.Tensor {
	init := pytorchInit(in)
	w := l.g.Param(name+".weight", graph.Shape{out, in}, init)
	b := l.g.Param(name+".bias", graph.Shape{out}, init)
	return l.g.Linear(x, w, b)
}

func buildMLP(l *layers, x *graph.Tensor, cfg Config) *graph.Tensor {
	h := l.g.Flatten(x)
	h = l.g.ReLU(l.linear("fc1", h, 784, 256))
	h = l.g.ReLU(l.linear("fc2", h, 256, 256))
	return l.linear("fc3", h, 256, 10)
}

func buildMNISTCNN(l *layers, x *graph.Tensor, cfg Config) *graph.Tensor {
	h := l.g.MaxPool2D(l.g.ReLU(l.conv("conv1", x, 1, 32, 3, 1, 1)), 2, 2)
	h = l.g.MaxPool2D(l.g.ReLU(l.conv("conv2", h, 32, 64, 3, 1, 1)), 2, 2)
	h = l.g.ReLU(l.linear("fc1", l.g.Flatten(h), 64*7*7, 128))
	return l.linear("fc2", h, 128, 10)
}

func buildCIFARCNN(l *layers, x *graph.Tensor, cfg Config) *graph.Tensor {
	h := l.g.MaxPool2D(l.g.ReLU(l.conv("conv1", x, 3, 32, 3, 1, 1)), 2, 2)
	h = l.g.MaxPool2D(l.g.ReLU(l.conv("conv2", h, 32, 64, 3, 1, 1)), 2, 2)
	h = l.g.ReLU(l.linear("fc1", l.g.Flatten(h), 64*8*8, 512))
	if cfg.Train {
		h = l.g.Dropout(h, 0.5, cfg.Seed)
	}
	return l.linear("fc2", h, 512, 10)
}

// Known reports whether name is a model of the zoo.
func Known(name string) bool { return slices.Contains(Names(), name) }
