package runtime

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/kernels/cpu"
	kcuda "github.com/flowkit/flowkit/kernels/cuda"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/units"
)

// GPU is a CUDA device: its primary context, cuBLAS and cuBLASLt handles
// and the kernels of kernels/cuda loaded into it.
type GPU struct {
	ctx  *cu.Context
	blas *cu.BLAS
	lt   *cu.BLASLt
	k    *kcuda.Kernels

	mu        sync.Mutex
	fallbacks map[string]bool        // what cuBLASLt had no algorithm for
	choices   map[gemmKey]gemmChoice // products timed under GEMMTuned
}

// GEMMPolicy is how a GPU runs dense layers and matrix products.
type GEMMPolicy int

const (
	// GEMMTuned times, the first time a shape runs outside a graph
	// capture, each way to run it: with cuBLASLt, every candidate
	// algorithm its heuristic offers, with the bias, ReLU or bias
	// gradient fused into the product; and cuBLAS's GEMM with a kernel for
	// the rest. The fastest is kept for the GPU's life (GPU.Tunings).
	// Nothing is assumed about which wins: on a given GPU and shape the
	// heuristic's first algorithm, or the fusion itself, may lose.
	GEMMTuned GEMMPolicy = iota
	// GEMMFused runs dense layers as one cuBLASLt call with the heuristic's
	// first algorithm (cuBLAS and a kernel where it has none), and matrix
	// products with cuBLAS.
	GEMMFused
	// GEMMUnfused runs everything with cuBLAS's GEMM and kernels.
	GEMMUnfused
)

// GEMMPolicies names the policies, as flags spell them.
var GEMMPolicies = []string{"tuned", "fused", "unfused"}

func (p GEMMPolicy) String() string {
	if p >= 0 && int(p) < len(GEMMPolicies) {
		return GEMMPolicies[p]
	}
	return fmt.Sprintf("GEMMPolicy(%d)", int(p))
}

// ParseGEMMPolicy parses one of GEMMPolicies.
func ParseGEMMPolicy(s string) (GEMMPolicy, error) {
	if i := slices.Index(GEMMPolicies, s); i >= 0 {
		return GEMMPolicy(i), nil
	}
	return 0, fmt.Errorf("unknown GEMM policy %q (want one of %s)", s, strings.Join(GEMMPolicies, ", "))
}

// gemmKey is a product as the runtime issues it: the op, its GEMM type,
// and its sizes.
type gemmKey struct {
	op      string // "dense", "dense_grad", "matmul"
	t       cu.GemmType
	ta, tb  bool
	m, n, k int
	relu    bool
}

func (k gemmKey) String() string {
	s := fmt.Sprintf("%s %v %d×%d×%d", k.op, k.t, k.m, k.n, k.k)
	if k.relu {
		s += " relu"
	}
	return s
}

// gemmChoice is how a tuned product runs, and what the timing saw.
type gemmChoice struct {
	lt   bool // cuBLASLt; otherwise cuBLAS (and a kernel)
	note string
}

// tuneReps is how many times each way to run a product is timed.
const tuneReps = 5

// OpenGPU opens CUDA device ordinal. On a machine without a GPU, driver or
// cuBLAS the error wraps cuda.ErrNotAvailable and says why.
func OpenGPU(ordinal int) (*GPU, error) {
	ctx, err := cu.Open(ordinal)
	if err != nil {
		return nil, err
	}
	blas, err := ctx.NewBLAS()
	if err != nil {
		ctx.Close()
		return nil, err
	}
	lt, err := ctx.NewBLASLt()
	if err != nil {
		blas.Destroy()
		ctx.Close()
		return nil, err
	}
	k, err := kcuda.Load(ctx, blas)
	if err != nil {
		lt.Destroy()
		blas.Destroy()
		ctx.Close()
		return nil, err
	}
	return &GPU{ctx: ctx, blas: blas, lt: lt, k: k}, nil
}

// Close releases the device.
func (g *GPU) Close() error {
	return errors.Join(g.k.Unload(), g.lt.Destroy(), g.blas.Destroy(), g.ctx.Close())
}

// Fallbacks lists, sorted, the fused products cuBLASLt had no algorithm
// for, which ran as a cuBLAS GEMM and a kernel instead (slower, same
// result).
func (g *GPU) Fallbacks() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var l []string
	for f := range g.fallbacks {
		l = append(l, f)
	}
	slices.Sort(l)
	return l
}

