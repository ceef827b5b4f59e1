package cuda

import (
	"errors"
	"fmt"
	"testing"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/kernels/cpu"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/units"
)

// recorder is a backend that runs nothing: it checks each launch against
// the PTX (block size within the kernel's __launch_bounds__, grid within
// the hardware's limits, every pointer inside an allocation) and each GEMM
// against its operands' allocations, and records which elements the GEMMs
// write. It lets every wrapper run here, without a GPU.
type recorder struct {
	entries map[string]map[string]*entry
	regions []region
	written map[cu.DevicePtr]int // element address → writes, by GEMMs
	calls   []string
	blocks  map[string]int // kernel name → threads a block, as last launched
}

type region struct {
	name string
	base cu.DevicePtr
	size units.Bytes
}

func newRecorder(t *testing.T) *recorder {
	return &recorder{entries: embeddedEntries(t), written: map[cu.DevicePtr]int{}, blocks: map[string]int{}}
}

// kernels returns Kernels running on r, as on a GPU of 132 multiprocessors.
func (r *recorder) kernels() *Kernels { return &Kernels{be: r, maxBlocks: maxBlocks(132)} }

// alloc returns a fake allocation of n bytes, 256-aligned like cuMemAlloc's,
// far from the others so that overruns land outside every region.
func (r *recorder) alloc(name string, n units.Bytes) cu.DevicePtr {
	base := cu.DevicePtr(1<<40 + len(r.regions)<<32)
	r.regions = append(r.regions, region{name, base, n})
	return base
}

// region returns the allocation holding bytes [p, p+n), if one does.
func (r *recorder) region(p cu.DevicePtr, n units.Bytes) (region, bool) {
	for _, g := range r.regions {
		if p >= g.base && p+cu.DevicePtr(n) <= g.base+cu.DevicePtr(g.size) {
			return g, true
		}
	}
	return region{}, false
}

func (r *recorder) launch(_ *cu.Stream, k *kernel, grid, block cu.Dim3, args []any) error {
	r.calls = append(r.calls, k.name)
	e := r.entries[k.module][k.name]
	threads := int(block.X * block.Y * block.Z)
	r.blocks[k.name] = threads
	switch {
	case e == nil:
		return fmt.Errorf("%s: not in %s.ptx", k.name, k.module)
	case threads < 1 || threads > e.maxThreads:
		return fmt.Errorf("%s: block %v: %d threads, __launch_bounds__ allows %d", k.name, block, threads, e.maxThreads)
	case threads%32 != 0:
		return fmt.Errorf("%s: block %v is not whole warps", k.name, block)
	case grid.X < 1 || grid.Y < 1 || grid.Z < 1 || grid.X > 1<<31-1 || grid.Y > 65535 || grid.Z > 65535:
		return fmt.Errorf("%s: grid %v out of range", k.name, grid)
	}
	for i, a := range args {
		if p, ok := a.(cu.DevicePtr); ok && p != 0 {
			if _, ok := r.region(p, 1); !ok {
				return fmt.Errorf("%s: argument %d = %#x points into no allocation", k.name, i, uintptr(p))
			}
		}
	}
	return nil
}

func (r *recorder) copy(_ *cu.Stream, dst, src cu.DevicePtr, n units.Bytes) error {
	r.calls = append(r.calls, "copy")
	if _, ok := r.region(dst, n); !ok {
		return fmt.Errorf("copy: destination [%#x, +%d) outside every allocation", uintptr(dst), n)
	}
	if _, ok := r.region(src, n); !ok {
		return fmt.Errorf("copy: source [%#x, +%d) outside every allocation", uintptr(src), n)
	}
	return nil
}

