package zoo

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/graph"
)

// The ResNets have torchvision's parameters (its model table: resnet18 …
// resnet152, batch norms' weights and biases included, running statistics
// not) and its multiply-adds per 224×224 image, the convolutions' and the
// linear layer's (its "GFLOPS" column, given to two decimals).
func TestResNetSizes(t *testing.T) {
	tests := []struct {
		depth  int
		params int
		gmacs  float64
	}{
		{18, 11_689_512, 1.81},
		{34, 21_797_672, 3.66},
		{50, 25_557_032, 4.09},
		{101, 44_549_160, 7.80},
		{152, 60_192_808, 11.51},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.depth), func(t *testing.T) {
			m, err := Build(fmt.Sprintf("resnet:depth=%d", tt.depth), Config{Batch: 2})
			require.NoError(t, err)
			require.Equal(t, tt.params, m.Graph.NumParams())
			var macs float64
			for _, n := range m.Graph.Nodes {
				switch n.Op.(type) {
				case graph.Conv2D, graph.Dense:
					macs += float64(n.Cost().FLOPs) / 2 / 2 // two flops a multiply-add, two images
				}
			}
			require.Equal(t, tt.gmacs, math.Round(macs/1e7)/100, "%.0f multiply-adds an image", macs)
		})
	}
	m, err := Build("resnet50", Config{Batch: 1})
	require.NoError(t, err)
	require.Equal(t, 25_557_032, m.Graph.NumParams(), "resnet50 is resnet:depth=50")
}

// Parameters are named and initialized as torchvision's; every
// convolution is followed by a batch norm, and a training step has a
// gradient for each parameter.
func TestResNetLayers(t *testing.T) {
	m, err := Build("resnet:depth=50,image=64", Config{Batch: 2, Train: true})
	require.NoError(t, err)
	params := map[string]*graph.Tensor{}
	for _, p := range m.Graph.Params() {
		params[p.Name] = p
	}
	for name, want := range map[string]graph.Init{
		"conv1.weight":                 {Kind: graph.Normal, Scale: math.Sqrt(2.0 / (64 * 49))},
		"bn1.weight":                   {Kind: graph.Ones},
		"layer1.0.conv3.weight":        {Kind: graph.Normal, Scale: math.Sqrt(2.0 / 256)},
		"layer1.0.downsample.0.weight": {Kind: graph.Normal, Scale: math.Sqrt(2.0 / 256)},
		"layer1.0.downsample.1.bias":   {Kind: graph.Zeros},
		"layer4.2.bn3.weight":          {Kind: graph.Ones},
		"fc.weight":                    {Kind: graph.Uniform, Scale: 1 / math.Sqrt(2048)},
		"fc.bias":                      {Kind: graph.Uniform, Scale: 1 / math.Sqrt(2048)},
	} {
		p, ok := params[name]
		require.True(t, ok, "no parameter %s", name)
		require.Equal(t, want, p.Init, name)
	}
	require.NotContains(t, params, "layer1.1.downsample.0.weight", "a block that keeps its shape adds x")
	require.NotContains(t, params, "conv1.bias", "convolutions have no bias")
	var convs, norms int
	for _, n := range m.Graph.Nodes {
		switch n.Op.(type) {
		case graph.Conv2D:
			convs++
		case graph.BatchNorm:
			norms++
		}
	}
	require.Equal(t, 53, convs, "49 in the blocks' paths and the stem, 4 shortcuts")
	require.Equal(t, convs, norms)
	require.Equal(t, graph.Shape{2, 1000}, m.Logits.Spec.Shape)
	require.NoError(t, m.Graph.Minimize(m.Loss, graph.SGD{LR: 0.1, Momentum: 0.9}))
	grads := 0
	for _, n := range m.Graph.Nodes {
		if _, ok := n.Op.(graph.BatchNormGrad); ok {
			grads++
		}
	}
	require.Equal(t, norms, grads)
}

func TestResNetErrors(t *testing.T) {
	_, err := Build("resnet:depth=20", Config{Batch: 1})
	require.ErrorContains(t, err, "depth 20 is not a ResNet of He et al. (want 18, 34, 50, 101 or 152)")
	_, err = Build("resnet:width=2", Config{Batch: 1})
	require.ErrorContains(t, err, "width")
	m, err := Build("resnet:depth=18,image=32", Config{Batch: 3, DType: graph.BF16})
	require.NoError(t, err, "CIFAR-sized images go down to 1×1 before the pooling")
	require.Equal(t, graph.Shape{3, 3, 32, 32}, m.Images.Spec.Shape)
}
