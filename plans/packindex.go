package plans

import (
	"cmp"
	"math/bits"
	"slices"

	"github.com/flowkit/flowkit/units"
)

// This file finds pack's first fits without scanning every placed
// register. A device's registers are mostly touched by one stream only
// (its compute stream), and for those the clocks of lifetimes.go reduce to
// positions on that stream: such a register is live over a closed span of
// positions, from its first write to its last touch, and two of them may
// share bytes exactly when their spans are disjoint (packIndex says when
// that holds; it is checked life by life, not assumed). A first fit is
// then the lowest offset where a register's bytes clear the byte ranges
// of the placed registers whose spans meet its own: a query over
// rectangles, answered by a segment tree over positions (timeIndex) whose
// nodes keep the union of their registers' byte ranges (a treap of
// rangeArena), where the first gap wide enough is found in a logarithmic
// walk. The conflicts of a register, which a scan meets one by one (in a
// deep model about half the pairs of registers are live together, so that
// the scan is quadratic), are so skipped in bulk. Registers whose
// lifetimes are not spans (transfer buffers touched from two streams) are
// checked one by one with lifetimes.disjoint, as by the scan. The lowest
// offset clear of a set of ranges does not depend on how it is found, so
// every register lands where the scan puts it.

// rangeNode is a node of a treap of byte ranges: a range and aggregates
// of its subtree, by which a first fit skips whole subtrees.
type rangeNode struct {
	start, end  units.Bytes // the range, [start, end)
	first, last units.Bytes // the subtree's lowest start and highest end
	gap         units.Bytes // the widest gap between consecutive ranges of the subtree
	left, right int32
	prio        uint32
}

// rangeArena holds the nodes of a pack's sets of byte ranges, treaps
// named by their root (0 is the empty set): one allocation for the
// millions of ranges a deep model's index holds, and nodes merged away
// are reused.
type rangeArena struct {
	nodes []rangeNode // node 0 stands for none
	free  []int32
	seed  uint32
}

func newRangeArena() *rangeArena {
	return &rangeArena{nodes: make([]rangeNode, 1, 1024), seed: 2463534242}
}

func (a *rangeArena) node(start, end units.Bytes) int32 {
	a.seed ^= a.seed << 13 // xorshift: priorities need only be spread, and the same run to run
	a.seed ^= a.seed >> 17
	a.seed ^= a.seed << 5
	n := rangeNode{start: start, end: end, first: start, last: end, prio: a.seed}
	if k := len(a.free); k > 0 {
		i := a.free[k-1]
		a.free = a.free[:k-1]
		a.nodes[i] = n
		return i
	}
	a.nodes = append(a.nodes, n)
	return int32(len(a.nodes) - 1)
}

// update recomputes node i's aggregates from its children's.
func (a *rangeArena) update(i int32) {
	n := &a.nodes[i]
	n.first, n.last, n.gap = n.start, n.end, 0
	if l := &a.nodes[n.left]; n.left != 0 {
		n.first, n.gap = l.first, max(l.gap, n.start-l.last)
	}
	if r := &a.nodes[n.right]; n.right != 0 {
		n.last, n.gap = r.last, max(n.gap, r.gap, r.first-n.end)
	}
}

// splitEnd cuts treap t into the ranges that end below x and the others.
// The ranges of a set are disjoint, so their ends rise with their starts
// and the first part is a prefix.
func (a *rangeArena) splitEnd(t int32, x units.Bytes) (int32, int32) {
	if t == 0 {
		return 0, 0
	}
	if a.nodes[t].end < x {
		l, r := a.splitEnd(a.nodes[t].right, x)
		a.nodes[t].right = l
		a.update(t)
		return t, r
	}
	l, r := a.splitEnd(a.nodes[t].left, x)
	a.nodes[t].left = r
	a.update(t)
	return l, t
}