// Tunings lists, sorted, the products timed under GEMMTuned: each way's
// time and the one kept.
func (g *GPU) Tunings() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var l []string
	for _, c := range g.choices {
		l = append(l, c.note)
	}
	slices.Sort(l)
	return l
}

// product enqueues product key as the policy (and, under GEMMTuned, the
// timing) says: lt(false) with cuBLASLt, blas with cuBLAS and kernels.
// Where cuBLASLt has no algorithm, blas runs instead; for a fused product
// the GPU's notes say so.
func (g *GPU) product(s *cu.Stream, key gemmKey, at gpuStep, lt func(tune bool) (cu.Tuning, error), blas func() error) error {
	useLt, err := g.choice(s, key, at, lt, blas)
	if err != nil {
		return err
	}
	if useLt {
		_, err := lt(false)
		if !errors.Is(err, cu.ErrNoAlgorithm) {
			return err
		}
		if key.op != "matmul" {
			g.fellBack(key.op, err)
		}
	}
	return blas()
}

// choice returns how product key runs under policy, timing it first under
// GEMMTuned (unless capturing, when it cannot wait for the GPU): lt runs
// it with cuBLASLt (tune: timing the candidates; it must then enqueue the
// product as a plain call would), blas with cuBLAS and kernels. The
// product itself is then enqueued by the caller as the choice says.
func (g *GPU) choice(s *cu.Stream, key gemmKey, at gpuStep, lt func(tune bool) (cu.Tuning, error), blas func() error) (useLt bool, err error) {
	switch at.gemm {
	case GEMMUnfused:
		return false, nil
	case GEMMFused:
		return key.op != "matmul", nil
	}
	g.mu.Lock()
	c, ok := g.choices[key]
	g.mu.Unlock()
	if ok {
		return c.lt, nil
	}
	if at.capturing { // untuned (a warm-up precedes captures): as GEMMFused
		return key.op != "matmul", nil
	}
	tu, err := lt(true)
	ltTime := time.Duration(0)
	switch {
	case errors.Is(err, cu.ErrNoAlgorithm):
		c.note = key.String() + ": cuBLASLt has no algorithm: cuBLAS kept"
		if key.op != "matmul" {
			g.fellBack(key.op, err)
		}
	case err != nil:
		return false, err
	case len(tu.Times) > 0:
		ltTime = tu.Times[tu.Best]
	}
	blasTime, err := timeOn(s, g.ctx, tuneReps, blas)
	if err != nil {
		return false, err
	}
	c.lt = ltTime > 0 && ltTime <= blasTime
	if ltTime > 0 {
		other, kept := "cuBLAS + kernel", "cuBLAS"
		if key.op == "matmul" {
			other = "cuBLAS"
		}
		if c.lt {
			kept = "cuBLASLt"
		}
		c.note = fmt.Sprintf("%v: cuBLASLt %v; %s %v: %s kept", key, tu, other, cu.RoundTime(blasTime), kept)
	}
	g.mu.Lock()
	if g.choices == nil {
		g.choices = make(map[gemmKey]gemmChoice)
	}
	g.choices[key] = c
	g.mu.Unlock()
	return c.lt, nil
}

// timeOn returns the mean device time of f's work on s over reps runs,
// after one untimed run.
func timeOn(s *cu.Stream, ctx *cu.Context, reps int, f func() error) (time.Duration, error) {
	start, err := ctx.NewEvent(true)
	if err != nil {
		return 0, err
	}
	defer start.Destroy()
	end, err := ctx.NewEvent(true)
	if err != nil {
		return 0, err
	}
	defer end.Destroy()
	if err := f(); err != nil {
		return 0, err
	}
	if err := start.Record(s); err != nil {
		return 0, err
	}
	for range reps {
		if err := f(); err != nil {
			return 0, err
		}
	}
	if err := end.Record(s); err != nil {
		return 0, err
	}
	if err := end.Synchronize(); err != nil {
		return 0, err
	}
	d, err := cu.Elapsed(start, end)
	return max(d/time.Duration(reps), 1), err
}

// fellBack records that op ran without its fused cuBLASLt product.
func (g *GPU) fellBack(op string, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fallbacks == nil {
		g.fallbacks = make(map[string]bool)
	}
	g.fallbacks[op+": "+err.Error()] = true
}