// each calls f on the address of every element of a batch of row-major
// matrices of rows×cols, rows ld apart, stride elements between them.
func each(p cu.DevicePtr, es, rows, cols, ld int, stride int64, batch int, f func(cu.DevicePtr) error) error {
	for b := range batch {
		for i := range rows {
			for j := range cols {
				if err := f(p + cu.DevicePtr(int64(es)*(int64(b)*stride+int64(i*ld+j)))); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (r *recorder) gemm(_ *cu.Stream, g gemm) error {
	r.calls = append(r.calls, "gemm")
	es := 4
	if g.t == cu.GemmBF16 {
		es = 2
	}
	if g.batch == 1 {
		g.sa, g.sb, g.sc = 0, 0, 0
	}
	inside := func(what string) func(cu.DevicePtr) error {
		return func(p cu.DevicePtr) error {
			if _, ok := r.region(p, units.Bytes(es)); !ok {
				return fmt.Errorf("gemm %+v: %s element %#x outside every allocation", g, what, uintptr(p))
			}
			return nil
		}
	}
	ar, ac := g.m, g.k
	if g.transA {
		ar, ac = ac, ar
	}
	br, bc := g.k, g.n
	if g.transB {
		br, bc = bc, br
	}
	switch {
	case ac > g.lda || bc > g.ldb || g.n > g.ldc:
		return fmt.Errorf("gemm %+v: a leading dimension is shorter than its rows", g)
	case g.batch < 1:
		return fmt.Errorf("gemm %+v: batch < 1", g)
	}
	if err := each(g.a, es, ar, ac, g.lda, g.sa, g.batch, inside("A")); err != nil {
		return err
	}
	if err := each(g.b, es, br, bc, g.ldb, g.sb, g.batch, inside("B")); err != nil {
		return err
	}
	seen := map[cu.DevicePtr]bool{}
	return each(g.c, es, g.m, g.n, g.ldc, g.sc, g.batch, func(p cu.DevicePtr) error {
		if err := inside("C")(p); err != nil {
			return err
		}
		if seen[p] {
			return fmt.Errorf("gemm %+v: the batch writes C element %#x twice", g, uintptr(p))
		}
		seen[p] = true
		r.written[p]++
		return nil
	})
}

// coversOnce reports unless the GEMMs wrote every element of p's
// allocation (of element size es) exactly once.
func (r *recorder) coversOnce(p cu.DevicePtr, es int) error {
	g, ok := r.region(p, 1)
	if !ok {
		return errors.New("no such allocation")
	}
	for a := g.base; a < g.base+cu.DevicePtr(g.size); a += cu.DevicePtr(es) {
		if n := r.written[a]; n != 1 {
			return fmt.Errorf("%s element %d written %d times", g.name, (a-g.base)/cu.DevicePtr(es), n)
		}
	}
	return nil
}

// TestWrappers calls every wrapper, for each dtype it takes, on sizes that
// exercise each of its paths (vector and scalar, warp and block rows, one
// and several chunks), with the recording backend.
func TestWrappers(t *testing.T) {
	type call func(k *Kernels, r *recorder, dt graph.DType) error
	buf := func(r *recorder, dt graph.DType, n int) cu.DevicePtr {
		return r.alloc(fmt.Sprintf("buf%d", len(r.regions)), dt.Size()*units.Bytes(max(n, 1)))
	}
	i32 := func(r *recorder, n int) cu.DevicePtr { return r.alloc("ids", 4*units.Bytes(max(n, 1))) }
	var cases []struct {
		name string
		f    call
	}
	add := func(name string, f call) {
		cases = append(cases, struct {
			name string
			f    call
		}{name, f})
	}
	for _, n := range []int{1, 7, 1000, 1 << 20} {
		add(fmt.Sprintf("elementwise/%d", n), func(k *Kernels, r *recorder, dt graph.DType) error {
			x, y, z := buf(r, dt, n), buf(r, dt, n), buf(r, dt, n)
			f32, b16 := buf(r, graph.F32, n), buf(r, graph.BF16, n)
			iter := r.alloc("iter", 8)
			return errors.Join(
				k.ReLU(nil, dt, x, y, n), k.ReLUBackward(nil, dt, x, y, z, n),
				k.GELU(nil, dt, x, y, n), k.GELUBackward(nil, dt, x, y, z, n),
				k.SwiGLU(nil, dt, x, y, z, n), k.SwiGLUBackward(nil, dt, x, y, z, x, y, n),
				k.Add(nil, dt, x, y, z, n), k.Mul(nil, dt, x, y, z, n),
				k.Scale(nil, dt, 2, x, y, n), k.Axpy(nil, dt, 2, x, y, n),
				k.Copy(nil, dt, x, y, n), k.Fill(nil, dt, 3, y, n),
				k.Cast(nil, graph.F32, graph.BF16, f32, b16, n), k.Cast(nil, graph.BF16, graph.F32, b16, f32, n),
				k.Cast(nil, dt, dt, x, y, n),
				k.Dropout(nil, dt, x, y, 0.1, 7, 100, iter, uint64(n), n),
				k.Dropout(nil, dt, x, y, 0.1, 7, 100, 0, 0, n),
				k.Dropout(nil, dt, x, y, 0, 7, 0, 0, 0, n), k.Dropout(nil, dt, x, y, 1, 7, 0, 0, 0, n),
				k.DropoutBackward(nil, dt, x, y, 0.5, 7, 0, iter, 0, n),
				k.SGDUpdate(nil, dt, x, y, Rate{LR: 0.1}, 0.01, 0, n),
				k.SGDUpdate(nil, dt, x, y, Rate{Table: r.alloc("rates", 4*5), Len: 5}, 0.01, iter, n),
				k.MomentumUpdate(nil, dt, x, y, z, Rate{LR: 0.1}, 0.9, 0.01, 0, n),
				k.MomentumUpdate(nil, dt, x, y, z, Rate{Table: r.alloc("rates", 4*5), Len: 5}, 0.9, 0.01, iter, n),
				k.AdamUpdate(nil, dt, x, y, z, buf(r, dt, n), Rate{LR: 0.1}, Adam{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}, iter, n),
				k.AdamUpdate(nil, dt, x, y, z, buf(r, dt, n), Rate{Table: r.alloc("rates", 4*5), Len: 5}, Adam{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Decoupled: true}, iter, n),
				k.MeanSquare(nil, dt, x, r.alloc("loss", 4), r.alloc("work", MeanSquareWorkspace(n)), n),
				k.MeanSquareBackward(nil, dt, x, r.alloc("dloss", 4), y, n),
			)
		})
	}
	for _, sh := range [][3]int{{1, 1, 1}, {3, 5, 7}, {2, 64, 1}, {4096, 4096, 1}, {16, 8, 1024}, {100, 3, 1}, {8, 2, 5000}} {
		outer, c, inner := sh[0], sh[1], sh[2]
		add(fmt.Sprintf("axis/%v", sh), func(k *Kernels, r *recorder, dt graph.DType) error {
			x, b, y, dx := buf(r, dt, outer*c*inner), buf(r, dt, c), buf(r, dt, outer*c*inner), buf(r, dt, outer*c*inner)
			red := buf(r, dt, outer*inner)
			return errors.Join(
				k.BiasAdd(nil, dt, x, b, y, outer, c, inner),
				k.BiasAct(nil, dt, cpu.ActReLU, x, b, y, outer, c, inner),
				k.BiasAct(nil, dt, cpu.ActGELU, x, b, y, outer, c, inner),
				k.BiasActBackward(nil, dt, cpu.ActReLU, x, b, y, dx, outer, c, inner),
				k.BiasActBackward(nil, dt, cpu.ActGELU, x, b, y, dx, outer, c, inner),
				k.BiasGrad(nil, dt, x, b, r.alloc("work", BiasGradWorkspace(outer, c, inner)), outer, c, inner),
				k.ReduceSum(nil, dt, x, red, outer, c, inner),
				k.BroadcastAxis(nil, dt, red, y, outer, c, inner),
			)
		})
	}
	for _, sh := range [][3]int{{1, 1, 1}, {0, 3, 5}, {3, 5, 0}, {2, 3, 5}, {16, 3, 1}, {4, 2, 2100}, {256, 64, 3136}, {256, 2048, 49}, {1, 1, 1 << 24}} {
		n, c, hw := sh[0], sh[1], sh[2]
		add(fmt.Sprintf("batchnorm/%v", sh), func(k *Kernels, r *recorder, dt graph.DType) error {
			x, y, dy := buf(r, dt, n*c*hw), buf(r, dt, n*c*hw), buf(r, dt, n*c*hw)
			g, b := buf(r, dt, c), buf(r, dt, c)
			return errors.Join(
				k.BatchNorm(nil, dt, x, g, b, y, r.alloc("work", max(BatchNormForwardWorkspace(n, c, hw), 1)), n, c, hw, 1e-5),
				k.BatchNormBackward(nil, dt, x, g, dy, y, buf(r, dt, c), buf(r, dt, c),
					r.alloc("work", max(BatchNormWorkspace(n, c, hw), 1)), n, c, hw, 1e-5),
			)
		})
	}
	for _, sh := range [][2]int{{1, 1}, {5, 10}, {300, 768}, {96, 1024}, {7, 1025}, {3, 50257}} {
		rows, cols := sh[0], sh[1]
		add(fmt.Sprintf("rows/%v", sh), func(k *Kernels, r *recorder, dt graph.DType) error {
			x, y, z := buf(r, dt, rows*cols), buf(r, dt, rows*cols), buf(r, dt, rows*cols)
			g, b := buf(r, dt, cols), buf(r, dt, cols)
			mean, rstd := r.alloc("mean", units.Bytes(4*rows)), r.alloc("rstd", units.Bytes(4*rows))
			err := errors.Join(
				k.Softmax(nil, dt, x, y, rows, cols), k.SoftmaxBackward(nil, dt, x, y, z, rows, cols),
				k.LayerNorm(nil, dt, x, g, b, y, mean, rstd, rows, cols, 1e-5),
				k.LayerNormBackward(nil, dt, x, g, y, mean, rstd, z, buf(r, dt, cols), buf(r, dt, cols),
					r.alloc("work", LayerNormWorkspace(rows, cols)), rows, cols),
				k.RMSNorm(nil, dt, x, g, y, rstd, rows, cols, 1e-5),
				k.RMSNormBackward(nil, dt, x, g, y, rstd, z, buf(r, dt, cols),
					r.alloc("work", RMSNormWorkspace(rows, cols)), rows, cols),
			)
			labels, loss, dloss := i32(r, rows), r.alloc("loss", 4), r.alloc("dloss", 4)
			return errors.Join(err, k.SoftmaxCrossEntropy(nil, dt, x, labels, loss, r.alloc("work", SoftmaxCrossEntropyWorkspace(rows)), rows, cols),
				k.SoftmaxCrossEntropyBackward(nil, dt, x, labels, dloss, y, rows, cols))
		})
	}
	for _, sh := range [][3]int{{1, 1, 1}, {10, 7, 3}, {8192, 50257, 768}, {4, 3, 1000}} {
		n, v, d := sh[0], sh[1], sh[2]
		add(fmt.Sprintf("embedding/%v", sh), func(k *Kernels, r *recorder, dt graph.DType) error {
			table, ids, y := buf(r, dt, v*d), i32(r, n), buf(r, dt, n*d)
			return errors.Join(k.Embedding(nil, dt, table, ids, y, v, d, n), k.EmbeddingBackward(nil, dt, ids, y, table, v, d, n))
		})
	}
	add("feed", func(k *Kernels, r *recorder, dt graph.DType) error {
		iter, pool, labels := r.alloc("iter", 8), r.alloc("pool", 4*1000*784), i32(r, 1000)
		return errors.Join(k.IterAdvance(nil, iter), k.LossLog(nil, r.alloc("loss", 4), r.alloc("hist", 4*1024*3), iter, 2, 3, 1024),
			k.GatherInts(nil, i32(r, 64), labels, iter, 128, 64, 64, 1, 1000),
			k.GatherInts(nil, i32(r, 64*1024), i32(r, 1000*1024), iter, 128, 64, 64, 1024, 1000),
			k.GatherRows(nil, dt, buf(r, dt, 64*784), pool, iter, 128, 64, 64, 784, 1000))
	})
	for _, a := range [][5]int{{1, 1, 1, 1, 0}, {2, 5, 2, 6, 1}, {3, 17, 3, 12, 0}, {1, 64, 12, 768, 1}} {
		batch, seq, heads, hid, causal := a[0], a[1], a[2], a[3], a[4] == 1
		add(fmt.Sprintf("attention/%v", a), func(k *Kernels, r *recorder, dt graph.DType) error {
			t := batch * seq
			qkv, out, probs := buf(r, dt, t*3*hid), buf(r, dt, t*hid), buf(r, dt, batch*heads*seq*seq)
			if err := k.AttentionForward(nil, dt, qkv, out, probs, batch, seq, heads, heads, hid, causal); err != nil {
				return err
			}
			if err := errors.Join(r.coversOnce(out, int(dt.Size())), r.coversOnce(probs, int(dt.Size()))); err != nil {
				return fmt.Errorf("forward: %w", err)
			}
			dqkv := buf(r, dt, t*3*hid)
			if err := k.AttentionBackward(nil, dt, qkv, probs, out, dqkv, r.alloc("work", AttentionWorkspace(dt, seq, heads)),
				batch, seq, heads, heads, hid, causal); err != nil {
				return err
			}
			if err := r.coversOnce(dqkv, int(dt.Size())); err != nil {
				return fmt.Errorf("backward: %w", err)
			}
			return nil
		})
	}
	// Grouped-query attention: the forward pass writes every element once
	// (the backward pass adds a group's key/value gradients).
	for _, a := range [][5]int{{2, 5, 4, 8, 2}, {1, 17, 6, 12, 1}} {
		batch, seq, heads, hid, kv := a[0], a[1], a[2], a[3], a[4]
		add(fmt.Sprintf("gqa/%v", a), func(k *Kernels, r *recorder, dt graph.DType) error {
			t := batch * seq
			qkv, out, probs := buf(r, dt, t*(hid+2*kv*hid/heads)), buf(r, dt, t*hid), buf(r, dt, batch*heads*seq*seq)
			if err := k.AttentionForward(nil, dt, qkv, out, probs, batch, seq, heads, kv, hid, true); err != nil {
				return err
			}
			if err := errors.Join(r.coversOnce(out, int(dt.Size())), r.coversOnce(probs, int(dt.Size()))); err != nil {
				return fmt.Errorf("forward: %w", err)
			}
			return k.AttentionBackward(nil, dt, qkv, probs, out, buf(r, dt, t*(hid+2*kv*hid/heads)),
				r.alloc("work", AttentionWorkspace(dt, seq, heads)), batch, seq, heads, kv, hid, true)
		})
	}
	for _, a := range [][5]int{{1, 1, 1, 1, 2}, {12, 4, 4, 2, 8}, {8192, 8192, 32, 8, 128}} {
		rows, seq, heads, kv, d := a[0], a[1], a[2], a[3], a[4]
		add(fmt.Sprintf("rope/%v", a), func(k *Kernels, r *recorder, dt graph.DType) error {
			n := rows * (heads + 2*kv) * d
			x, y := buf(r, dt, n), buf(r, dt, n)
			return errors.Join(k.RoPEForward(nil, dt, x, y, rows, seq, heads, kv, d, 5e5), k.RoPEBackward(nil, dt, y, x, rows, seq, heads, kv, d, 1e4))
		})
	}
	convs := []cpu.ConvShape{
		{N: 2, C: 3, H: 8, W: 7, K: 4, R: 3, S: 3, StrideH: 1, StrideW: 1, PadH: 1, PadW: 1},
		{N: 1, C: 2, H: 9, W: 9, K: 3, R: 3, S: 2, StrideH: 2, StrideW: 3, PadH: 0, PadW: 1},
		{N: 3, C: 5, H: 4, W: 4, K: 6, R: 1, S: 1, StrideH: 1, StrideW: 1},
		{N: 2, C: 4, H: 6, W: 6, K: 2, R: 5, S: 5, StrideH: 1, StrideW: 1, PadH: 2, PadW: 2},
	}
	for _, sh := range convs {
		add(fmt.Sprintf("conv/%+v", sh), func(k *Kernels, r *recorder, dt graph.DType) error {
			x := buf(r, dt, sh.N*sh.C*sh.H*sh.W)
			w := buf(r, dt, sh.K*sh.C*sh.R*sh.S)
			y := buf(r, dt, sh.N*sh.K*sh.OutH()*sh.OutW())
			dx := buf(r, dt, sh.N*sh.C*sh.H*sh.W)
			dw := buf(r, dt, sh.K*sh.C*sh.R*sh.S)
			work := r.alloc("work", ConvWorkspace(sh, dt))
			if err := k.Conv2DForward(nil, dt, sh, x, w, y, work); err != nil {
				return err
			}
			es := int(dt.Size())
			if err := r.coversOnce(y, es); err != nil {
				return fmt.Errorf("forward: %w", err)
			}
			if err := k.Conv2DBackwardFilter(nil, dt, sh, x, y, dw, work); err != nil {
				return err
			}
			if err := r.coversOnce(dw, es); err != nil {
				return fmt.Errorf("filter: %w", err)
			}
			if err := k.Conv2DBackwardData(nil, dt, sh, y, w, dx, work); err != nil {
				return err
			}
			if pointwise(sh) {
				return r.coversOnce(dx, es)
			}
			return nil
		})
	}
	pools := []cpu.PoolShape{
		{N: 2, C: 3, H: 8, W: 8, KH: 2, KW: 2, StrideH: 2, StrideW: 2},
		{N: 1, C: 2, H: 7, W: 9, KH: 3, KW: 3, StrideH: 2, StrideW: 2, PadH: 1, PadW: 1},
	}
	for _, sh := range pools {
		add(fmt.Sprintf("pool/%+v", sh), func(k *Kernels, r *recorder, dt graph.DType) error {
			x, y := buf(r, dt, sh.N*sh.C*sh.H*sh.W), buf(r, dt, sh.N*sh.C*sh.OutH()*sh.OutW())
			return errors.Join(k.MaxPool2DForward(nil, dt, sh, x, y), k.MaxPool2DBackward(nil, dt, sh, x, y, buf(r, dt, sh.N*sh.C*sh.H*sh.W)))
		})
	}
	for _, c := range cases {
		for _, dt := range []graph.DType{graph.F32, graph.BF16} {
			t.Run(c.name+"/"+dt.String(), func(t *testing.T) {
				r := newRecorder(t)
				if err := c.f(r.kernels(), r, dt); err != nil {
					t.Error(err)
				}
			})
		}
	}
}

// TestWrapperErrors checks that bad arguments are errors, not panics or
// launches.
func TestWrapperErrors(t *testing.T) {
	r := newRecorder(t)
	k := r.kernels()
	x, y := r.alloc("x", 1024), r.alloc("y", 1024)
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"dtype", k.ReLU(nil, graph.F16, x, y, 4), ErrDType},
		{"i32 dtype", k.Add(nil, graph.I32, x, x, y, 4), ErrDType},
		{"negative n", k.ReLU(nil, graph.F32, x, y, -1), ErrArg},
		{"nil pointer", k.ReLU(nil, graph.F32, 0, y, 4), ErrArg},
		{"cast", k.Cast(nil, graph.F32, graph.I32, x, y, 4), ErrDType},
		{"too large", k.BiasAdd(nil, graph.F32, x, y, y, 1<<16, 1<<16, 1), ErrArg},
		{"activation", k.BiasAct(nil, graph.F32, 0, x, y, y, 1, 4, 1), ErrArg},
		{"activation gradient", k.BiasActBackward(nil, graph.BF16, 3, x, y, y, y, 1, 4, 1), ErrArg},
		{"bias act dtype", k.BiasAct(nil, graph.F16, cpu.ActGELU, x, y, y, 1, 4, 1), ErrDType},
		{"bias act too large", k.BiasActBackward(nil, graph.F32, cpu.ActReLU, x, y, y, y, 1<<16, 1<<16, 1), ErrArg},
		{"bias act nil", k.BiasActBackward(nil, graph.F32, cpu.ActReLU, x, y, 0, y, 1, 4, 1), ErrArg},
		{"heads", k.AttentionForward(nil, graph.F32, x, y, y, 1, 4, 3, 3, 8, false), ErrArg},
		{"kv heads", k.AttentionForward(nil, graph.F32, x, y, y, 1, 4, 4, 3, 8, false), ErrArg},
		{"rope d", k.RoPEForward(nil, graph.F32, x, y, 4, 4, 2, 1, 3, 1e4), ErrArg},
		{"rope theta", k.RoPEForward(nil, graph.F32, x, y, 4, 4, 2, 1, 4, 0), ErrArg},
		{"rope rows", k.RoPEBackward(nil, graph.F32, x, y, 5, 4, 2, 1, 4, 1e4), ErrArg},
		{"swiglu n", k.SwiGLUBackward(nil, graph.F32, x, x, x, y, y, -1), ErrArg},
		{"conv shape", k.Conv2DForward(nil, graph.F32, cpu.ConvShape{N: 1, C: 1, H: 2, W: 2, K: 1, R: 3, S: 3, StrideH: 1, StrideW: 1}, x, y, y, y), ErrArg},
		{"pool shape", k.MaxPool2DForward(nil, graph.F32, cpu.PoolShape{N: 1, C: 1, H: 2, W: 2, KH: 2, KW: 2}, x, y), ErrArg},
		{"loss log", k.LossLog(nil, x, y, x, 3, 3, 10), ErrArg},
		{"mean square", k.MeanSquare(nil, graph.F32, x, y, y, -1), ErrArg},
		{"batch norm too large", k.BatchNorm(nil, graph.F32, x, y, y, y, y, 1<<16, 1<<10, 1<<6, 1e-5), ErrArg},
		{"batch norm nil work", k.BatchNormBackward(nil, graph.BF16, x, y, y, y, y, y, 0, 2, 3, 4, 1e-5), ErrArg},
		{"rate table without iter", k.SGDUpdate(nil, graph.F32, x, y, Rate{Table: x, Len: 4}, 0, 0, 4), ErrArg},
		{"empty rate table", k.MomentumUpdate(nil, graph.F32, x, y, y, Rate{Table: x}, 0.9, 0, x, 4), ErrArg},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: got %v, want an error wrapping %v", c.name, c.err, c.want)
		}
	}
	if len(r.calls) != 0 {
		t.Errorf("bad calls launched %v", r.calls)
	}
	if err := kReLU.f32.check([]any{x, y, 4}); err == nil {
		t.Error("an int argument for a long long parameter passed the check")
	}
}

// TestMix64 checks the host half of the dropout hash against kernels/cpu.
func TestMix64(t *testing.T) {
	for _, seed := range []uint64{0, 1, 42, 1 << 63} {
		for c := range uint64(1000) {
			h := mix64(mix64(seed) + c*0x9e3779b97f4a7c15)
			kept := float32(h>>40)*0x1p-24 >= 0.3
			if kept != cpu.DropoutMask(seed, c, 0.3) {
				t.Fatalf("seed %d counter %d: kept %v, cpu.DropoutMask says %v", seed, c, kept, !kept)
			}
		}
	}
}
