package plans

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// This file is the one place where the execution rules of DESIGN §4.3 are
// turned into dependency edges. The simulator and the runtime both execute
// a plan by these edges, so that "executed unchanged" holds by
// construction.
//
// Versions. Every register has a fixed sequence of writes per iteration:
// its writer tasks in order, each once per micro-batch or once per
// iteration. Write k of iteration i is version i·W + k (W writes per
// iteration) and lives in slot version mod Slots; the initial contents of
// a persistent register are version −1. Reads name a version by mode:
// their own micro-batch's write, the iteration's last write, or the
// previous iteration's last write.
//
// Edges. A firing waits for
//   - the write of every version it reads (producer → consumer; an idle
//     member of a round's collective reads none, see Plan.Idle),
//   - for an in-place write, the previous write,
//   - for any write of version v, every read of version v − Slots
//     (consumer → slot reuse: the slot must be free),
//   - the previous firing on each of its streams (stream order),
//   - the firings it lists as After, of the same iteration.

// appendWrites appends to seq the firings writing register r, in order,
// for one iteration.
func (p *Plan) appendWrites(seq []int, r int, firingOf func(task, micro int) int) []int {
	for _, t := range p.Registers[r].Writers {
		if p.Tasks[t].PerMicro {
			for m := range p.Fires(t) {
				seq = append(seq, firingOf(t, m))
			}
		} else {
			seq = append(seq, firingOf(t, -1))
		}
	}
	return seq
}

// WritesPerIteration is W of register r.
func (p *Plan) WritesPerIteration(r int) int {
	w := 0
	for _, t := range p.Registers[r].Writers {
		w += p.Fires(t)
	}
	return w
}

// readIndex returns which write a read names, relative to the reader's
// iteration: write k of iteration i−d.
func (p *Plan) readIndex(u Use, micro int) (d, k int, err error) {
	w := p.WritesPerIteration(u.Reg)
	if w == 0 {
		if p.Registers[u.Reg].Persistent {
			return 1, -1, nil // never written: always the initial value
		}
		return 0, 0, fmt.Errorf("plans: register %s is read but never written", p.Registers[u.Reg].Name)
	}
	switch u.Mode {
	case ReadMicro:
		if ws := p.Registers[u.Reg].Writers; micro < 0 || micro >= w || len(ws) != 1 || !p.Tasks[ws[0]].PerMicro {
			return 0, 0, fmt.Errorf("plans: register %s: a per-micro-batch read needs one per-micro-batch writer of the reader's micro-batches", p.Registers[u.Reg].Name)
		}
		return 0, micro, nil
	case ReadFinal:
		return 0, w - 1, nil
	case ReadPrev:
		return 1, w - 1, nil
	}
	return 0, 0, fmt.Errorf("plans: register %s: unknown read mode %q", p.Registers[u.Reg].Name, u.Mode)
}

// ReadVersion is the version of register u.Reg read by a firing of
// micro-batch micro in iteration iter (−1: the initial value).
func (p *Plan) ReadVersion(u Use, iter, micro int) (int, error) {
	d, k, err := p.readIndex(u, micro)
	if err != nil {
		return 0, err
	}
	if k < 0 {
		return -1, nil
	}
	v := (iter-d)*p.WritesPerIteration(u.Reg) + k
	return max(v, -1), nil
}

// WriteVersion is the version of register r written by task t's firing of
// micro-batch micro in iteration iter.
func (p *Plan) WriteVersion(r, t, iter, micro int) int {
	k := 0
	for _, w := range p.Registers[r].Writers {
		if w == t {
			if p.Tasks[w].PerMicro {
				k += micro
			}
			break
		}
		k += p.Fires(w)
	}
	return iter*p.WritesPerIteration(r) + k
}

// Slot is the slot holding a version of register r.
func (p *Plan) Slot(r, version int) int {
	s := p.Registers[r].Slots
	return ((version % s) + s) % s
}