// prepare allocates the cuBLAS and cuBLASLt workspaces of s now, rather
// than inside a graph capture.
func (g *GPU) prepare(s *cu.Stream) error {
	return errors.Join(g.blas.Prepare(s), g.lt.Prepare(s))
}

// Info describes the device.
func (g *GPU) Info() cu.DeviceInfo { return g.ctx.Info() }

func (g *GPU) String() string {
	i := g.Info()
	return fmt.Sprintf("cuda:%d (%s, sm_%d%d, %d SMs, %v)", i.Ordinal, i.Name, i.Major, i.Minor, i.SMs, i.TotalMem)
}

// CatalogType is the topology catalog's type for this GPU ("H200",
// "A100-80", …), or "" if the catalog does not know it.
func (g *GPU) CatalogType() string { return CatalogType(g.Info()) }

// CatalogType is the topology catalog's type of a CUDA device, or "" if the
// catalog does not know it: the type a plan for the device must name.
func CatalogType(info cu.DeviceInfo) string { return catalogType(info.Name, info.TotalMem) }

// catalogType maps a CUDA device name to a catalog type.
func catalogType(name string, mem units.Bytes) string {
	n := strings.ToUpper(name)
	big := mem > 60<<30
	switch {
	case strings.Contains(n, "H200"):
		return "H200"
	case strings.Contains(n, "H100"):
		return "H100"
	case strings.Contains(n, "A100") && big:
		return "A100-80"
	case strings.Contains(n, "A100"):
		return "A100-40"
	case strings.Contains(n, "V100") && mem > 20<<30:
		return "V100-32"
	case strings.Contains(n, "V100"):
		return "V100-16"
	case strings.Contains(n, "A10G"):
		return "A10G"
	case strings.Contains(n, "T4"):
		return "T4"
	case strings.Contains(n, "L4"):
		return "L4"
	}
	return ""
}

// gpuStep says which iteration and micro-batch a kernel runs for. The
// iteration is read by the kernels from device memory (iter points at an
// int64), so that a captured CUDA graph replays correctly: its arguments
// are fixed, the counter behind the pointer is not.
type gpuStep struct {
	iter      cu.DevicePtr
	micro     int        // global micro-batch index, over all replicas
	micros    int        // global micro-batches per iteration
	gemm      GEMMPolicy // PlanRunner.GEMM
	capturing bool       // the enqueue is being captured into a graph
	step      int        // the training step being taken, from 1 (not while capturing)
	rates     *rateTables
}

// rate is an update's learning rate at this step: its value when the
// kernel is enqueued for one step, and, in a capture, a schedule's table,
// which the kernel reads by the iteration counter.
func (at gpuStep) rate(lr float32, s graph.Schedule) (kcuda.Rate, error) {
	switch {
	case s.IsZero():
		return kcuda.Rate{LR: lr}, nil
	case !at.capturing:
		return kcuda.Rate{LR: s.Rate(lr, at.step)}, nil
	}
	return at.rates.of(lr, s)
}

// workspace is the scratch a task's kernel needs.
func workspace(op graph.Op, in []graph.Spec) units.Bytes {
	shape := func(i int) graph.Shape { return in[i].Shape }
	switch op := op.(type) {
	case graph.Conv2D:
		return kcuda.ConvWorkspace(convShape(op.Window, shape(0), shape(1)), in[0].DType)
	case graph.Conv2DGradData:
		return kcuda.ConvWorkspace(convShape(op.Window, op.X, shape(1)), in[0].DType)
	case graph.Conv2DGradFilter:
		return kcuda.ConvWorkspace(convShape(op.Window, shape(0), op.W), in[0].DType)
	case graph.AttentionGrad:
		if op.Flash {
			rows, _ := matrix(shape(0))
			return kcuda.FlashAttentionWorkspace(rows/op.Seq, op.Seq, op.Heads)
		}
		return kcuda.AttentionWorkspace(in[0].DType, op.Seq, op.Heads)
	case graph.BiasGrad:
		o, c, i := shape(0).Split3(op.Axis)
		return kcuda.BiasGradWorkspace(o, c, i)
	case graph.DenseGrad: // BiasGrad's, for when cuBLASLt has no algorithm
		rows, n := matrix(shape(0))
		return kcuda.BiasGradWorkspace(rows, n, 1)
	case graph.MeanSquare:
		return kcuda.MeanSquareWorkspace(shape(0).NumElements())
	case graph.SoftmaxCrossEntropy:
		rows, _ := matrix(shape(0))
		return kcuda.SoftmaxCrossEntropyWorkspace(rows)
	case graph.LayerNormGrad:
		rows, cols := matrix(shape(0))
		return kcuda.LayerNormWorkspace(rows, cols)
	case graph.RMSNormGrad:
		rows, cols := matrix(shape(0))
		return kcuda.RMSNormWorkspace(rows, cols)
	case graph.BatchNorm:
		return kcuda.BatchNormForwardWorkspace(nchw(shape(0)))
	case graph.BatchNormGrad:
		return kcuda.BatchNormWorkspace(nchw(shape(0)))
	}
	return 0
}

