package plans

import (
	"fmt"
	"sort"

	"github.com/flowkit/flowkit/units"
)

// align is the alignment of every register in a device arena.
const align = 64

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
	reach := newReachability(len(p.Firings), edges)

	touch := make([][]int, len(p.Registers))   // firings reading or writing
	writers := make([][]int, len(p.Registers)) // firings writing
	for f, fi := range p.Firings {
		t := &p.Tasks[fi.Task]
		for _, u := range t.Reads {
			touch[u.Reg] = append(touch[u.Reg], f)
		}
		for _, r := range t.Writes {
			touch[r] = append(touch[r], f)
			writers[r] = append(writers[r], f)
		}
	}
	// before(a, b): everything touching a in iteration i finishes before b
	// is first written in iteration i, and everything touching b finishes
	// before a is written again in iteration i+1.
	ordered := func(a, b int) bool {
		for _, x := range touch[a] {
			for _, w := range writers[b] {
				if !reach.within(x, w) {
					return false
				}
			}
		}
		for _, y := range touch[b] {
			for _, w := range writers[a] {
				if !reach.next(y, w) {
					return false
				}
			}
		}
		return true
	}

	// A one-slot register written several times an iteration (a backward
	// temporary, once per micro-batch) holds each write only from that
	// write to its last read: two such registers may share bytes when
	// every pair of those lives is ordered, though the registers' whole
	// spans overlap.
	versions := p.versionTouches()
	disjoint := func(a, b int) bool {
		va, vb := versions[a], versions[b]
		if va == nil || vb == nil {
			return ordered(a, b) || ordered(b, a)
		}
		all := func(xs []int, ok func(int) bool) bool {
			for _, x := range xs {
				if !ok(x) {
					return false
				}
			}
			return true
		}
		for _, ta := range va {
			for _, tb := range vb {
				wa, wb := ta[0], tb[0]
				before := all(ta, func(x int) bool { return reach.within(x, wb) })
				after := all(tb, func(y int) bool { return reach.within(y, wa) })
				if !before && !after {
					return false
				}
				// and each before the other's write of the next iteration
				if !all(ta, func(x int) bool { return reach.next(x, wb) }) || !all(tb, func(y int) bool { return reach.next(y, wa) }) {
					return false
				}
			}
		}
		return true
	}

	p.Memory = make([]Memory, len(p.Devices))
	for d := range p.Devices {
		var persistent, shared []int
		var unshared units.Bytes
		for r := range p.Registers {
			reg := &p.Registers[r]
			if reg.Device != d {
				continue
			}
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
		sort.SliceStable(shared, func(i, j int) bool {
			return p.Registers[shared[i]].Bytes() > p.Registers[shared[j]].Bytes()
		})
		var placed []int
		peak := base
		for _, r := range shared {
			size := roundUp(p.Registers[r].Bytes())
			var busy [][2]units.Bytes
			for _, q := range placed {
				if !disjoint(r, q) {
					o := p.Registers[q].Offset
					busy = append(busy, [2]units.Bytes{o, o + roundUp(p.Registers[q].Bytes())})
				}
			}
			sort.Slice(busy, func(i, j int) bool { return busy[i][0] < busy[j][0] })
			at := base
			for _, b := range busy {
				if at+size <= b[0] {
					break
				}
				at = max(at, b[1])
			}
			p.Registers[r].Offset = at
			placed = append(placed, r)
			peak = max(peak, at+size)
		}
		p.Memory[d] = Memory{Device: d, Peak: peak, Persistent: base, Unshared: unshared}
		if capacity := p.Devices[d].Memory; capacity > 0 && peak > capacity {
			return fmt.Errorf("%w: device %s needs %v, has %v (over by %v; %v of it parameters and optimizer state)",
				ErrOutOfMemory, p.Devices[d].Name, peak, capacity, peak-capacity, base)
		}
	}
	return nil
}

// versionTouches returns, for every one-slot register written more than
// once an iteration and read only within the iteration of each write, the
// firings touching each write: its writer first, then its readers. Other
// registers get nil: the memory planner takes their whole span.
func (p *Plan) versionTouches() [][][]int {
	firingOf := p.firingIndex()
	out := make([][][]int, len(p.Registers))
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
		if !skip[r] {
			for _, f := range p.writes(r, firingOf) {
				out[r] = append(out[r], []int{f})
			}
		}
	}
	for f, fi := range p.Firings {
		for _, u := range p.Tasks[fi.Task].Reads {
			if skip[u.Reg] {
				continue
			}
			d, k, err := p.readIndex(u, fi.Micro)
			if err != nil || d != 0 || k < 0 {
				skip[u.Reg], out[u.Reg] = true, nil
				continue
			}
			out[u.Reg][k] = append(out[u.Reg][k], f)
		}
	}
	return out
}

func roundUp(b units.Bytes) units.Bytes { return (b + align - 1) / align * align }

// maxReachability bounds the reachability bitset of a plan's memory
// planning, which grows as the square of its firings: 4 GiB is about
// 90,000 firings.
const maxReachability = 4 << 30

// checkPlannable refuses a plan too large for memory planning.
func checkPlannable(p *Plan) error {
	if need := reachabilityBytes(len(p.Firings)); need > maxReachability {
		return fmt.Errorf("%w: %d firings per iteration: planning their memory needs %v for the order of every pair of firings (at most %v): "+
			"plans list every firing (not compact per DESIGN §4.2 yet); fewer micro-batches, layers or devices fit",
			ErrInfeasible, len(p.Firings), need, units.Bytes(maxReachability))
	}
	return nil
}

// reachabilityBytes is the size of the bitset over n firings.
func reachabilityBytes(n int) units.Bytes {
	return units.Bytes(2*n) * units.Bytes((2*n+63)/64) * 8
}

// reachability answers "does firing a of iteration i finish before firing
// b of iteration i (within) or of iteration i+1 (next) starts", over two
// unrolled iterations of the dependency edges.
type reachability struct {
	n     int
	words int
	from  [][]uint64 // bitset of nodes reachable from each node; node f+n is firing f of the next iteration
}

func newReachability(n int, edges []Edge) *reachability {
	r := &reachability{n: n, words: (2*n + 63) / 64}
	succ := make([][]int, 2*n)
	link := func(a, b int) { succ[a] = append(succ[a], b) }
	for _, e := range edges {
		switch e.Delta {
		case 0:
			link(e.From, e.To)
			link(e.From+n, e.To+n)
		case 1:
			link(e.From, e.To+n)
		}
	}
	order := topoOrder(succ) // the plan has no same-iteration cycle: Deps checked
	r.from = make([][]uint64, 2*n)
	for i := len(order) - 1; i >= 0; i-- {
		v := order[i]
		set := make([]uint64, r.words)
		for _, w := range succ[v] {
			set[w/64] |= 1 << (w % 64)
			for k, x := range r.from[w] {
				set[k] |= x
			}
		}
		r.from[v] = set
	}
	return r
}

func (r *reachability) has(a, b int) bool { return r.from[a][b/64]&(1<<(b%64)) != 0 }

func (r *reachability) within(a, b int) bool { return a != b && r.has(a, b) }

func (r *reachability) next(a, b int) bool { return r.has(a, b+r.n) }

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