// splitStart cuts treap t into the ranges that start at or below x and
// the others.
func (a *rangeArena) splitStart(t int32, x units.Bytes) (int32, int32) {
	if t == 0 {
		return 0, 0
	}
	if a.nodes[t].start <= x {
		l, r := a.splitStart(a.nodes[t].right, x)
		a.nodes[t].right = l
		a.update(t)
		return t, r
	}
	l, r := a.splitStart(a.nodes[t].left, x)
	a.nodes[t].left = r
	a.update(t)
	return l, t
}

// merge joins treaps l and r, every range of l before every range of r.
func (a *rangeArena) merge(l, r int32) int32 {
	switch {
	case l == 0:
		return r
	case r == 0:
		return l
	case a.nodes[l].prio > a.nodes[r].prio:
		a.nodes[l].right = a.merge(a.nodes[l].right, r)
		a.update(l)
		return l
	default:
		a.nodes[r].left = a.merge(l, a.nodes[r].left)
		a.update(r)
		return r
	}
}

// release returns the nodes of treap t to the free list.
func (a *rangeArena) release(t int32) {
	stack := []int32{t}
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if i == 0 {
			continue
		}
		stack = append(stack, a.nodes[i].left, a.nodes[i].right)
		a.free = append(a.free, i)
	}
}

// insert adds [start, end) to the set rooted at t and returns its new
// root: the ranges it overlaps or touches are merged with it, so that the
// set stays a union of disjoint ranges.
func (a *rangeArena) insert(t int32, start, end units.Bytes) int32 {
	l, rest := a.splitEnd(t, start)
	m, r := a.splitStart(rest, end)
	if m != 0 {
		start, end = min(start, a.nodes[m].first), max(end, a.nodes[m].last)
		a.release(m)
	}
	return a.merge(a.merge(l, a.node(start, end)), r)
}

// fit returns the lowest offset at or above at where size bytes clear
// every range of the set rooted at t.
func (a *rangeArena) fit(t int32, at, size units.Bytes) units.Bytes {
	at, _ = a.fitIn(t, at, size)
	return at
}

// fitIn is fit over subtree t, the ranges before it already cleared by
// at: it returns the fit and true if one is found before the subtree's
// last range ends, else the offset past the ranges that block and false.
// A subtree is skipped whole when it ends below at, when it starts above
// a fit at at, or when no gap between its ranges is wide enough (the
// register then goes past its last range, the gap between at and the
// next range being no wider than one of those).
func (a *rangeArena) fitIn(t int32, at, size units.Bytes) (units.Bytes, bool) {
	if t == 0 {
		return at, false
	}
	n := &a.nodes[t]
	switch {
	case n.last <= at:
		return at, false
	case at+size <= n.first:
		return at, true
	case n.gap < size:
		return n.last, false
	}
	at, done := a.fitIn(n.left, at, size)
	if done || at+size <= n.start {
		return at, true
	}
	return a.fitIn(n.right, max(at, n.end), size)
}

// timeIndex is a segment tree over a stream's positions [0, n) holding
// registers' byte ranges by their spans. A register whose span is [lo,
// hi] is in the starts of every node above leaf lo and in the spans of
// the nodes that cover [lo, hi] (the canonical ones). The registers whose
// spans meet [lo, hi] are then those starting in it, the starts of its
// canonical nodes, and those live at lo, the spans of leaf lo and the
// nodes above it: a few dozen sets, each a union.
type timeIndex struct {
	n      int
	starts []int32 // by node (1 the root, node i over children 2i and 2i+1), a set's root in the arena
	spans  []int32
}

func newTimeIndex(positions int) *timeIndex {
	n := 1
	for n < positions {
		n *= 2
	}
	return &timeIndex{n: n, starts: make([]int32, 2*n), spans: make([]int32, 2*n)}
}

// add records that bytes [start, end) are live over positions [lo, hi].
func (x *timeIndex) add(a *rangeArena, lo, hi int32, start, end units.Bytes) {
	for i := int(lo) + x.n; i >= 1; i /= 2 {
		x.starts[i] = a.insert(x.starts[i], start, end)
	}
	for l, r := int(lo)+x.n, int(hi)+x.n+1; l < r; l, r = l/2, r/2 {
		if l%2 == 1 {
			x.spans[l] = a.insert(x.spans[l], start, end)
			l++
		}
		if r%2 == 1 {
			r--
			x.spans[r] = a.insert(x.spans[r], start, end)
		}
	}
}

