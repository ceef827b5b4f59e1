package cuda

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/flowkit/flowkit/graph"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/units"
)

// refLSE returns the log of each softmax row's normalizer of an attention,
// [batch, heads, seq].
func refLSE(qkv []float64, batch, seq, heads, kv, hid int, causal bool) []float64 {
	d := hid / heads
	ld, group := hid+2*kv*d, heads/kv
	lse := make([]float64, 0, batch*heads*seq)
	for b := range batch {
		for h := range heads {
			for i := range seq {
				n := seq
				if causal {
					n = i + 1
				}
				var sum float64
				for j := range n {
					var dot float64
					for c := range d {
						dot += qkv[(b*seq+i)*ld+h*d+c] * qkv[(b*seq+j)*ld+hid+h/group*d+c]
					}
					sum += math.Exp(dot / math.Sqrt(float64(d)))
				}
				lse = append(lse, math.Log(sum))
			}
		}
	}
	return lse
}

func TestFlashAttentionGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(17)
	// run checks one attention, with qkv and dout placed off elements past
	// an allocation's start: at 1, not 16-byte aligned, the tiles are
	// copied by plain loads rather than by cp.async or 16-byte vectors.
	run := func(t *testing.T, dt graph.DType, sh [5]int, causal bool, off int) {
		batch, seq, heads, hid, kv := sh[0], sh[1], sh[2], sh[3], sh[4]
		tt, width := batch*seq, hid+2*kv*(hid/heads)
		qkv, dout := randIn(rng, dt, tt*width, -1, 1), randIn(rng, dt, tt*hid, -1, 1)
		at := func(p cu.DevicePtr) cu.DevicePtr { return p + cu.DevicePtr(off)*cu.DevicePtr(dt.Size()) }
		pq := at(e.put(t, dt, append(make([]float32, off), qkv...)))
		po, pl := e.alloc(t, dt, tt*hid), e.alloc(t, graph.F32, batch*heads*seq)
		must(t, e.k.FlashAttentionForward(e.s, dt, pq, po, pl, batch, seq, heads, kv, hid, causal))
		wo, wp := refAttention(to64(qkv), batch, seq, heads, kv, hid, causal)
		check(t, "out", dt, e.get(t, dt, po, tt*hid), wo, compound)
		check(t, "lse", dt, e.get(t, graph.F32, pl, batch*heads*seq), refLSE(to64(qkv), batch, seq, heads, kv, hid, causal), compound)

		// The backward pass from the forward pass's own out and lse, as a
		// step runs it.
		pdo, pdq := at(e.put(t, dt, append(make([]float32, off), dout...))), e.alloc(t, dt, tt*width)
		work := e.alloc(t, graph.F32, int(FlashAttentionWorkspace(batch, seq, heads)/4))
		must(t, e.k.FlashAttentionBackward(e.s, dt, pq, po, pl, pdo, pdq, work, batch, seq, heads, kv, hid, causal))
		want := refAttentionBwd(to64(qkv), wp, to64(dout), batch, seq, heads, kv, hid, causal)
		check(t, "dqkv", dt, e.get(t, dt, pdq, len(want)), want, compound)
	}
	// [batch, seq, heads, hid, kv heads]: every head width an instance
	// takes (16, 32, 64, and 128 in bf16), each over sequences of one row,
	// of less than a tile, and across two and three tiles of every
	// instance's sizes (16 to 64 rows); grouped-query attention with
	// groups of 2 and 4, a group's key/value head past the first.
	shapes := [][5]int{{1, 1, 1, 16, 1}, {2, 17, 2, 32, 2}, {1, 130, 2, 32, 1}, {1, 70, 2, 128, 1}, {1, 130, 1, 64, 1}, {2, 33, 4, 64, 1},
		{1, 65, 1, 32, 1}, {1, 70, 4, 64, 2}, {1, 130, 4, 256, 2}, {1, 3, 2, 64, 2},
		{1, 1, 1, 128, 1}, {1, 40, 2, 256, 1}, {1, 70, 4, 512, 2}}
	for _, dt := range dtypes {
		for _, sh := range shapes {
			if dt == graph.F32 && sh[3]/sh[2] > 64 {
				continue // fp32 instances go to 64
			}
			if err := FlashAttentionSupported(dt, sh[0], sh[1], sh[2], sh[4], sh[3]); err != nil {
				t.Fatalf("%v %v: %v", dt, sh, err)
			}
			for _, causal := range []bool{false, true} {
				t.Run(name(dt, "/", sh, "/causal=", causal), func(t *testing.T) { run(t, dt, sh, causal, 0) })
			}
		}
		for _, sh := range [][5]int{{1, 70, 2, 128, 1}, {1, 40, 2, 256, 1}} {
			if dt == graph.F32 && sh[3]/sh[2] > 64 {
				continue
			}
			for _, causal := range []bool{false, true} {
				t.Run(name(dt, "/", sh, "/unaligned/causal=", causal), func(t *testing.T) { run(t, dt, sh, causal, 1) })
			}
		}
	}
}

