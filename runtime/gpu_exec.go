package runtime

import (
	"fmt"
	"unsafe"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/kernels/cpu"
	"github.com/flowkit/flowkit/plans"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/trace"
	"github.com/flowkit/flowkit/units"
)

// issue enqueues firing f of iteration it on its GPU stream, after the
// waits its edges from other GPU streams need. Edges from CPU firings are
// already satisfied: the caller waited for them to finish.
func (x *run) issue(f, it int) error {
	r := x.r
	g := r.gpu
	home := r.streamOf(f)
	s := g.streams[home]
	k := it % g.ring
	if it >= g.ring {
		if err := x.harvest(f, it-g.ring); err != nil {
			return err
		}
	}
	for _, e := range r.edges[f] {
		need := it - e.Delta
		if need < 0 || !r.onGPU(e.From) || r.streamOf(e.From) == home {
			continue
		}
		if err := s.Wait(g.end[e.From][need%g.ring]); err != nil {
			return err
		}
	}
	if err := g.start[f][k].Record(s); err != nil {
		return err
	}
	if err := r.enqueue(s, f, it, g.iters+cu.DevicePtr(8*it), k, x.feed); err != nil {
		return err
	}
	return g.end[f][k].Record(s)
}

// harvest waits for GPU firing f of iteration it to finish and records
// its event and, for a loss, its loss.
func (x *run) harvest(f, it int) error {
	g := x.r.gpu
	k := it % g.ring
	if err := g.end[f][k].Synchronize(); err != nil {
		return err
	}
	start, err := g.eventTime(g.start[f][k])
	if err != nil {
		return err
	}
	end, err := g.eventTime(g.end[f][k])
	if err != nil {
		return err
	}
	fi := x.r.p.Firings[f]
	loss, isLoss := 0.0, g.lossIdx[f] >= 0
	if isLoss {
		var v float32
		dev := x.r.p.Streams[x.r.streamOf(f)].Device
		off := cu.DevicePtr(4 * (((x.r.iteration+it)%lossCap)*g.nloss + g.lossIdx[f]))
		if err := copyBack(g.host[dev], unsafe.Pointer(&v), g.lossHist+off, 4); err != nil {
			return err
		}
		loss = float64(v) / float64(x.r.p.TotalMicros())
	}
	x.mu.Lock()
	x.events = append(x.events, trace.Event{Task: int32(fi.Task), Iter: int32(it), Micro: int32(fi.Micro), Start: start, End: end})
	mean, report := 0.0, false
	if isLoss {
		mean, report = x.addLoss(it, loss)
	}
	x.mu.Unlock()
	if report {
		x.r.Progress(it, mean)
	}
	return nil
}