// FiringName names a firing for messages and traces.
func (p *Plan) FiringName(f int) string {
	fi := p.Firings[f]
	if fi.Micro < 0 {
		return p.Tasks[fi.Task].Name
	}
	return fmt.Sprintf("%s (mb %d)", p.Tasks[fi.Task].Name, fi.Micro)
}

// firingIndex returns a lookup from (task, micro) to firing: by offset
// where every task's firings are consecutive in micro-batch order (as the
// compiler lists them), else by a map.
func (p *Plan) firingIndex() func(task, micro int) int {
	first := make([]int, len(p.Tasks))
	for i := range first {
		first[i] = -1
	}
	dense := true
	for i, f := range p.Firings {
		m := max(f.Micro, 0)
		if first[f.Task] < 0 {
			first[f.Task] = i - m
		}
		if first[f.Task]+m != i {
			dense = false
			break
		}
	}
	if dense {
		return func(task, micro int) int {
			if !p.Tasks[task].PerMicro {
				micro = -1
			}
			return max(first[task], 0) + max(micro, 0)
		}
	}
	idx := make(map[[2]int]int, len(p.Firings))
	for i, f := range p.Firings {
		idx[[2]int{f.Task, f.Micro}] = i
	}
	return func(task, micro int) int {
		if !p.Tasks[task].PerMicro {
			micro = -1
		}
		return idx[[2]int{task, micro}]
	}
}

