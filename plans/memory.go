package plans

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/flowkit/flowkit/units"
)

// align is the alignment of every register in a device arena.
const align = 64

// registerTouches lists, by register, the firings that read or write it.
func (p *Plan) registerTouches() [][]int {
	// Counted first, then filled into one array: the largest plans touch
	// registers tens of millions of times, which appends would grow into
	// in small pieces.
	each := func(visit func(r, f int)) {
		for f, fi := range p.Firings {
			t := &p.Tasks[fi.Task]
			for _, u := range t.Reads {
				if !p.Idle(t, u, fi.Micro) {
					visit(u.Reg, f)
				}
			}
			for _, r := range t.Writes {
				visit(r, f)
			}
		}
	}
	count := make([]int, len(p.Registers))
	each(func(r, _ int) { count[r]++ })
	return fill(count, each)
}

// fill returns lists of ints, list i of count[i] entries, filled by each
// in the order it visits them: one array holds them all, each list capped
// at its length.
func fill(count []int, each func(visit func(i, x int))) [][]int {
	total := 0
	for _, n := range count {
		total += n
	}
	all := make([]int, total)
	lists := make([][]int, len(count))
	at := 0
	for i, n := range count {
		if n > 0 {
			lists[i] = all[at : at : at+n]
		}
		at += n
	}
	each(func(i, x int) { lists[i] = append(lists[i], x) })
	return lists
}

// planMemory gives every register an offset in its device's arena, letting
// two registers share memory only when their lifetimes are ordered in every
// execution the dependency edges allow, and records each device's peak.
// Parameters and optimizer state are never shared.
func planMemory(p *Plan) error {
	edges, err := p.Deps()
	if err != nil {
		return err
	}
	if err := checkPlannable(p); err != nil {
		return err
	}
	// Which firings touch each register does not depend on the edges:
	// it is listed on another core while their graph is unrolled (each
	// takes seconds for the largest plans).
	var touch [][]int
	var versions [][][]int
	var wg sync.WaitGroup
	wg.Go(func() { touch, versions = p.registerTouches(), p.versionTouches() })
	spots := newFiringSpots(p)
	g := newUnrolled(p, edges, spots)
	wg.Wait()
	lives := lifetimesOn(p, g, spots, touch, versions)

	byDevice := make([][]int, len(p.Devices))
	for r := range p.Registers {
		byDevice[p.Registers[r].Device] = append(byDevice[p.Registers[r].Device], r)
	}
	// Devices are packed side by side: each sets its own registers'
	// offsets and its own Memory.
	p.Memory = make([]Memory, len(p.Devices))
	inParallel(len(p.Devices), func(_, d int) { p.Memory[d] = pack(p, lives, d, byDevice[d]) })
	for d := range p.Devices {
		if src := p.Listed(d); src != d { // the same as the device the plan lists for it
			p.Memory[d] = p.Memory[src]
			p.Memory[d].Device = d
			continue
		}
		peak, base := p.Memory[d].Peak, p.Memory[d].Persistent
		if capacity := p.Devices[d].Memory; capacity > 0 && peak > capacity {
			u := p.UnsharedByCategory(d)
			return fmt.Errorf("%w: device %s needs %v, has %v (over by %v; %v of it parameters and optimizer state): "+
				"weights %v, optimizer state %v; without reuse activations %v, gradients %v, temporaries %v",
				ErrOutOfMemory, p.Devices[d].Name, peak, capacity, peak-capacity, base,
				u[Weights], u[Optimizer], u[Activations], u[Gradients], u[Temporaries])
		}
	}
	return nil
}

// pack gives device d's registers (regs) their offsets: persistent ones
// first, one after the other, then the others largest first, each at the
// lowest offset clear of every placed register it may be live with (a
// first fit, as packFirstFit in the tests, found faster).
func pack(p *Plan, lives *lifetimes, d int, regs []int) Memory {
	return packBy(p, lives, d, regs, indexWorthIt)
}

// packBy is pack, indexing the registers whose lifetimes are spans as
// index says (the tests make it index wherever it can, or nowhere).
func packBy(p *Plan, lives *lifetimes, d int, regs []int, index indexUse) Memory {
	var persistent, shared []int
	var unshared units.Bytes
	for _, r := range regs {
		reg := &p.Registers[r]
		unshared += roundUp(reg.Bytes())
		if reg.Persistent {
			persistent = append(persistent, r)
		} else {
			shared = append(shared, r)
		}
	}
	var off units.Bytes
	for _, r := range persistent {
		p.Registers[r].Offset = off
		off += roundUp(p.Registers[r].Bytes())
	}
	base := off
	slices.SortStableFunc(shared, func(a, b int) int {
		return cmp.Compare(p.Registers[b].Bytes(), p.Registers[a].Bytes())
	})
	// The first fit of each register is found with an index of the
	// placed ones (packindex.go), which skips in bulk those it may not
	// be live with and the runs of those that leave it no room.
	ix := newPackIndex(p, lives, shared, index)
	peak := base
	for _, r := range shared {
		size := roundUp(p.Registers[r].Bytes())
		at := ix.fit(r, base, size)
		p.Registers[r].Offset = at
		ix.place(r, at, at+size)
		peak = max(peak, at+size)
	}
	return Memory{Device: d, Peak: peak, Persistent: base, Unshared: unshared}
}

