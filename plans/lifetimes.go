package plans

import (
	"math"
	"slices"
)

// This file decides which registers of a device may share bytes: those
// whose lifetimes are ordered in every execution the dependency edges
// allow. It answers "does firing x finish before firing w starts" with
// vector clocks over streams rather than a reachability matrix.
//
// Every stream runs its firings one at a time, so the firings of one
// stream form a chain. For a firing v, clock(v)[s] is the last position on
// stream s of a firing that finishes before v starts (−1 if none). A
// firing x at position i of its stream s then finishes before v starts
// exactly when clock(v)[s] ≥ i: x precedes every later firing of its
// stream. Clocks are computed over two unrolled iterations (positions of
// the second are offset by the stream's length), so that "x of iteration
// i finishes before w of iteration i+1 starts" is answered too.
//
// A device's registers are touched only by firings on a few streams (its
// own, and the transfers that reach it), so clocks are kept only for
// those streams, a few devices per pass over the edges, passes side by
// side. A pass stores a clock only where one can change: at a node on a
// tracked stream, or one waiting across streams once the predecessors
// that precede another on a stream are dropped (unrolled.prune); every
// other node shares its predecessor's. Megatron-LM's 1T plan has 7.9 M
// nodes over two iterations; a pass stores 1.2 M clocks of 14 columns.

// spot is where a firing runs: a position on a stream.
type spot struct{ stream, pos int32 }

// maxColumns bounds the streams tracked by one pass.
const maxColumns = 16

// clock is a vector clock over a pass's tracked streams.
type clock []int32

// le reports whether every tracked position of a is at most b's.
func (a clock) le(b clock) bool {
	for i, x := range a {
		if x > b[i] {
			return false
		}
	}
	return true
}

// life summarizes a set of firings touching a register (or one write of
// it): the last position it touches on each tracked stream, and the
// clocks of its first write in this and the next iteration.
type life struct {
	last       clock // of every touching firing
	write      clock // min over the writers (all of them, for a whole register)
	writeNext  clock // the same, in the next iteration
	hasWriters bool
}

// before reports whether everything touching a finishes before b is
// written, in the same iteration.
func (a *life) before(b *life) bool { return !b.hasWriters || a.last.le(b.write) }

// beforeNext reports whether everything touching a finishes before b is
// written in the next iteration.
func (a *life) beforeNext(b *life) bool { return !b.hasWriters || a.last.le(b.writeNext) }

// lifetimes holds, for every non-persistent register, its whole span and,
// for a one-slot register written several times an iteration, each
// write's span (see Plan.versionTouches).
type lifetimes struct {
	whole    []*life
	versions [][]*life
}

// disjoint reports whether registers a and b (of one device) are never
// live at once.
//
// Whole spans: everything touching a finishes before b is first written
// in an iteration, and everything touching b finishes before a is first
// written in the next (or the other way round).
//
// Versions: a one-slot register's writes form a chain (write k+1 waits
// for every read of write k), so with a_i and b_j the writes of a and b,
// "b_j before a_i" holds for a prefix of j that grows with i. Every pair
// is ordered when, for each i, a_i comes before the first b_j not before
// it: two pointers, not every pair. Across iterations it is enough that
// the last write of each is done before the other's first write of the
// next iteration.
func (l *lifetimes) disjoint(a, b int) bool {
	va, vb := l.versions[a], l.versions[b]
	if va == nil || vb == nil {
		wa, wb := l.whole[a], l.whole[b]
		return wa.before(wb) && wb.beforeNext(wa) || wb.before(wa) && wa.beforeNext(wb)
	}
	j := 0
	for _, ai := range va {
		for j < len(vb) && vb[j].before(ai) {
			j++
		}
		if j < len(vb) && !ai.before(vb[j]) {
			return false
		}
	}
	return va[len(va)-1].beforeNext(vb[0]) && vb[len(vb)-1].beforeNext(va[0])
}