// Deps returns the plan's dependency edges, derived once. It fails if the
// plan can deadlock: a cycle of edges within one iteration (typically a
// register with too few slots for the schedule), reported with the firings
// and registers involved.
func (p *Plan) Deps() ([]Edge, error) {
	p.derive.Lock()
	defer p.derive.Unlock()
	if p.deps != nil {
		return p.deps, nil
	}
	firingOf := p.firingIndex()
	// Room for every edge asked for, counted ahead (a read and the slot
	// reuse it holds up, an in-place update likewise, an After, a stream
	// step), so that tens of millions are not grown into.
	size := len(p.Streams)
	for _, fi := range p.Firings {
		t := &p.Tasks[fi.Task]
		size += 2*len(t.Reads) + len(fi.After)
		if t.InPlace {
			size += 2 * len(t.Writes)
		}
	}
	for _, s := range p.Streams {
		size += len(s.Order)
	}
	edges := make([]ruled, 0, size)
	add := func(from, to, delta int, why rule, ref int) {
		if from == to && delta == 0 {
			return
		}
		edges = append(edges, ruled{int32(from), int32(to), int32(delta), why, int32(ref)})
	}

	// Every register's writes in order, wseq[wstart[r]:wstart[r+1]]:
	// write k of register r is number wstart[r]+k. Lists of lists are
	// kept in one array each here (a large plan has millions of writes
	// and tens of millions of reads), not grown one by one.
	wstart := make([]int32, len(p.Registers)+1)
	for r := range p.Registers {
		wstart[r+1] = wstart[r] + int32(p.WritesPerIteration(r))
	}
	wseq := make([]int32, 0, wstart[len(p.Registers)])
	var seq []int
	for r := range p.Registers {
		seq = p.appendWrites(seq[:0], r, firingOf)
		for _, f := range seq {
			wseq = append(wseq, int32(f))
		}
	}
	writes := func(r int) []int32 { return wseq[wstart[r]:wstart[r+1]] }
	// Who reads (or updates in place) each write: readers of write number
	// w are readers[rstart[w]:rstart[w+1]], firing f reading write k of
	// iteration i−d. A first walk counts them, a second fills them in and
	// adds the edges.
	type reader struct{ f, d int32 }
	rstart := make([]int32, len(wseq)+1)
	eachRead := func(visit func(f, r, k, d int, why rule)) error {
		for f, fi := range p.Firings {
			t := &p.Tasks[fi.Task]
			for _, u := range t.Reads {
				if p.Idle(t, u, fi.Micro) {
					continue
				}
				d, k, err := p.readIndex(u, fi.Micro)
				if err != nil {
					return err
				}
				if k < 0 {
					continue
				}
				visit(f, u.Reg, k, d, reads)
			}
			if t.InPlace {
				for _, r := range t.Writes {
					k := indexOf(writes(r), int32(f))
					d, prev := 0, k-1
					if prev < 0 {
						d, prev = 1, int(wstart[r+1]-wstart[r])-1
					}
					visit(f, r, prev, d, updates)
				}
			}
		}
		return nil
	}
	if err := eachRead(func(_, r, k, _ int, _ rule) { rstart[int(wstart[r])+k+1]++ }); err != nil {
		return nil, err
	}
	for w := range wseq {
		rstart[w+1] += rstart[w]
	}
	readers := make([]reader, rstart[len(wseq)])
	next := slices.Clone(rstart[:len(wseq)])
	eachRead(func(f, r, k, d int, why rule) { // no error: the first walk met none
		w := wstart[r] + int32(k)
		readers[next[w]] = reader{int32(f), int32(d)}
		next[w]++
		add(int(wseq[w]), f, d, why, r)
	})
	next = nil
	// Slot reuse: write k of iteration i waits for the readers of version
	// i·W + k − S.
	for r := range p.Registers {
		reg := &p.Registers[r]
		seq := writes(r)
		w := len(seq)
		for k, f := range seq {
			back := k - reg.Slots
			i0 := floorDiv(back, w) // iteration of that version, relative
			k0 := int(wstart[r]) + back - i0*w
			for _, rd := range readers[rstart[k0]:rstart[k0+1]] {
				delta := -i0 - int(rd.d)
				if delta < 0 {
					return nil, fmt.Errorf("plans: register %s on %s: %d slot(s) are too few: %s would overwrite a version %s reads in a later iteration",
						reg.Name, p.Devices[reg.Device].Name, reg.Slots, p.FiringName(int(f)), p.FiringName(int(rd.f)))
				}
				add(int(rd.f), int(f), delta, frees, r)
			}
		}
	}
	for f, fi := range p.Firings {
		for _, a := range fi.After {
			add(a, f, 0, after, f)
		}
	}
	for si, s := range p.Streams {
		for i, f := range s.Order {
			if i > 0 {
				add(s.Order[i-1], f, 0, follows, si)
			}
		}
		if n := len(s.Order); n > 0 {
			add(s.Order[n-1], s.Order[0], 1, wraps, si)
		}
	}
	// Sorted by target, one edge per (from, to, delta): the first rule
	// that asked for it names it.
	order := byTarget(edges, len(p.Firings))
	unique := func(k int) bool { return k == 0 || edges[order[k]].edge() != edges[order[k-1]].edge() }
	n := 0
	for k := range order {
		if unique(k) {
			n++
		}
	}
	plain := make([]Edge, 0, n)
	rules := make([]rule, 0, n)
	for k, i := range order {
		if unique(k) {
			plain = append(plain, edges[i].edge())
			rules = append(rules, edges[i].why)
		}
	}
	if cycle := p.findCycle(plain); cycle != nil {
		why := map[Edge]string{}
		for _, i := range order {
			if e := edges[i]; why[e.edge()] == "" {
				why[e.edge()] = p.ruleText(e.why, int(e.ref))
			}
		}
		var b strings.Builder
		for i, f := range cycle {
			next := cycle[(i+1)%len(cycle)]
			fmt.Fprintf(&b, "\n  %s waits for %s: it %s", p.FiringName(next), p.FiringName(f), why[Edge{From: f, To: next}])
		}
		return nil, fmt.Errorf("%w: a cycle of %d firings within one iteration:%s", ErrDeadlock, len(cycle), b.String())
	}
	p.deps, p.depRules = plain, rules
	return plain, nil
}

// byTarget returns the order that sorts edges by (To, From, Delta),
// stably: by target by counting (a firing has few edges in), then each
// target's edges. Indexes, not edges, are moved: a 1T-parameter plan has
// some 15 million edges.
func byTarget(edges []ruled, firings int) []int32 {
	start := make([]int32, firings+1)
	for _, e := range edges {
		start[e.to+1]++
	}
	for f := range firings {
		start[f+1] += start[f]
	}
	order := make([]int32, len(edges))
	next := slices.Clone(start[:firings])
	for i, e := range edges {
		order[next[e.to]] = int32(i)
		next[e.to]++
	}
	for f := range firings {
		slices.SortStableFunc(order[start[f]:start[f+1]], func(a, b int32) int {
			return cmp.Or(cmp.Compare(edges[a].from, edges[b].from), cmp.Compare(edges[a].delta, edges[b].delta))
		})
	}
	return order
}