// inParallel calls do(worker, i) for every i in [0, n), on workers()
// goroutines numbered from 0; the calls must not depend on each other.
func inParallel(n int, do func(worker, i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range min(workers(), n) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				do(w, i)
			}
		})
	}
	wg.Wait()
}

// workers is how many goroutines inParallel starts at most.
func workers() int { return runtime.GOMAXPROCS(0) }

// versionTouches returns, for every one-slot register written more than
// once an iteration and read only within the iteration of each write, the
// firings touching each write: its writer first, then its readers. Other
// registers get nil: the memory planner takes their whole span.
func (p *Plan) versionTouches() [][][]int {
	skip := make([]bool, len(p.Registers))
	for r := range p.Registers {
		reg := &p.Registers[r]
		if reg.Persistent || reg.Slots != 1 || p.WritesPerIteration(r) < 2 {
			skip[r] = true
			continue
		}
		for _, w := range reg.Writers {
			skip[r] = skip[r] || p.Tasks[w].InPlace
		}
	}
	// reads visits the reads of the registers kept, by register, write
	// and firing; a read of another iteration's write (or a wrong one)
	// leaves its register out, and its reads unvisited from then on.
	reads := func(visit func(r, k, f int)) {
		for f, fi := range p.Firings {
			t := &p.Tasks[fi.Task]
			for _, u := range t.Reads {
				if skip[u.Reg] || p.Idle(t, u, fi.Micro) {
					continue
				}
				d, k, err := p.readIndex(u, fi.Micro)
				if err != nil || d != 0 || k < 0 {
					skip[u.Reg] = true
					continue
				}
				visit(u.Reg, k, f)
			}
		}
	}
	// The first walk settles which registers are left out; the second,
	// over the same reads of those kept, fills every write's list, in
	// one array (see fill): a large plan's writes are millions.
	reads(func(int, int, int) {})
	first := make([]int, len(p.Registers)) // of register r's writes, in the lists
	versions := 0
	for r := range p.Registers {
		first[r] = versions
		if !skip[r] {
			versions += p.WritesPerIteration(r)
		}
	}
	count := make([]int, versions)
	for i := range count {
		count[i] = 1 // the writer
	}
	reads(func(r, k, _ int) { count[first[r]+k]++ })
	firingOf := p.firingIndex()
	lists := fill(count, func(visit func(i, x int)) {
		var seq []int
		for r := range p.Registers {
			if !skip[r] {
				seq = p.appendWrites(seq[:0], r, firingOf)
				for k, f := range seq {
					visit(first[r]+k, f)
				}
			}
		}
		reads(func(r, k, f int) { visit(first[r]+k, f) })
	})
	out := make([][][]int, len(p.Registers))
	for r := range p.Registers {
		if !skip[r] {
			out[r] = lists[first[r] : first[r]+p.WritesPerIteration(r) : first[r]+p.WritesPerIteration(r)]
		}
	}
	return out
}

func roundUp(b units.Bytes) units.Bytes { return (b + align - 1) / align * align }

// MaxFirings bounds the firings of a plan whose memory is planned: the
// clock passes of lifetimes.go take, per worker, a row index for each of
// 2·firings nodes and up to 16 int32s for some of them (a sixth for the
// largest plans), besides the firings and edges themselves.
const MaxFirings = 10_000_000

// checkPlannable refuses a plan too large for memory planning, by the
// firings its tasks make (so before they are listed).
func checkPlannable(p *Plan) error {
	if n := p.firingCount(); n > MaxFirings {
		return &FiringsError{Firings: n, Max: MaxFirings}
	}
	return nil
}

// topoOrder returns the nodes of an acyclic graph, given by successor
// lists, in an order where every edge points forward (Kahn's algorithm);
// nodes on a cycle are left out.
func topoOrder(succ [][]int) []int {
	indeg := make([]int, len(succ))
	for _, ws := range succ {
		for _, w := range ws {
			indeg[w]++
		}
	}
	order := make([]int, 0, len(succ))
	for v, d := range indeg {
		if d == 0 {
			order = append(order, v)
		}
	}
	for i := 0; i < len(order); i++ {
		for _, w := range succ[order[i]] {
			if indeg[w]--; indeg[w] == 0 {
				order = append(order, w)
			}
		}
	}
	return order
}