// Head widths without an instance are refused with ErrArg, before any
// launch; sequences whose scores would not fit an int32 are not (no
// kernel holds them).
func TestFlashAttentionSizes(t *testing.T) {
	for _, c := range []struct {
		dt                     graph.DType
		batch, seq, heads, hid int
		ok                     bool
	}{
		{graph.F32, 1, 4, 1, 16, true}, {graph.F32, 1, 4, 1, 64, true}, {graph.F32, 1, 4, 1, 128, false},
		{graph.BF16, 1, 4, 2, 128, true}, {graph.BF16, 1, 4, 1, 128, true}, {graph.BF16, 1, 4, 1, 256, false}, {graph.BF16, 1, 4, 1, 96, false}, {graph.BF16, 1, 4, 1, 8, false},
		{graph.BF16, 4, 8192, 12, 768, true}, // 3.2 G scores: the kernels keeping them refuse this
		{graph.BF16, 1 << 16, 4, 1, 64, false},
	} {
		err := FlashAttentionSupported(c.dt, c.batch, c.seq, c.heads, c.heads, c.hid)
		if c.ok != (err == nil) || (err != nil && !errors.Is(err, ErrArg)) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	r := newRecorder(t)
	k := r.kernels()
	p := r.alloc("x", 1<<20)
	err := k.FlashAttentionForward(nil, graph.F32, p, p, p, 1, 4, 1, 128, 1, false)
	if !errors.Is(err, ErrArg) || len(r.calls) > 0 {
		t.Errorf("f32 d = 128: %v after %v", err, r.calls)
	}
}

// Every instance is launched with the warps its tile sizes are compiled
// for (__launch_bounds__ in flash.cu's FlashBF16 and FlashF32): fewer would leave rows
// of each block uncomputed, more fail the launch. The recorder checks the
// grids and that every pointer lands in an allocation.
func TestFlashAttentionLaunches(t *testing.T) {
	for key := range kFlash {
		r := newRecorder(t)
		k := r.kernels()
		const batch, seq, heads = 2, 100, 4
		hid := heads * key.d
		es := int(key.dt.Size())
		qkv, out := r.alloc("qkv", units.Bytes(batch*seq*3*hid*es)), r.alloc("out", units.Bytes(batch*seq*hid*es))
		lse, work := r.alloc("lse", units.Bytes(4*batch*heads*seq)), r.alloc("work", FlashAttentionWorkspace(batch, seq, heads))
		dout, dqkv := r.alloc("dout", units.Bytes(batch*seq*hid*es)), r.alloc("dqkv", units.Bytes(batch*seq*3*hid*es))
		must(t, k.FlashAttentionForward(nil, key.dt, qkv, out, lse, batch, seq, heads, heads, hid, true))
		must(t, k.FlashAttentionBackward(nil, key.dt, qkv, out, lse, dout, dqkv, work, batch, seq, heads, heads, hid, true))
		if len(r.blocks) != 4 {
			t.Fatalf("%v d=%d: launches %v", key.dt, key.d, r.calls)
		}
		for name, threads := range r.blocks {
			if e := r.entries["flash"][name]; e == nil || (strings.HasPrefix(name, "flash_") && !strings.HasPrefix(name, "flash_prep") && threads != e.maxThreads) {
				t.Errorf("%s: %d threads a block, compiled for %v", name, threads, e)
			}
		}
	}
}