// rule is why an edge exists, for deadlock messages and traces.
type rule uint8

const (
	reads   rule = iota // the target reads the source's write (ref: register)
	updates             // the target updates the source's write in place (register)
	frees               // the source's read frees the slot the target writes (register)
	follows             // the target follows the source on a stream (stream)
	wraps               // the next iteration of a stream starts after this one (stream)
	after               // the target lists the source as After (firing)
)

// ruled is an edge with its rule, in 20 bytes: a 1T-parameter plan has
// some 15 million. Indexes fit 31 bits (2³¹ firings would take 32 GiB).
type ruled struct {
	from, to, delta int32
	why             rule
	ref             int32
}

// traceWhy names the rule for trace.Dep.Why.
func (r rule) traceWhy() string {
	switch r {
	case reads:
		return "data"
	case updates:
		return "update"
	case frees:
		return "slot"
	case after:
		return "after"
	}
	return "stream"
}

func (r ruled) edge() Edge { return Edge{From: int(r.from), To: int(r.to), Delta: int(r.delta)} }

func (p *Plan) ruleText(why rule, ref int) string {
	switch why {
	case reads:
		return "reads " + p.Registers[ref].Name
	case updates:
		return "updates " + p.Registers[ref].Name
	case frees:
		return fmt.Sprintf("frees a slot of %s (%d slots)", p.Registers[ref].Name, p.Registers[ref].Slots)
	case follows:
		return "follows on stream " + p.streamName(p.Streams[ref])
	case after:
		return "is ordered after it (after)"
	default:
		return "next iteration on stream " + p.streamName(p.Streams[ref])
	}
}

func (p *Plan) streamName(s Stream) string { return p.Devices[s.Device].Name + "/" + s.Name }

// findCycle returns a cycle of same-iteration edges (Delta 0), or nil.
// Only these can deadlock: every other edge points to a later iteration.
func (p *Plan) findCycle(edges []Edge) []int {
	// Successor lists, compressed, in the edges' order.
	n := len(p.Firings)
	start := make([]int32, n+1)
	for _, e := range edges {
		if e.Delta == 0 {
			start[e.From+1]++
		}
	}
	for u := range n {
		start[u+1] += start[u]
	}
	succ := make([]int32, start[n])
	fill := slices.Clone(start[:n])
	for _, e := range edges {
		if e.Delta == 0 {
			succ[fill[e.From]] = int32(e.To)
			fill[e.From]++
		}
	}
	if len(depthFirstOrder(start, succ)) == n {
		return nil // acyclic, as nearly every plan: no search needed
	}
	const (
		white = iota
		grey
		black
	)
	color := make([]int, len(p.Firings))
	parent := make([]int, len(p.Firings))
	var cycle []int
	var visit func(int) bool
	visit = func(u int) bool {
		color[u] = grey
		for _, v := range succ[start[u]:start[u+1]] {
			v := int(v)
			switch color[v] {
			case grey:
				cycle = []int{v}
				for w := u; w != v; w = parent[w] {
					cycle = append(cycle, w)
				}
				// reverse into edge order v → … → u → v
				for i, j := 1, len(cycle)-1; i < j; i, j = i+1, j-1 {
					cycle[i], cycle[j] = cycle[j], cycle[i]
				}
				return true
			case white:
				parent[v] = u
				if visit(v) {
					return true
				}
			}
		}
		color[u] = black
		return false
	}
	for u := range p.Firings {
		if color[u] == white && visit(u) {
			return cycle
		}
	}
	return nil
}

func floorDiv(a, b int) int {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func indexOf(s []int32, x int32) int {
	for i, v := range s {
		if v == x {
			return i
		}
	}
	return -1
}