// newLifetimes computes every register's lifetimes from the plan's edges.
// touch lists each register's firings; versions are Plan.versionTouches.
func newLifetimes(p *Plan, edges []Edge, touch [][]int, versions [][][]int) *lifetimes {
	spots := newFiringSpots(p)
	return lifetimesOn(p, newUnrolled(p, edges, spots), spots, touch, versions)
}

// lifetimesOn is newLifetimes over the plan's unrolled graph g, where
// spots (newFiringSpots) says where each firing runs.
func lifetimesOn(p *Plan, g *unrolled, spots *firingSpots, touch [][]int, versions [][][]int) *lifetimes {
	n := len(p.Firings)
	l := &lifetimes{whole: make([]*life, len(p.Registers)), versions: make([][]*life, len(p.Registers))}

	// Where each firing runs: a transfer or an all-reduce is on a stream
	// of every device it occupies. A register's firings are placed by
	// their stream on its device where they have one, so that a device's
	// registers need few streams' clocks.
	place := func(f, dev int) spot {
		for _, sp := range spots.of(f) {
			if p.Streams[sp.stream].Device == dev {
				return sp
			}
		}
		return spots.of(f)[0] // every firing is on a stream: the compiler orders each
	}
	// The streams each device's registers are touched from.
	need := make([][]int, len(p.Devices))
	for r, fs := range touch {
		reg := &p.Registers[r]
		if reg.Persistent {
			continue
		}
		for _, f := range fs {
			if s := int(place(f, reg.Device).stream); !slices.Contains(need[reg.Device], s) {
				need[reg.Device] = append(need[reg.Device], s)
			}
		}
	}

	// Passes: as many devices as fit in maxColumns tracked streams (at
	// least one), each pass its own devices' registers.
	type pass struct {
		first, end int // devices
		cols       []int
	}
	var passes []pass
	for d := 0; d < len(p.Devices); {
		ps := pass{first: d}
		for ; d < len(p.Devices); d++ {
			union := slices.Clone(ps.cols)
			for _, s := range need[d] {
				if !slices.Contains(union, s) {
					union = append(union, s)
				}
			}
			if d > ps.first && len(union) > maxColumns {
				break
			}
			ps.cols = union
		}
		ps.end = d
		passes = append(passes, ps)
	}

	// run makes one pass with the clock table t (reused pass to pass).
	run := func(ps pass, t *clockTable) {
		clocks := g.clocks(p, ps.cols, t)
		// A register's life is kept over its device's streams only:
		// keep[dev][i] is the column of need[dev][i].
		keep := make([][]int, len(p.Devices))
		for dd := ps.first; dd < ps.end; dd++ {
			for _, s := range need[dd] {
				keep[dd] = append(keep[dd], slices.Index(ps.cols, s))
			}
		}
		var scratch clock
		type write struct{ firing, pos int32 }
		var earliest []write
		// Lives and their clocks are cut from blocks: the registers of a
		// large plan have millions of versions, each an allocation
		// otherwise.
		var lives []life
		var ints []int32
		newLife := func(w int) *life {
			if len(lives) == cap(lives) {
				lives = make([]life, 0, 4096)
			}
			lives = lives[:len(lives)+1]
			if len(ints)+3*w > cap(ints) {
				ints = make([]int32, 0, max(1<<16, 3*w))
			}
			at := len(ints)
			ints = ints[:at+3*w]
			lf := &lives[len(lives)-1]
			lf.last = ints[at : at+w : at+3*w] // write and writeNext follow (summarize)
			return lf
		}
		summarize := func(dev int, fs []int, writers []int) *life {
			w := len(keep[dev])
			lf := newLife(w)
			for i := range lf.last {
				lf.last[i] = -1
			}
			for _, f := range fs {
				sp := place(f, dev)
				i := slices.Index(need[dev], int(sp.stream))
				lf.last[i] = max(lf.last[i], sp.pos)
			}
			if len(writers) == 0 {
				return lf
			}
			lf.write, lf.writeNext, lf.hasWriters = lf.last[w:2*w], lf.last[2*w:3*w], true
			for i := range w {
				lf.write[i], lf.writeNext[i] = math.MaxInt32, math.MaxInt32
			}
			// Of the writers on one stream the earliest precedes the
			// others, so its clock is the least: it alone is merged.
			earliest = slices.Grow(earliest[:0], w)[:w]
			for i := range earliest {
				earliest[i] = write{-1, math.MaxInt32}
			}
			for _, f := range writers {
				sp := place(f, dev)
				i := slices.Index(need[dev], int(sp.stream))
				if sp.pos < earliest[i].pos {
					earliest[i] = write{int32(f), sp.pos}
				}
			}
			scratch = slices.Grow(scratch[:0], w)[:w]
			for _, e := range earliest {
				if e.firing < 0 {
					continue
				}
				f := int(e.firing)
				clocks.before(f, keep[dev], scratch)
				for i, x := range scratch {
					lf.write[i] = min(lf.write[i], x)
				}
				clocks.before(f+n, keep[dev], scratch)
				for i, x := range scratch {
					lf.writeNext[i] = min(lf.writeNext[i], x)
				}
			}
			return lf
		}
		var writers []int
		for r := range p.Registers {
			reg := &p.Registers[r]
			if reg.Persistent || reg.Device < ps.first || reg.Device >= ps.end {
				continue
			}
			writers = writers[:0]
			for _, f := range touch[r] {
				if slices.Contains(p.Tasks[p.Firings[f].Task].Writes, r) {
					writers = append(writers, f)
				}
			}
			l.whole[r] = summarize(reg.Device, touch[r], writers)
			if versions[r] != nil {
				l.versions[r] = make([]*life, 0, len(versions[r]))
			}
			for _, v := range versions[r] {
				l.versions[r] = append(l.versions[r], summarize(reg.Device, v, v[:1]))
			}
			// disjoint relies on the writes forming a chain; without one
			// the register is taken whole.
			for k := 1; k < len(l.versions[r]); k++ {
				if !l.versions[r][k-1].before(l.versions[r][k]) {
					l.versions[r] = nil
					break
				}
			}
		}
	}
	// Passes touch disjoint registers, so they run side by side, each
	// worker with a clock table of its own.
	tables := make([]clockTable, workers())
	inParallel(len(passes), func(w, i int) { run(passes[i], &tables[w]) })
	return l
}