// enqueue puts firing f's work for iteration it on s. Iteration-dependent
// kernels read the iteration from device memory at iter; k is the ring
// slot of host staging buffers.
func (r *PlanRunner) enqueue(s *cu.Stream, f, it int, iter cu.DevicePtr, k int, feed Feeder) error {
	p := r.p
	g := r.gpu
	fi := p.Firings[f]
	t := &p.Tasks[fi.Task]
	devIdx := p.Streams[t.Streams[0]].Device
	dev := g.devs[devIdx]
	reads := make([]cu.DevicePtr, len(t.Reads))
	for i, u := range t.Reads {
		v, err := p.ReadVersion(u, it, fi.Micro)
		if err != nil {
			return err
		}
		reads[i] = r.ptr(u.Reg, p.Slot(u.Reg, v))
	}
	writes := make([]cu.DevicePtr, len(t.Writes))
	for i, w := range t.Writes {
		if p.Registers[w].Device == devIdx {
			writes[i] = r.ptr(w, p.Slot(w, p.WriteVersion(w, t.ID, it, fi.Micro)))
		}
	}
	switch t.Kind {
	case plans.Compute:
		op := r.ops[t.ID]
		out := writes
		if _, ok := op.(graph.Mutator); ok {
			out = nil
		}
		at := gpuStep{iter: iter, micro: p.FirstMicro(t.Replica) + fi.Micro, micros: p.TotalMicros(), gemm: r.GEMM, capturing: g.capturing, step: r.iteration + it + 1, rates: g.rates}
		if err := dev.launch(s, op, r.in[t.ID], r.out[t.ID], at, reads, out, g.work[devIdx]); err != nil {
			return err
		}
		if j := g.lossIdx[f]; j >= 0 {
			return dev.k.LossLog(s, out[0], g.lossHist, iter, j, g.nloss, lossCap)
		}
	case plans.Input:
		return r.enqueueInput(s, f, it, iter, k, feed, writes[0])
	case plans.Transfer:
		dst := t.Writes[0]
		n := p.Registers[dst].Spec.Bytes()
		if g.devs[p.Registers[dst].Device] != nil {
			return s.CopyDtoD(r.ptr(dst, p.Slot(dst, p.WriteVersion(dst, t.ID, it, fi.Micro))), reads[0], n)
		}
		b := r.slot(dst, p.Slot(dst, p.WriteVersion(dst, t.ID, it, fi.Micro)))
		host := unsafe.Pointer(unsafe.SliceData(b.F))
		if b.I != nil {
			host = unsafe.Pointer(unsafe.SliceData(b.I))
		}
		return s.CopyDtoH(host, reads[0], n)
	case plans.Pack, plans.Unpack:
		bucket, grads := reads[0], writes
		if t.Kind == plans.Pack {
			bucket, grads = writes[0], reads
		}
		size := p.Registers[t.Writes[0]].Spec.DType.Size() // a bucket's and its gradients'
		for _, pc := range p.BucketPieces(t) {
			g := grads[pc.Grad] + cu.DevicePtr(units.Bytes(pc.From)*size)
			b := bucket + cu.DevicePtr(units.Bytes(pc.At)*size)
			n := units.Bytes(pc.N) * size
			dst, src := b, g
			if t.Kind == plans.Unpack {
				dst, src = g, b
			}
			if err := s.CopyDtoD(dst, src, n); err != nil {
				return err
			}
		}
	case plans.Accumulate:
		spec := p.Registers[t.Writes[0]].Spec
		scale := 1 / float32(p.Fires(t.ID))
		if fi.Micro == 0 {
			return dev.k.Scale(s, spec.DType, scale, reads[0], writes[0], spec.Shape.NumElements())
		}
		return dev.k.Axpy(s, spec.DType, scale, reads[0], writes[0], spec.Shape.NumElements())
	default:
		return fmt.Errorf("runtime: %s task %s on a GPU is not supported", t.Kind, t.Name)
	}
	return nil
}

// enqueueInput loads firing f's slice of the global batch into dst: from a
// synthetic feeder's pool already on the GPU by a gather kernel (nothing
// crosses PCIe, as in a benchmark whose data is resident), or from any
// other feeder through pinned staging memory and a copy.
func (r *PlanRunner) enqueueInput(s *cu.Stream, f, it int, iter cu.DevicePtr, k int, feed Feeder, dst cu.DevicePtr) error {
	p := r.p
	g := r.gpu
	fi := p.Firings[f]
	t := &p.Tasks[fi.Task]
	dev := g.devs[p.Streams[t.Streams[0]].Device]
	spec := p.Registers[t.Writes[0]].Spec
	from := t.Offset + fi.Micro*p.MicroBatch
	n := p.MicroBatch
	if sf, ok := feed.(*SyntheticFeeder); ok {
		pool, err := g.devicePoolOf(sf)
		if err != nil {
			return err
		}
		switch {
		case r.tokens[t.ID]:
			if pool.tokens == 0 {
				return fmt.Errorf("runtime: the plan's input is token ids; the synthetic feeder was made for %d float values per sample", pool.rowLen)
			}
			return dev.k.GatherInts(s, dst, pool.tokens, iter, pool.batch, from, n, pool.rowLen, pool.rows)
		case spec.DType == graph.I32:
			return dev.k.GatherInts(s, dst, pool.labels, iter, pool.batch, from, n, pool.perLabels, pool.rows)
		case pool.images == 0:
			return fmt.Errorf("runtime: the plan's input is %v; the synthetic feeder was made for token ids", spec)
		}
		return dev.k.GatherRows(s, spec.DType, dst, pool.images, iter, pool.batch, from, n, pool.rowLen, pool.rows)
	}
	// Host-fed: the staging buffer of ring slot k is free, since this
	// firing's use of it ring iterations ago has been harvested.
	for len(g.staging[f]) <= k {
		h, err := dev.ctx.MallocHost(units.Bytes(4 * spec.Shape.NumElements()))
		if err != nil {
			return err
		}
		g.staging[f] = append(g.staging[f], h)
	}
	h := g.staging[f][k]
	if err := r.fill(h, f, it, feed); err != nil {
		return err
	}
	return s.CopyHtoD(dst, h.Ptr, spec.Bytes())
}

