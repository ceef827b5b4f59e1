package zoo

import (
	"errors"
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
// 2·in·out; bias add, ReLU: one per element; 2×2 pooling: four compares per
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
				if n.Op.Type() == "conv2d" || n.Op.Type() == "matmul" {
					dense += f
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

func TestBuildErrors(t *testing.T) {
	_, err := Build("resnet-9000", Config{Batch: 1})
	require.Error(t, err)
	require.Contains(t, err.Error(), "mnist-cnn")
	_, err = Build("mlp", Config{Batch: 0})
	require.ErrorContains(t, err, "batch")
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