// unrolled is the dependency graph over two iterations (node f+n is
// firing f of the next one), numbered in a topological order: node v has
// rank rank[v], and every edge goes from a lower rank to a higher one.
// Clock tables are laid out by rank, so that a pass walks them in order
// and most predecessors (the previous firing of the same stream) are near.
type unrolled struct {
	n     int
	order []int32 // rank → node
	rank  []int32 // node → rank
	start []int32 // predecessors of rank i: pred[start[i]:start[i+1]], as ranks
	pred  []int32
	// Where node of rank i runs: spots[spotStart[i]:spotStart[i+1]],
	// positions of the second iteration following the first's.
	spotStart []int32
	spots     []spot
}

func newUnrolled(p *Plan, edges []Edge, spots *firingSpots) *unrolled {
	n := len(p.Firings)
	// arcs visits the edges over two iterations, in the edges' order.
	arcs := func(visit func(from, to int32)) {
		for _, e := range edges {
			from, to := int32(e.From), int32(e.To)
			switch e.Delta {
			case 0:
				visit(from, to)
				visit(from+int32(n), to+int32(n))
			case 1:
				visit(from, to+int32(n))
			}
		}
	}
	// Successors, then predecessors by rank, as compressed lists: a
	// 1T-parameter plan has some 30 million arcs.
	succStart := make([]int32, 2*n+1)
	arcs(func(from, _ int32) { succStart[from+1]++ })
	for v := range 2 * n {
		succStart[v+1] += succStart[v]
	}
	succ := make([]int32, succStart[2*n])
	fill := slices.Clone(succStart[:2*n])
	arcs(func(from, to int32) {
		succ[fill[from]] = to
		fill[from]++
	})
	g := &unrolled{n: n, order: depthFirstOrder(succStart, succ), rank: make([]int32, 2*n), start: make([]int32, 2*n+1)}
	succStart, fill = nil, nil
	for i, v := range g.order { // every node: the plan has no same-iteration cycle (Deps checked)
		g.rank[v] = int32(i)
	}
	// Predecessors by rank, through succ: pred[start[i]:start[i+1]].
	for _, w := range succ {
		g.start[g.rank[w]+1]++
	}
	for i := range 2 * n {
		g.start[i+1] += g.start[i]
	}
	g.pred = make([]int32, len(succ))
	next := slices.Clone(g.start[:2*n])
	arcs(func(from, to int32) {
		at := g.rank[to]
		g.pred[next[at]] = g.rank[from]
		next[at]++
	})
	succ, next = nil, nil
	g.spotStart = make([]int32, 2*n+1)
	g.spotStart[2*n] = 2 * int32(len(spots.at))
	g.spots = make([]spot, 0, g.spotStart[2*n])
	for i, v := range g.order {
		f, second := int(v)%n, int(v) >= n
		for _, sp := range spots.of(f) {
			if second {
				sp.pos += int32(len(p.Streams[sp.stream].Order))
			}
			g.spots = append(g.spots, sp)
		}
		g.spotStart[i+1] = int32(len(g.spots))
	}
	g.prune(len(p.Streams))
	return g
}