// nchw returns the sizes BatchNorm's kernels take for x [N,C,H,W]: n, c
// and hw = H·W.
func nchw(x graph.Shape) (n, c, hw int) { return x[0], x[1], x[2] * x[3] }

// gemmType is the cuBLAS GEMM for a dtype: fp32 without TF32, so that
// results match the float64 references within fp32's precision.
func gemmType(dt graph.DType) (cu.GemmType, error) {
	switch dt {
	case graph.F32:
		return cu.GemmF32, nil
	case graph.BF16:
		return cu.GemmBF16, nil
	}
	return 0, fmt.Errorf("runtime: cuda: no GEMM for %s", dt)
}

// gpuCheck reports what of op on inputs of specs in the GPU's kernels
// cannot do, so that a plan is refused before it runs: flash attention's
// head widths and sizes.
func gpuCheck(op graph.Op, in []graph.Spec) error {
	var a graph.Attention
	switch op := op.(type) {
	case graph.Attention:
		a = op
	case graph.AttentionGrad:
		a = graph.Attention(op)
	default:
		return nil
	}
	if !a.Flash {
		return nil
	}
	rows, cols := matrix(in[0].Shape)
	d := cols / (a.Heads + 2*a.KV())
	return kcuda.FlashAttentionSupported(in[0].DType, rows/a.Seq, a.Seq, a.Heads, a.KV(), a.Heads*d)
}