// meets appends to sets the non-empty sets whose union is the bytes of
// the registers live at some position of [lo, hi]. A nil index holds
// none.
func (x *timeIndex) meets(sets []int32, lo, hi int32) []int32 {
	if x == nil {
		return sets
	}
	for i := int(lo) + x.n; i >= 1; i /= 2 {
		if x.spans[i] != 0 {
			sets = append(sets, x.spans[i])
		}
	}
	for l, r := int(lo)+x.n, int(hi)+x.n+1; l < r; l, r = l/2, r/2 {
		if l%2 == 1 {
			if x.starts[l] != 0 {
				sets = append(sets, x.starts[l])
			}
			l++
		}
		if r%2 == 1 {
			r--
			if x.starts[r] != 0 {
				sets = append(sets, x.starts[r])
			}
		}
	}
	return sets
}

// lifeSpan is a closed interval of positions on a stream.
type lifeSpan struct{ lo, hi int32 }

// How pack finds a register's conflicts.
const (
	byScan     = iota // lifetimes.disjoint with each placed register
	bySpan            // its whole span (versions nil)
	byVersions        // its whole span against whole ones, its versions' spans against versioned ones
)

// packIndex is pack's index of one device's placed registers.
//
// Spans: a life touched on one tracked stream c only (its last clock −1
// elsewhere), with writers, has its whole lifetime on c: from write[c]+1,
// the position of its first write, to last[c]. For two such lives a and
// b, a.before(b) is a.last[c] ≤ b.write[c]: elsewhere a.last is −1 and
// b.write at least −1 (checked). a.beforeNext(b) is a.last[c] ≤
// b.writeNext[c], which holds whenever every such life's writeNext[c] is
// at least the largest last[c] (mostLast), as when it is the next
// iteration's position (checked, life by life). disjoint is then "a before
// b or b before a": their spans do not meet, if neither is empty
// (checked). Two versioned registers are disjoint when no span of one's
// versions meets a span of the other's: the versions of each form a chain
// (checked), so the two pointers of disjoint find a meeting pair if there
// is one, and the across-iteration test holds as above.
type packIndex struct {
	p     *Plan
	lives *lifetimes
	by    map[int]int8       // register → bySpan or byVersions; byScan if absent
	whole map[int]lifeSpan   // by register, of bySpan and byVersions
	vers  map[int][]lifeSpan // by register, of byVersions
	arena *rangeArena
	// The placed registers' bytes: wholes of bySpan ones, wholes of
	// byVersions ones, spans of byVersions ones' versions.
	spans, versionedWholes, versions *timeIndex
	// The placed byScan registers, by offset; and all the placed
	// registers, by offset (those placed since last sorted in pending),
	// kept only where byScan registers are scanned against indexed ones.
	scanned      []int
	all, pending []int
	sets         []int32 // reused
}

// indexUse says which registers a packIndex indexes.
type indexUse int

const (
	indexWorthIt indexUse = iota // those it can, if it is quicker than scanning them
	indexAll                     // those it can
	indexNone                    // none: every register is scanned
)