// toGPU copies a CPU register slot into a GPU register (a transfer whose
// home is a CPU stream), synchronously.
func (r *PlanRunner) toGPU(dst, k int, src Buffer) error {
	rg := &r.p.Registers[dst]
	s := r.gpu.host[rg.Device]
	ptr := unsafe.Pointer(unsafe.SliceData(src.F))
	if src.I != nil {
		ptr = unsafe.Pointer(unsafe.SliceData(src.I))
	}
	if err := s.CopyHtoD(r.ptr(dst, k), ptr, rg.Spec.Bytes()); err != nil {
		return err
	}
	return s.Synchronize()
}

// allReduceHost runs all-reduce task t over a GPU and CPU devices on the
// host: the GPU's buffers are copied to their page-locked mirrors, all are
// reduced as on CPU devices (in the same order, so every replica gets the
// same bits) and the result is copied back. Its caller has waited for the
// GPU firings that produced the buffers; the copies back have finished
// when it returns, before any GPU firing that reads them is enqueued.
// writes holds the CPU devices' buffers (zero for the GPU's).
func (r *PlanRunner) allReduceHost(t *plans.Task, it, micro int, writes []Buffer) error {
	p := r.p
	g := r.gpu
	bufs := make([]Buffer, len(writes))
	var pool *cpu.Pool
	var used []*cu.Stream
	for i, w := range t.Writes {
		rg := &p.Registers[w]
		if cd := r.devs[rg.Device]; cd != nil {
			bufs[i] = writes[i]
			if pool == nil {
				pool = cd.pool
			}
			continue
		}
		h := g.mirror[w]
		bufs[i] = Buffer{F: h.Float32s()[:rg.Spec.Shape.NumElements()]}
		s := g.host[rg.Device]
		if err := s.CopyDtoH(h.Ptr, r.ptr(w, p.Slot(w, p.WriteVersion(w, t.ID, it, micro))), rg.Spec.Bytes()); err != nil {
			return err
		}
		used = append(used, s)
	}
	if pool == nil {
		return fmt.Errorf("runtime: all-reduce %s has no CPU device to reduce on", t.Name)
	}
	sync := func() error {
		for _, s := range used {
			if err := s.Synchronize(); err != nil {
				return err
			}
		}
		return nil
	}
	if err := sync(); err != nil {
		return err
	}
	allReduce(pool, bufs, p.AllReduceWeights(t))
	for _, w := range t.Writes {
		rg := &p.Registers[w]
		if r.devs[rg.Device] != nil {
			continue
		}
		dst := r.ptr(w, p.Slot(w, p.WriteVersion(w, t.ID, it, micro)))
		if err := g.host[rg.Device].CopyHtoD(dst, g.mirror[w].Ptr, rg.Spec.Bytes()); err != nil {
			return err
		}
	}
	return sync()
}