// launch enqueues op's kernels on s: inputs in (of specs inSpecs), outputs
// out (of specs outSpecs), scratch work (at least workspace(op, inSpecs)).
// It mirrors CPU.launch op for op.
func (g *GPU) launch(s *cu.Stream, op graph.Op, inSpecs, outSpecs []graph.Spec, at gpuStep, in, out []cu.DevicePtr, work cu.DevicePtr) error {
	k := g.k
	shape := func(i int) graph.Shape { return inSpecs[i].Shape }
	var dt graph.DType // the first input's; Fill has none and uses its output's
	if len(inSpecs) > 0 {
		dt = inSpecs[0].DType
	}
	n := func() int { return outSpecs[0].Shape.NumElements() }
	switch op := op.(type) {
	case graph.MatMul:
		ar, ac := matrix(shape(0))
		br, bc := matrix(shape(1))
		m, kk := ar, ac
		if op.TransA {
			m, kk = ac, ar
		}
		nn := bc
		if op.TransB {
			nn = br
		}
		t, err := gemmType(dt)
		if err != nil {
			return err
		}
		return g.matmul(s, at, t, op.TransA, op.TransB, m, nn, kk, in[0], ac, in[1], bc, out[0], nn)
	case graph.Dense:
		return g.dense(s, at, op, dt, shape(0), shape(1), in, out[0])
	case graph.DenseGrad:
		return g.denseGrad(s, at, dt, shape(0), shape(1), in, out, work)
	case graph.BiasAdd:
		o, c, i := shape(0).Split3(op.Axis)
		return k.BiasAdd(s, dt, in[0], in[1], out[0], o, c, i)
	case graph.BiasGrad:
		o, c, i := shape(0).Split3(op.Axis)
		return k.BiasGrad(s, dt, in[0], out[0], work, o, c, i)
	case graph.BiasAct:
		act, err := cpu.ParseActivation(op.Act)
		if err != nil {
			return err
		}
		o, c, i := shape(0).Split3(op.Axis)
		return k.BiasAct(s, dt, act, in[0], in[1], out[0], o, c, i)
	case graph.BiasActGrad:
		act, err := cpu.ParseActivation(op.Act)
		if err != nil {
			return err
		}
		o, c, i := shape(0).Split3(op.Axis)
		return k.BiasActBackward(s, dt, act, in[0], in[1], in[2], out[0], o, c, i)
	case graph.Conv2D:
		return k.Conv2DForward(s, dt, convShape(op.Window, shape(0), shape(1)), in[0], in[1], out[0], work)
	case graph.Conv2DGradData:
		return k.Conv2DBackwardData(s, dt, convShape(op.Window, op.X, shape(1)), in[0], in[1], out[0], work)
	case graph.Conv2DGradFilter:
		return k.Conv2DBackwardFilter(s, dt, convShape(op.Window, shape(0), op.W), in[0], in[1], out[0], work)
	case graph.MaxPool2D:
		return k.MaxPool2DForward(s, dt, poolShape(op, shape(0)), in[0], out[0])
	case graph.MaxPool2DGrad:
		return k.MaxPool2DBackward(s, dt, poolShape(graph.MaxPool2D(op), shape(0)), in[0], in[1], out[0])
	case graph.ReLU:
		return k.ReLU(s, dt, in[0], out[0], n())
	case graph.ReLUGrad:
		return k.ReLUBackward(s, dt, in[0], in[1], out[0], n())
	case graph.GELU:
		return k.GELU(s, dt, in[0], out[0], n())
	case graph.GELUGrad:
		return k.GELUBackward(s, dt, in[0], in[1], out[0], n())
	case graph.Add:
		return k.Add(s, dt, in[0], in[1], out[0], n())
	case graph.Mul:
		return k.Mul(s, dt, in[0], in[1], out[0], n())
	case graph.Scale:
		return k.Scale(s, dt, op.Alpha, in[0], out[0], n())
	case graph.Fill:
		return k.Fill(s, outSpecs[0].DType, op.Value, out[0], n())
	case graph.Reshape:
		return s.CopyDtoD(out[0], in[0], outSpecs[0].Bytes())
	case graph.Dropout:
		// The CPU's mask counter (iter·micros + micro)·n, with the
		// iteration read on the device.
		per := uint64(n())
		return k.Dropout(s, dt, in[0], out[0], op.Rate, op.Seed, uint64(at.micro)*per, at.iter, uint64(at.micros)*per, n())
	case graph.DropoutGrad:
		per := uint64(n())
		return k.DropoutBackward(s, dt, in[0], out[0], op.Rate, op.Seed, uint64(at.micro)*per, at.iter, uint64(at.micros)*per, n())
	case graph.ReduceSum:
		o, r, i := shape(0).Split3(op.Axis)
		return k.ReduceSum(s, dt, in[0], out[0], o, r, i)
	case graph.BroadcastAxis:
		o, r, i := outSpecs[0].Shape.Split3(op.Axis)
		return k.BroadcastAxis(s, dt, in[0], out[0], o, r, i)
	case graph.SoftmaxCrossEntropy:
		rows, cols := matrix(shape(0))
		return k.SoftmaxCrossEntropy(s, dt, in[0], in[1], out[0], work, rows, cols)
	case graph.SoftmaxCrossEntropyGrad:
		rows, cols := matrix(shape(0))
		return k.SoftmaxCrossEntropyBackward(s, dt, in[0], in[1], in[2], out[0], rows, cols)
	case graph.MeanSquare:
		return k.MeanSquare(s, dt, in[0], out[0], work, shape(0).NumElements())
	case graph.MeanSquareGrad:
		return k.MeanSquareBackward(s, dt, in[0], in[1], out[0], shape(0).NumElements())
	case graph.Attention:
		rows, hid := matrix(outSpecs[0].Shape)
		if op.Flash {
			return k.FlashAttentionForward(s, dt, in[0], out[0], out[1], rows/op.Seq, op.Seq, op.Heads, op.KV(), hid, op.Causal)
		}
		return k.AttentionForward(s, dt, in[0], out[0], out[1], rows/op.Seq, op.Seq, op.Heads, op.KV(), hid, op.Causal)
	case graph.AttentionGrad:
		rows, hid := matrix(shape(len(in) - 1))
		if op.Flash {
			return k.FlashAttentionBackward(s, dt, in[0], in[1], in[2], in[3], out[0], work, rows/op.Seq, op.Seq, op.Heads, graph.Attention(op).KV(), hid, op.Causal)
		}
		return k.AttentionBackward(s, dt, in[0], in[1], in[2], out[0], work, rows/op.Seq, op.Seq, op.Heads, graph.Attention(op).KV(), hid, op.Causal)
	case graph.RoPE:
		rows, cols := matrix(shape(0))
		return k.RoPEForward(s, dt, in[0], out[0], rows, op.Seq, op.Heads, op.KV(), cols/(op.Heads+2*op.KV()), op.Theta)
	case graph.RoPEGrad:
		rows, cols := matrix(shape(0))
		kv := graph.RoPE(op).KV()
		return k.RoPEBackward(s, dt, in[0], out[0], rows, op.Seq, op.Heads, kv, cols/(op.Heads+2*kv), op.Theta)
	case graph.SwiGLU:
		return k.SwiGLU(s, dt, in[0], in[1], out[0], n())
	case graph.SwiGLUGrad:
		return k.SwiGLUBackward(s, dt, in[0], in[1], in[2], out[0], out[1], n())
	case graph.Softmax:
		rows, cols := matrix(shape(0))
		return k.Softmax(s, dt, in[0], out[0], rows, cols)
	case graph.SoftmaxGrad:
		rows, cols := matrix(shape(0))
		return k.SoftmaxBackward(s, dt, in[0], in[1], out[0], rows, cols)
	case graph.LayerNorm:
		rows, cols := matrix(shape(0))
		return k.LayerNorm(s, dt, in[0], in[1], in[2], out[0], out[1], out[2], rows, cols, op.Eps)
	case graph.LayerNormGrad:
		rows, cols := matrix(shape(0))
		return k.LayerNormBackward(s, dt, in[0], in[1], in[2], in[3], in[4], out[0], out[1], out[2], work, rows, cols)
	case graph.RMSNorm:
		rows, cols := matrix(shape(0))
		return k.RMSNorm(s, dt, in[0], in[1], out[0], out[1], rows, cols, op.Eps)
	case graph.RMSNormGrad:
		rows, cols := matrix(shape(0))
		return k.RMSNormBackward(s, dt, in[0], in[1], in[2], in[3], out[0], out[1], work, rows, cols)
	case graph.BatchNorm:
		n, c, hw := nchw(shape(0))
		return k.BatchNorm(s, dt, in[0], in[1], in[2], out[0], work, n, c, hw, op.Eps)
	case graph.BatchNormGrad:
		n, c, hw := nchw(shape(0))
		return k.BatchNormBackward(s, dt, in[0], in[1], in[2], out[0], out[1], out[2], work, n, c, hw, op.Eps)
	case graph.Embedding:
		v, d := matrix(shape(0))
		return k.Embedding(s, dt, in[0], in[1], out[0], v, d, shape(1).NumElements())
	case graph.EmbeddingGrad:
		return k.EmbeddingBackward(s, inSpecs[1].DType, in[0], in[1], out[0], op.Table[0], op.Table[1], shape(0).NumElements())
	case graph.SGDUpdate:
		lr, err := at.rate(op.LR, op.Schedule)
		if err != nil {
			return err
		}
		return k.SGDUpdate(s, dt, in[0], in[1], lr, op.WeightDecay, at.iter, shape(0).NumElements())
	case graph.MomentumUpdate:
		lr, err := at.rate(op.LR, op.Schedule)
		if err != nil {
			return err
		}
		return k.MomentumUpdate(s, dt, in[0], in[1], in[2], lr, op.Momentum, op.WeightDecay, at.iter, shape(0).NumElements())
	case graph.AdamUpdate:
		lr, err := at.rate(op.LR, op.Schedule)
		if err != nil {
			return err
		}
		o := kcuda.Adam{Beta1: op.Beta1, Beta2: op.Beta2, Eps: op.Eps, WeightDecay: op.WeightDecay, Decoupled: op.Decoupled}
		return k.AdamUpdate(s, dt, in[0], in[1], in[2], in[3], lr, o, at.iter, shape(0).NumElements())
	}
	return fmt.Errorf("runtime: cuda: no kernel for op %s", op.Type())
}