// newPackIndex returns an empty index for a device's registers regs (not
// persistent), having decided which of them it will take, as use says.
func newPackIndex(p *Plan, lives *lifetimes, regs []int, use indexUse) *packIndex {
	ix := &packIndex{p: p, lives: lives}
	// The index pays a few treap insertions per span and level of its
	// tree where the scan pays a disjoint per pair of registers at worst,
	// and fewer, as it stops at the first gap: for a device with few
	// registers but many versions of each (a pipeline stage of a short
	// model with many micro-batches) the scan is quicker, by up to 30
	// times. The bound was measured on GPTs, on one device and in
	// pipelines of 1 to 64 micro-batches: near it, both take about as
	// long.
	spans := 0
	for _, r := range regs {
		spans += 1 + len(lives.versions[r])
	}
	worth := func(levels int) bool {
		return use == indexAll || use == indexWorthIt && len(regs)*len(regs) >= 32*spans*levels
	}
	if !worth(1) {
		return ix
	}
	// The stream most registers are touched from alone.
	count := map[int]int{}
	for _, r := range regs {
		if c := lifeColumn(lives.whole[r]); c >= 0 {
			count[c]++
		}
	}
	c, most := -1, 0
	for k, n := range count {
		if n > most || n == most && k < c {
			c, most = k, n
		}
	}
	if c < 0 {
		return ix
	}
	candidate := make([]bool, len(regs))
	mostLast := int32(-1)
	for i, r := range regs {
		candidate[i] = spanLife(lives.whole[r], c)
		vs := lives.versions[r]
		for k, v := range vs {
			candidate[i] = candidate[i] && spanLife(v, c) && (k == 0 || vs[k-1].last[c] <= v.write[c])
		}
		if candidate[i] {
			mostLast = max(mostLast, lives.whole[r].last[c])
			for _, v := range vs {
				mostLast = max(mostLast, v.last[c])
			}
		}
	}
	if !worth(bits.Len(uint(mostLast + 1))) {
		return ix
	}
	ix.by, ix.whole, ix.vers = make(map[int]int8, len(regs)), make(map[int]lifeSpan, len(regs)), make(map[int][]lifeSpan)
	scans := 0
	for i, r := range regs {
		by := int8(byScan)
		if candidate[i] && lives.whole[r].writeNext[c] >= mostLast {
			by = bySpan
			if lives.versions[r] != nil {
				by = byVersions
			}
			for _, v := range lives.versions[r] {
				if v.writeNext[c] < mostLast {
					by = byScan
				}
			}
		}
		if by == byScan {
			scans++
			continue
		}
		ix.by[r] = by
		lf := lives.whole[r]
		ix.whole[r] = lifeSpan{lf.write[c] + 1, lf.last[c]}
		if by == byVersions {
			for _, v := range lives.versions[r] {
				ix.vers[r] = append(ix.vers[r], lifeSpan{v.write[c] + 1, v.last[c]})
			}
		}
	}
	if scans == len(regs) {
		return ix
	}
	if scans > 0 {
		ix.all = []int{}
	}
	// Spans meet or not by the order of their ends alone, so positions
	// are renumbered by rank among the ends: the trees are as large as
	// the spans are many, not as the stream is long (millions of
	// firings in the largest plans).
	var ends []int32
	for r, w := range ix.whole {
		ends = append(ends, w.lo, w.hi)
		for _, v := range ix.vers[r] {
			ends = append(ends, v.lo, v.hi)
		}
	}
	slices.Sort(ends)
	ends = slices.Compact(ends)
	rank := func(s lifeSpan) lifeSpan {
		lo, _ := slices.BinarySearch(ends, s.lo)
		hi, _ := slices.BinarySearch(ends, s.hi)
		return lifeSpan{int32(lo), int32(hi)}
	}
	versioned := false
	for r, w := range ix.whole {
		ix.whole[r] = rank(w)
		for k, v := range ix.vers[r] {
			ix.vers[r][k], versioned = rank(v), true
		}
	}
	ix.arena = newRangeArena()
	ix.spans = newTimeIndex(len(ends))
	if versioned {
		ix.versionedWholes, ix.versions = newTimeIndex(len(ends)), newTimeIndex(len(ends))
	}
	return ix
}

// lifeColumn returns the one column a life is touched on, or −1 if it is
// touched on several.
func lifeColumn(lf *life) int {
	c := -1
	for j, x := range lf.last {
		if x >= 0 {
			if c >= 0 {
				return -1
			}
			c = j
		}
	}
	return c
}

// spanLife reports whether a life is touched on column c alone, is
// written, after positions at least −1 on every column (so that another's
// −1 is before them), and is not empty.
func spanLife(lf *life, c int) bool {
	if !lf.hasWriters || lifeColumn(lf) != c {
		return false
	}
	for j := range lf.write {
		if lf.write[j] < -1 || lf.writeNext[j] < -1 {
			return false
		}
	}
	return lf.last[c] > lf.write[c]
}