// firingSpots lists where each firing runs, its positions on the streams
// that list it, in stream order: firing f's are at[start[f]:start[f+1]].
// One array holds them all: a large plan has millions of firings.
type firingSpots struct {
	start []int32
	at    []spot
}

func newFiringSpots(p *Plan) *firingSpots {
	n := len(p.Firings)
	s := &firingSpots{start: make([]int32, n+1)}
	for _, st := range p.Streams {
		for _, f := range st.Order {
			s.start[f+1]++
		}
	}
	for f := range n {
		s.start[f+1] += s.start[f]
	}
	s.at = make([]spot, s.start[n])
	next := slices.Clone(s.start[:n])
	for i, st := range p.Streams {
		for pos, f := range st.Order {
			s.at[next[f]] = spot{int32(i), int32(pos)}
			next[f]++
		}
	}
	return s
}

func (s *firingSpots) of(f int) []spot { return s.at[s.start[f]:s.start[f+1]] }

// where returns where the node of rank i runs.
func (g *unrolled) where(i int32) []spot { return g.spots[g.spotStart[i]:g.spotStart[i+1]] }

// prune drops every predecessor that comes before another predecessor of
// the same node on a stream: it precedes that one, so its clock is below
// that one's everywhere and merging it changes nothing. Most edges go
// from a firing's stream neighbours (a producer on the same stream, a
// slot freed by a read on it), so this leaves about one predecessor per
// stream a node waits across, and every clock pass merges that many.
func (g *unrolled) prune(streams int) {
	latest := make([]int32, streams) // per stream, the latest predecessor's position; −1 unset
	for s := range latest {
		latest[s] = -1
	}
	var early []bool
	kept := int32(0)
	for i := range 2 * g.n {
		preds := g.pred[g.start[i]:g.start[i+1]]
		g.start[i] = kept
		for _, u := range preds {
			for _, sp := range g.where(u) {
				latest[sp.stream] = max(latest[sp.stream], sp.pos)
			}
		}
		early = early[:0]
		for _, u := range preds {
			e := false
			for _, sp := range g.where(u) {
				e = e || sp.pos < latest[sp.stream]
			}
			early = append(early, e)
		}
		for _, u := range preds {
			for _, sp := range g.where(u) {
				latest[sp.stream] = -1
			}
		}
		for k, u := range preds { // in place: kept never passes k
			if !early[k] {
				g.pred[kept] = u
				kept++
			}
		}
	}
	g.start[2*g.n] = kept
	g.pred = slices.Clip(g.pred[:kept])
}