// matmul enqueues c = op(a)·op(b) with cuBLAS, or with cuBLASLt where
// tuning found it faster.
func (g *GPU) matmul(s *cu.Stream, at gpuStep, t cu.GemmType, ta, tb bool, m, n, k int, a cu.DevicePtr, lda int, b cu.DevicePtr, ldb int, c cu.DevicePtr, ldc int) error {
	blas := func() error { return g.blas.Gemm(s, t, ta, tb, m, n, k, 1, a, lda, b, ldb, 0, c, ldc) }
	lt := func(tune bool) (cu.Tuning, error) {
		if tune {
			return g.lt.TuneMatmulBias(s, tuneReps, t, ta, tb, m, n, k, a, lda, b, ldb, 0, c, ldc, false)
		}
		return cu.Tuning{}, g.lt.MatmulBias(s, t, ta, tb, m, n, k, a, lda, b, ldb, 0, c, ldc, false)
	}
	return g.product(s, gemmKey{op: "matmul", t: t, ta: ta, tb: tb, m: m, n: n, k: k}, at, lt, blas)
}

// dense enqueues y = act(x·wᵀ + b) as one cuBLASLt product with the bias
// (and ReLU) in its epilogue, or as cuBLAS's GEMM into y and the bias
// kernel over y in place, which computes the same (rounding y once more in
// bf16): as the policy says, and where cuBLASLt has no algorithm, the
// latter.
func (g *GPU) dense(s *cu.Stream, at gpuStep, op graph.Dense, dt graph.DType, xs, ws graph.Shape, in []cu.DevicePtr, y cu.DevicePtr) error {
	rows, k := matrix(xs)
	n := ws[0]
	t, err := gemmType(dt)
	if err != nil {
		return err
	}
	relu := op.Act == "relu"
	blas := func() error {
		if err := g.blas.Gemm(s, t, false, true, rows, n, k, 1, in[0], k, in[1], k, 0, y, n); err != nil {
			return err
		}
		if !relu {
			return g.k.BiasAdd(s, dt, y, in[2], y, rows, n, 1)
		}
		return g.k.BiasAct(s, dt, cpu.ActReLU, y, in[2], y, rows, n, 1)
	}
	lt := func(tune bool) (cu.Tuning, error) {
		if tune {
			return g.lt.TuneMatmulBias(s, tuneReps, t, false, true, rows, n, k, in[0], k, in[1], k, in[2], y, n, relu)
		}
		return cu.Tuning{}, g.lt.MatmulBias(s, t, false, true, rows, n, k, in[0], k, in[1], k, in[2], y, n, relu)
	}
	return g.product(s, gemmKey{op: "dense", t: t, ta: false, tb: true, m: rows, n: n, k: k, relu: relu}, at, lt, blas)
}

