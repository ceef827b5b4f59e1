package runtime

import (
	"fmt"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/kernels/cpu"
)

// CPU is a device made of a pool of worker goroutines running the kernels
// of kernels/cpu.
type CPU struct {
	pool *cpu.Pool
}

// NewCPU returns a CPU device with the given number of workers (≤ 0: one
// per available core).
func NewCPU(workers int) *CPU { return &CPU{pool: cpu.NewPool(workers)} }

// Workers is the device's worker count.
func (d *CPU) Workers() int { return d.pool.Workers() }

func (d *CPU) String() string { return fmt.Sprintf("cpu(%d workers)", d.Workers()) }

// step says which iteration and micro-batch a kernel runs for: dropout
// masks and Adam's bias correction depend on it.
type step struct {
	iter   int
	micro  int // global micro-batch index, over all replicas
	micros int // global micro-batches per iteration
}

// launch runs op's kernel on buffers in (its inputs, of specs inSpecs) and
// out (its outputs, of specs outSpecs).
func (d *CPU) launch(op graph.Op, inSpecs, outSpecs []graph.Spec, at step, in, out []Buffer) error {
	p := d.pool
	x := func(i int) []float32 { return in[i].F }
	y := func(i int) []float32 { return out[i].F }
	shape := func(i int) graph.Shape { return inSpecs[i].Shape }
	switch op := op.(type) {
	case graph.MatMul:
		ar, ac := matrix(shape(0))
		br, bc := matrix(shape(1))
		m, k := ar, ac
		if op.TransA {
			m, k = ac, ar
		}
		nn := bc
		if op.TransB {
			nn = br
		}
		cpu.Sgemm(p, op.TransA, op.TransB, m, nn, k, 1, x(0), ac, x(1), bc, 0, y(0), nn)
	case graph.Dense:
		// The GEMM into y, then the bias and activation over y in place.
		rows, k := matrix(shape(0))
		n := shape(1)[0]
		cpu.Sgemm(p, false, true, rows, n, k, 1, x(0), k, x(1), k, 0, y(0), n)
		if op.Act == "" {
			cpu.BiasAdd(p, y(0), x(2), y(0), rows, n, 1)
			break
		}
		act, err := cpu.ParseActivation(op.Act)
		if err != nil {
			return err
		}
		cpu.BiasAct(p, act, y(0), x(2), y(0), rows, n, 1)
	case graph.DenseGrad:
		rows, n := matrix(shape(0))
		_, k := matrix(shape(1))
		cpu.Sgemm(p, true, false, n, k, rows, 1, x(0), n, x(1), k, 0, y(0), k)
		cpu.BiasGrad(p, x(0), y(1), rows, n, 1)
	case graph.BiasAdd:
		o, c, i := shape(0).Split3(op.Axis)
		cpu.BiasAdd(p, x(0), x(1), y(0), o, c, i)
	case graph.BiasGrad:
		o, c, i := shape(0).Split3(op.Axis)
		cpu.BiasGrad(p, x(0), y(0), o, c, i)
	case graph.BiasAct:
		act, err := cpu.ParseActivation(op.Act)
		if err != nil {
			return err
		}
		o, c, i := shape(0).Split3(op.Axis)
		cpu.BiasAct(p, act, x(0), x(1), y(0), o, c, i)
	case graph.BiasActGrad:
		act, err := cpu.ParseActivation(op.Act)
		if err != nil {
			return err
		}
		o, c, i := shape(0).Split3(op.Axis)
		cpu.BiasActBackward(p, act, x(0), x(1), x(2), y(0), o, c, i)
	case graph.Conv2D:
		cpu.Conv2DForward(p, convShape(op.Window, shape(0), shape(1)), x(0), x(1), y(0))
	case graph.Conv2DGradData:
		cpu.Conv2DBackwardData(p, convShape(op.Window, op.X, shape(1)), x(0), x(1), y(0))
	case graph.Conv2DGradFilter:
		cpu.Conv2DBackwardFilter(p, convShape(op.Window, shape(0), op.W), x(0), x(1), y(0))
	case graph.MaxPool2D:
		cpu.MaxPool2DForward(p, poolShape(op, shape(0)), x(0), y(0))
	case graph.MaxPool2DGrad:
		cpu.MaxPool2DBackward(p, poolShape(graph.MaxPool2D(op), shape(0)), x(0), x(1), y(0))
	case graph.ReLU:
		cpu.ReLU(p, x(0), y(0))
	case graph.ReLUGrad:
		cpu.ReLUBackward(p, x(0), x(1), y(0))
	case graph.GELU:
		cpu.GELU(p, x(0), y(0))
	case graph.GELUGrad:
		cpu.GELUBackward(p, x(0), x(1), y(0))
	case graph.Add:
		cpu.Add(p, x(0), x(1), y(0))
	case graph.Mul:
		cpu.Mul(p, x(0), x(1), y(0))
	case graph.Scale:
		cpu.Scale(p, op.Alpha, x(0), y(0))
	case graph.Fill:
		cpu.Fill(p, op.Value, y(0))
	case graph.Reshape:
		cpu.Copy(p, x(0), y(0))
	case graph.Dropout:
		cpu.Dropout(p, x(0), y(0), op.Rate, op.Seed, at.dropoutOffset(len(y(0))))
	case graph.DropoutGrad:
		cpu.DropoutBackward(p, x(0), y(0), op.Rate, op.Seed, at.dropoutOffset(len(y(0))))
	case graph.ReduceSum:
		o, r, i := shape(0).Split3(op.Axis)
		cpu.ReduceSum(p, x(0), y(0), o, r, i)
	case graph.BroadcastAxis:
		o, r, i := outSpecs[0].Shape.Split3(op.Axis)
		cpu.BroadcastAxis(p, x(0), y(0), o, r, i)
	case graph.SoftmaxCrossEntropy:
		rows, cols := matrix(shape(0))
		loss, err := cpu.SoftmaxCrossEntropy(p, x(0), in[1].I, rows, cols)
		if err != nil {
			return err
		}
		y(0)[0] = loss
	case graph.SoftmaxCrossEntropyGrad:
		rows, cols := matrix(shape(0))
		return cpu.SoftmaxCrossEntropyBackward(p, x(0), in[1].I, x(2)[0], y(0), rows, cols)
	case graph.MeanSquare:
		y(0)[0] = cpu.MeanSquare(p, x(0))
	case graph.MeanSquareGrad:
		cpu.MeanSquareBackward(p, x(0), x(1)[0], y(0))
	case graph.Attention:
		rows, hid := matrix(outSpecs[0].Shape)
		if op.Flash {
			cpu.FlashAttentionForward(p, x(0), y(0), y(1), rows/op.Seq, op.Seq, op.Heads, op.KV(), hid, op.Causal)
			break
		}
		cpu.AttentionForward(p, x(0), y(0), y(1), rows/op.Seq, op.Seq, op.Heads, op.KV(), hid, op.Causal)
	case graph.AttentionGrad:
		dout := len(in) - 1
		rows, hid := matrix(shape(dout))
		if op.Flash {
			cpu.FlashAttentionBackward(p, x(0), x(1), x(2), x(3), y(0), rows/op.Seq, op.Seq, op.Heads, graph.Attention(op).KV(), hid, op.Causal)
			break
		}
		cpu.AttentionBackward(p, x(0), x(1), x(2), y(0), rows/op.Seq, op.Seq, op.Heads, graph.Attention(op).KV(), hid, op.Causal)
	case graph.RoPE:
		rows, cols := matrix(shape(0))
		cpu.RoPEForward(p, x(0), y(0), rows, op.Seq, op.Heads, op.KV(), cols/(op.Heads+2*op.KV()), op.Theta)
	case graph.RoPEGrad:
		rows, cols := matrix(shape(0))
		kv := graph.RoPE(op).KV()
		cpu.RoPEBackward(p, x(0), y(0), rows, op.Seq, op.Heads, kv, cols/(op.Heads+2*kv), op.Theta)
	case graph.SwiGLU:
		cpu.SwiGLU(p, x(0), x(1), y(0))
	case graph.SwiGLUGrad:
		cpu.SwiGLUBackward(p, x(0), x(1), x(2), y(0), y(1))
	case graph.Softmax:
		rows, cols := matrix(shape(0))
		cpu.Softmax(p, x(0), y(0), rows, cols)
	case graph.SoftmaxGrad:
		rows, cols := matrix(shape(0))
		cpu.SoftmaxBackward(p, x(0), x(1), y(0), rows, cols)
	case graph.LayerNorm:
		rows, cols := matrix(shape(0))
		cpu.LayerNorm(p, x(0), x(1), x(2), y(0), y(1), y(2), rows, cols, op.Eps)
	case graph.LayerNormGrad:
		rows, cols := matrix(shape(0))
		cpu.LayerNormBackward(p, x(0), x(1), x(2), x(3), x(4), y(0), y(1), y(2), rows, cols)
	case graph.RMSNorm:
		rows, cols := matrix(shape(0))
		cpu.RMSNorm(p, x(0), x(1), y(0), y(1), rows, cols, op.Eps)
	case graph.RMSNormGrad:
		rows, cols := matrix(shape(0))
		cpu.RMSNormBackward(p, x(0), x(1), x(2), x(3), y(0), y(1), rows, cols)
	case graph.BatchNorm:
		s := shape(0)
		cpu.BatchNorm(p, x(0), x(1), x(2), y(0), s[0], s[1], s[2]*s[3], op.Eps)
	case graph.BatchNormGrad:
		s := shape(0)
		cpu.BatchNormBackward(p, x(0), x(1), x(2), y(0), y(1), y(2), s[0], s[1], s[2]*s[3], op.Eps)
	case graph.Embedding:
		v, dim := matrix(shape(0))
		return cpu.Embedding(p, x(0), in[1].I, y(0), v, dim)
	case graph.EmbeddingGrad:
		return cpu.EmbeddingBackward(p, in[0].I, x(1), y(0), op.Table[0], op.Table[1])
	case graph.VocabEmbedding:
		v, dim := matrix(shape(0))
		cpu.EmbeddingPart(p, x(0), in[1].I, y(0), op.Lo, v, dim)
	case graph.VocabEmbeddingGrad:
		cpu.EmbeddingPartBackward(p, in[0].I, x(1), y(0), op.Lo, op.Table[0], op.Table[1])
	case graph.VocabStats:
		return cpu.VocabStats(p, x(0), in[1].I, y(0), shape(0)[0], op.Width, op.Lo, op.Part, op.Parts)
	case graph.VocabStatsGrad:
		return cpu.VocabStatsBackward(p, x(0), in[1].I, x(2), y(0), shape(0)[0], op.Width, op.Lo, op.Part, op.Parts)
	case graph.VocabLoss:
		s := shape(0)
		y(0)[0] = cpu.VocabLoss(x(0), s[1], s[0])
	case graph.VocabLossGrad:
		s := shape(0)
		cpu.VocabLossBackward(x(0), x(1)[0], y(0), s[1], s[0])
	case graph.SGDUpdate:
		cpu.SGDUpdate(p, x(0), x(1), op.Schedule.Rate(op.LR, at.iter+1), op.WeightDecay)
	case graph.MomentumUpdate:
		cpu.MomentumUpdate(p, x(0), x(1), x(2), op.Schedule.Rate(op.LR, at.iter+1), op.Momentum, op.WeightDecay)
	case graph.AdamUpdate:
		update := cpu.AdamUpdate
		if op.Decoupled {
			update = cpu.AdamWUpdate
		}
		update(p, x(0), x(1), x(2), x(3), op.Schedule.Rate(op.LR, at.iter+1), op.Beta1, op.Beta2, op.Eps, op.WeightDecay, at.iter+1)
	default:
		return fmt.Errorf("runtime: cpu: no kernel for op %s", op.Type())
	}
	return nil
}

// matrix views a shape as [rows, last axis].
func matrix(s graph.Shape) (rows, cols int) {
	if len(s) == 0 {
		return 1, 1
	}
	return s.NumElements() / s[len(s)-1], s[len(s)-1]
}

// dropoutOffset gives each micro-batch of each iteration its own range of
// mask counters: the global batch's element index, so that masks do not
// depend on how the batch is split.
func (at step) dropoutOffset(n int) uint64 {
	micros := max(at.micros, 1)
	return (uint64(at.iter)*uint64(micros) + uint64(at.micro)) * uint64(n)
}

func convShape(w graph.Window, x, k graph.Shape) cpu.ConvShape {
	return cpu.ConvShape{N: x[0], C: x[1], H: x[2], W: x[3], K: k[0], R: k[2], S: k[3],
		StrideH: w.StrideH, StrideW: w.StrideW, PadH: w.PadH, PadW: w.PadW}
}

func poolShape(op graph.MaxPool2D, x graph.Shape) cpu.PoolShape {
	return cpu.PoolShape{N: x[0], C: x[1], H: x[2], W: x[3], KH: op.KH, KW: op.KW,
		StrideH: op.StrideH, StrideW: op.StrideW, PadH: op.PadH, PadW: op.PadW}
}