// depthFirstOrder is topoOrder, over successor lists succ[start[v]:
// start[v+1]], taking the node that became ready last first: a firing
// tends to follow the one it waits for, so that clock passes find
// predecessors' clocks near (in cache).
func depthFirstOrder(start, succ []int32) []int32 {
	nodes := len(start) - 1
	indeg := make([]int32, nodes)
	for _, w := range succ {
		indeg[w]++
	}
	var ready []int32
	for v := nodes - 1; v >= 0; v-- {
		if indeg[v] == 0 {
			ready = append(ready, int32(v))
		}
	}
	order := make([]int32, 0, nodes)
	for len(ready) > 0 {
		v := ready[len(ready)-1]
		ready = ready[:len(ready)-1]
		order = append(order, v)
		ws := succ[start[v]:start[v+1]]
		for i := len(ws) - 1; i >= 0; i-- {
			w := ws[i]
			if indeg[w]--; indeg[w] == 0 {
				ready = append(ready, w)
			}
		}
	}
	return order
}

// clockTable holds one pass's clocks by rank, each including the node's
// own positions: the clock of everything up to and including the node.
// A node that waits for one node only and is on no tracked stream has
// its predecessor's clock, so it shares that row: most nodes of a pass
// do (after unrolled.prune, nearly every node's one predecessor is the
// previous firing of its stream), so the table holds far fewer rows
// than nodes.
type clockTable struct {
	g     *unrolled
	width int
	at    []int32 // rank → row
	rows  []int32 // row k: rows[k*width : (k+1)*width]
}

func (t *clockTable) row(i int32) clock {
	k := int(t.at[i])
	return t.rows[k*t.width : (k+1)*t.width]
}

// before sets at to node v's clock on the columns cs: the positions of
// the firings that finish before it starts (its predecessors' clocks
// merged).
func (t *clockTable) before(v int, cs []int, at clock) {
	for c := range at {
		at[c] = -1
	}
	i := t.g.rank[v]
	for _, u := range t.g.pred[t.g.start[i]:t.g.start[i+1]] {
		row := t.row(u)
		for c, k := range cs {
			at[c] = max(at[c], row[k])
		}
	}
}

// clocks computes every node's clock over the tracked streams cols into
// t, reusing its memory, and returns it.
func (g *unrolled) clocks(p *Plan, cols []int, t *clockTable) *clockTable {
	w := len(cols)
	col := make([]int32, len(p.Streams))
	for s := range col {
		col[s] = -1
	}
	for c, s := range cols {
		col[s] = int32(c)
	}
	// tracked reports whether the node of rank i is on a tracked stream.
	tracked := func(i int) bool {
		for _, sp := range g.where(int32(i)) {
			if col[sp.stream] >= 0 {
				return true
			}
		}
		return false
	}
	// Rank → row: row 0 is the empty clock (all −1), shared by the nodes
	// that wait for nothing and are on no tracked stream.
	if cap(t.at) < 2*g.n {
		t.at = make([]int32, 2*g.n)
	}
	t.g, t.width, t.at = g, w, t.at[:2*g.n]
	own := func(i int) bool { return g.start[i+1]-g.start[i] > 1 || tracked(i) }
	rows := int32(1)
	for i := range t.at {
		switch preds := g.pred[g.start[i]:g.start[i+1]]; {
		case own(i):
			t.at[i] = rows
			rows++
		case len(preds) == 1:
			t.at[i] = t.at[preds[0]]
		default:
			t.at[i] = 0
		}
	}
	if size := int(rows) * w; cap(t.rows) < size {
		t.rows = make([]int32, size)
	}
	t.rows = t.rows[:int(rows)*w]
	for c := range w {
		t.rows[c] = -1
	}
	for i := range t.at {
		if !own(i) {
			continue
		}
		at, preds := t.row(int32(i)), g.pred[g.start[i]:g.start[i+1]]
		if len(preds) == 0 {
			for c := range at {
				at[c] = -1
			}
		} else { // positions are at least −1: the first predecessor's clock is the start
			copy(at, t.row(preds[0]))
			for _, u := range preds[1:] {
				row := t.row(u)[:len(at)]
				for c, x := range row {
					at[c] = max(at[c], x)
				}
			}
		}
		for _, sp := range g.where(int32(i)) {
			if c := col[sp.stream]; c >= 0 {
				at[c] = max(at[c], sp.pos)
			}
		}
	}
	return t
}
