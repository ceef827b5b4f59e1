package zoo

import (
	"fmt"
	"math"

	"github.com/flowkit/flowkit/graph"
)

// resnetDepths are the depths of He et al.'s Table 1 (CVPR 2016), with
// their blocks per stage: basic blocks (two 3×3 convolutions) for 18 and
// 34, bottlenecks (1×1, 3×3, 1×1 with four times the width out) from 50.
var resnetDepths = map[int][4]int{
	18:  {2, 2, 2, 2},
	34:  {3, 4, 6, 3},
	50:  {3, 4, 6, 3},
	101: {3, 4, 23, 3},
	152: {3, 8, 36, 3},
}

// resnetModel is a ResNet of the given default depth on ImageNet-sized
// images (see buildResNet).
func resnetModel(doc string, depth int) builder {
	return builder{doc: doc,
		sizes:   []sizeOption{{name: "depth", def: depth}, {name: "image", def: 224}},
		input:   func(sz sizes) graph.Shape { return graph.Shape{3, sz["image"], sz["image"]} },
		classes: 1000, build: buildResNet, check: checkResNet}
}

func checkResNet(sz sizes) error {
	if _, ok := resnetDepths[sz["depth"]]; !ok {
		return fmt.Errorf("depth %d is not a ResNet of He et al. (want 18, 34, 50, 101 or 152)", sz["depth"])
	}
	return nil
}

// buildResNet is torchvision's resnet18 … resnet152 (ResNet v1.5: a
// bottleneck strides in its 3×3 convolution, not its first 1×1): a 7×7
// convolution of stride 2 with 64 filters, batch norm, ReLU and a 3×3 max
// pooling of stride 2; four stages of blocks of widths 64, 128, 256 and
// 512, the first block of each stage but the first striding by 2, a block's
// shortcut a 1×1 convolution and batch norm where its shape changes; a
// global average pooling and a linear layer to the 1000 classes.
// Convolutions have no bias (the batch norm after each has one), batch
// norms eps 1e-5; parameters are named as torchvision names them
// (layer1.0.conv1.weight, layer1.0.downsample.1.bias, fc.weight) and
// initialized as it does: convolutions kaiming_normal (fan out, ReLU's
// gain), batch norms weight 1 and bias 0, the linear layer nn.Linear's
// default. Batch norm is in training mode (see graph.BatchNorm).
func buildResNet(l *layers, x *graph.Tensor, _ Config, sz sizes) *graph.Tensor {
	blocks := resnetDepths[sz["depth"]]
	expansion, block := 1, l.basicBlock
	if sz["depth"] >= 50 {
		expansion, block = 4, l.bottleneck
	}
	h := l.g.ReLU(l.convBN("conv1", "bn1", x, 3, 64, 7, 2, 3))
	h = l.g.Apply(graph.MaxPool2D{KH: 3, KW: 3, Window: graph.Window{StrideH: 2, StrideW: 2, PadH: 1, PadW: 1}}, h)[0]
	in := 64
	for stage, n := range blocks {
		width := 64 << stage
		for i := range n {
			stride := 1
			if i == 0 && stage > 0 {
				stride = 2
			}
			h = block(fmt.Sprintf("layer%d.%d", stage+1, i), h, in, width, stride)
			in = width * expansion
		}
	}
	s := h.Spec.Shape // [N, C, H, W]
	pooled := l.g.Scale(l.g.ReduceSum(l.g.Reshape(h, graph.Shape{s[0], s[1], s[2] * s[3]}), 2), float32(1/float64(s[2]*s[3])))
	return l.linear("fc", pooled, in, 1000, noAct)
}

// basicBlock is torchvision's BasicBlock: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)),
// both convolutions 3×3 of width out, the first of the given stride.
func (l *layers) basicBlock(name string, x *graph.Tensor, in, width, stride int) *graph.Tensor {
	h := l.g.ReLU(l.convBN(name+".conv1", name+".bn1", x, in, width, 3, stride, 1))
	h = l.convBN(name+".conv2", name+".bn2", h, width, width, 3, 1, 1)
	return l.g.ReLU(l.g.Add(h, l.shortcut(name, x, in, width, stride)))
}

// bottleneck is torchvision's Bottleneck: 1×1 to width, 3×3 of the given
// stride, 1×1 to 4·width, each followed by batch norm, ReLU after the
// first two and after the sum with the shortcut.
func (l *layers) bottleneck(name string, x *graph.Tensor, in, width, stride int) *graph.Tensor {
	h := l.g.ReLU(l.convBN(name+".conv1", name+".bn1", x, in, width, 1, 1, 0))
	h = l.g.ReLU(l.convBN(name+".conv2", name+".bn2", h, width, width, 3, stride, 1))
	h = l.convBN(name+".conv3", name+".bn3", h, width, 4*width, 1, 1, 0)
	return l.g.ReLU(l.g.Add(h, l.shortcut(name, x, in, 4*width, stride)))
}

// shortcut is x where the block keeps its shape, else downsample: a 1×1
// convolution of the block's stride to out channels and a batch norm.
func (l *layers) shortcut(name string, x *graph.Tensor, in, out, stride int) *graph.Tensor {
	if in == out && stride == 1 {
		return x
	}
	return l.convBN(name+".downsample.0", name+".downsample.1", x, in, out, 1, stride, 0)
}

// convBN is nn.Conv2d(in, out, k, stride, pad, bias=False) named conv,
// initialized by kaiming_normal_(mode="fan_out", nonlinearity="relu"),
// followed by nn.BatchNorm2d(out) named bn.
func (l *layers) convBN(conv, bn string, x *graph.Tensor, in, out, k, stride, pad int) *graph.Tensor {
	w := l.param(conv+".weight", graph.Shape{out, in, k, k}, graph.Init{Kind: graph.Normal, Scale: math.Sqrt(2 / float64(out*k*k))})
	gamma := l.param(bn+".weight", graph.Shape{out}, graph.Init{Kind: graph.Ones})
	beta := l.param(bn+".bias", graph.Shape{out}, graph.Init{Kind: graph.Zeros})
	return l.g.BatchNorm(l.g.Conv2D(x, w, stride, pad), gamma, beta, 1e-5)
}