// fit returns the lowest offset at or above base where register r's size
// bytes clear every placed register it may be live with.
func (ix *packIndex) fit(r int, base, size units.Bytes) units.Bytes {
	sets := ix.sets[:0]
	switch ix.by[r] {
	case byScan:
		if ix.all == nil { // every placed register is scanned
			return ix.scan(r, ix.scanned, base, size)
		}
		ix.flush()
		return ix.scan(r, ix.all, base, size)
	case bySpan:
		w := ix.whole[r]
		sets = ix.spans.meets(sets, w.lo, w.hi)
		sets = ix.versionedWholes.meets(sets, w.lo, w.hi)
	case byVersions:
		w := ix.whole[r]
		sets = ix.spans.meets(sets, w.lo, w.hi)
		for _, v := range ix.vers[r] {
			sets = ix.versions.meets(sets, v.lo, v.hi)
		}
	}
	ix.sets = sets
	// Each set moves at past offsets where r does not fit; at fits every
	// set when a round of them leaves it. The scanned registers, a walk
	// from the lowest offset, are asked only then.
	at := base
	for {
		for i, unmoved := 0, 0; unmoved < len(sets); i = (i + 1) % len(sets) {
			if next := ix.arena.fit(sets[i], at, size); next != at {
				at, unmoved = next, 0
			}
			unmoved++
		}
		next := ix.scan(r, ix.scanned, at, size)
		if next == at {
			return at
		}
		at = next
	}
}

// scan is pack's first fit as before the index: placed is kept by offset,
// so that the fit is found in one pass that stops at the first gap large
// enough, asking whether lifetimes are disjoint only of the registers
// whose bytes overlap the candidate offset: the order of equal offsets
// does not change the fit. It returns the lowest fit at or above at.
func (ix *packIndex) scan(r int, placed []int, at, size units.Bytes) units.Bytes {
	for _, q := range placed {
		o := ix.p.Registers[q].Offset
		if at+size <= o {
			break
		}
		if end := o + roundUp(ix.p.Registers[q].Bytes()); end > at && !ix.lives.disjoint(r, q) {
			at = end
		}
	}
	return at
}

// flush merges the pending registers into all, in place from the back.
func (ix *packIndex) flush() {
	if len(ix.pending) == 0 {
		return
	}
	slices.SortFunc(ix.pending, ix.byOffset)
	i, j := len(ix.all)-1, len(ix.pending)-1
	ix.all = slices.Grow(ix.all, len(ix.pending))[:len(ix.all)+len(ix.pending)]
	for k := len(ix.all) - 1; j >= 0; k-- {
		if i >= 0 && ix.byOffset(ix.all[i], ix.pending[j]) > 0 {
			ix.all[k], i = ix.all[i], i-1
		} else {
			ix.all[k], j = ix.pending[j], j-1
		}
	}
	ix.pending = ix.pending[:0]
}

func (ix *packIndex) byOffset(a, b int) int {
	return cmp.Compare(ix.p.Registers[a].Offset, ix.p.Registers[b].Offset)
}

// place records register r placed at bytes [start, end).
func (ix *packIndex) place(r int, start, end units.Bytes) {
	switch ix.by[r] {
	case byScan:
		i, _ := slices.BinarySearchFunc(ix.scanned, start, func(q int, at units.Bytes) int { return cmp.Compare(ix.p.Registers[q].Offset, at) })
		ix.scanned = slices.Insert(ix.scanned, i, r)
	case bySpan:
		w := ix.whole[r]
		ix.spans.add(ix.arena, w.lo, w.hi, start, end)
	case byVersions:
		w := ix.whole[r]
		ix.versionedWholes.add(ix.arena, w.lo, w.hi, start, end)
		for _, v := range ix.vers[r] {
			ix.versions.add(ix.arena, v.lo, v.hi, start, end)
		}
	}
	if ix.all != nil {
		ix.pending = append(ix.pending, r)
	}
}