// denseGrad enqueues dw = dzᵀ·x and db = dz summed over its rows as one
// cuBLASLt product with the bias gradient in its epilogue, or as cuBLAS's
// GEMM and the BiasGrad kernel: as the policy says, and where cuBLASLt has
// no algorithm, the latter.
func (g *GPU) denseGrad(s *cu.Stream, at gpuStep, dt graph.DType, dzs, xs graph.Shape, in, out []cu.DevicePtr, work cu.DevicePtr) error {
	rows, n := matrix(dzs)
	_, k := matrix(xs)
	t, err := gemmType(dt)
	if err != nil {
		return err
	}
	blas := func() error {
		if err := g.blas.Gemm(s, t, true, false, n, k, rows, 1, in[0], n, in[1], k, 0, out[0], k); err != nil {
			return err
		}
		return g.k.BiasGrad(s, dt, in[0], out[1], work, rows, n, 1)
	}
	lt := func(tune bool) (cu.Tuning, error) {
		if tune {
			return g.lt.TuneMatmulBiasGrad(s, tuneReps, t, true, false, n, k, rows, in[0], n, in[1], k, out[0], k, out[1])
		}
		return cu.Tuning{}, g.lt.MatmulBiasGrad(s, t, true, false, n, k, rows, in[0], n, in[1], k, out[0], k, out[1])
	}
	return g.product(s, gemmKey{op: "dense_grad", t: t, ta: true, tb: false, m: n, n: k, k: rows}, at, lt, blas)
}
