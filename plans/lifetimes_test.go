package plans

import (
	"fmt"
	"testing"

	"github.com/flowkit/flowkit/graph"

	"github.com/stretchr/testify/require"
)

// The vector clocks decide exactly what a reachability matrix over two
// unrolled iterations decides, pair by pair of every device's registers,
// over plans with pipelines, replicas, tensor-parallel groups, GPipe and
// recompute (where backward temporaries are written once per micro-batch),
// and a pipeline over more streams than one clock pass tracks.
func TestLifetimesMatchReachability(t *testing.T) {
	for _, c := range []struct {
		model, strategy string
		batch, devices  int // devices: 4 if 0
	}{
		{"mnist-cnn", "single", 8, 0},
		{"mnist-cnn", "dp=2,pp=2,mb=4", 16, 0},
		{"mnist-cnn", "pp=2,mb=3,sched=gpipe", 6, 0},
		{"mlp", "dp=2,mb=2:1", 6, 0},
		{"mlp3x4096:width=64", "tp=2,pp=2,mb=3", 6, 0},
		{"gpt:layers=2,hidden=32,heads=2,seq=8,vocab=64", "pp=2,mb=4,recompute=full", 8, 0},
		{"gpt:layers=2,hidden=32,heads=2,seq=8,vocab=64", "tp=2,mb=3,recompute=selective", 6, 0},
		{"gpt2s-blocks:layers=4,hidden=32,heads=2,seq=8", "pp=2,mb=4,sched=gpipe,recompute=full", 8, 0},
		// More streams than one clock pass tracks: passes run side by side.
		{"gpt:layers=18,hidden=32,heads=2,seq=8,vocab=64", "pp=18,mb=4,recompute=full", 4, 18},
	} {
		st, err := ParseStrategy(c.strategy, c.batch)
		require.NoError(t, err)
		devices := devs(4, 0)
		if c.devices > 0 {
			devices = make([]Device, c.devices)
			for i := range devices {
				devices[i] = Device{Name: fmt.Sprintf("cpu%d", i), Type: "cpu", Workers: 1}
			}
		}
		p, err := Compile(Config{Model: c.model, Batch: c.batch, Strategy: st, Optimizer: graph.SGD{LR: 0.01, Momentum: 0.9}, Devices: devices})
		require.NoError(t, err)
		edges, err := p.Deps()
		require.NoError(t, err)
		touch, versions := p.registerTouches(), p.versionTouches()
		writers := make([][]int, len(p.Registers))
		for f, fi := range p.Firings {
			for _, r := range p.Tasks[fi.Task].Writes {
				writers[r] = append(writers[r], f)
			}
		}
		lives := newLifetimes(p, edges, touch, versions)
		reach := newReachability(len(p.Firings), edges)
		all := func(xs []int, ok func(int) bool) bool {
			for _, x := range xs {
				if !ok(x) {
					return false
				}
			}
			return true
		}
		ordered := func(a, b int) bool {
			return all(touch[a], func(x int) bool { return all(writers[b], func(w int) bool { return reach.within(x, w) }) }) &&
				all(touch[b], func(y int) bool { return all(writers[a], func(w int) bool { return reach.next(y, w) }) })
		}
		want := func(a, b int) bool {
			va, vb := lives.versions[a], lives.versions[b] // versions the clocks found chained
			if va == nil || vb == nil {
				return ordered(a, b) || ordered(b, a)
			}
			for _, ta := range versions[a] {
				for _, tb := range versions[b] {
					wa, wb := ta[0], tb[0]
					if !all(ta, func(x int) bool { return reach.within(x, wb) }) && !all(tb, func(y int) bool { return reach.within(y, wa) }) {
						return false
					}
					if !all(ta, func(x int) bool { return reach.next(x, wb) }) || !all(tb, func(y int) bool { return reach.next(y, wa) }) {
						return false
					}
				}
			}
			return true
		}
		pairs, sharing, chained := 0, 0, 0
		for a := range p.Registers {
			if p.Registers[a].Persistent {
				continue
			}
			if versions[a] != nil {
				require.NotNil(t, lives.versions[a], "%s %s: %s: one-slot writes form a chain", c.model, c.strategy, p.Registers[a].Name)
				chained++
			}
			for b := range a {
				if p.Registers[b].Persistent || p.Registers[b].Device != p.Registers[a].Device {
					continue
				}
				w := want(a, b)
				require.Equal(t, w, lives.disjoint(a, b), "%s %s: %s and %s", c.model, c.strategy, p.Registers[a].Name, p.Registers[b].Name)
				require.Equal(t, w, lives.disjoint(b, a))
				pairs++
				if w {
					sharing++
				}
			}
		}
		require.Positive(t, sharing, "%s %s", c.model, c.strategy)
		require.Less(t, sharing, pairs, "%s %s", c.model, c.strategy)
		t.Logf("%s %s: %d pairs, %d may share; %d registers by write", c.model, c.strategy, pairs, sharing, chained)
	}
}

// reachability answers "does firing a of iteration i finish before firing
// b of iteration i (within) or of iteration i+1 (next) starts" with a
// bit matrix over two unrolled iterations: the reference the clocks are
// checked against (it was the planner's until plans outgrew n² bits).
type reachability struct {
	n    int
	from [][]uint64 // node f+n is firing f of the next iteration
}

func newReachability(n int, edges []Edge) *reachability {
	r := &reachability{n: n}
	words := (2*n + 63) / 64
	succ := make([][]int, 2*n)
	for _, e := range edges {
		switch e.Delta {
		case 0:
			succ[e.From] = append(succ[e.From], e.To)
			succ[e.From+n] = append(succ[e.From+n], e.To+n)
		case 1:
			succ[e.From] = append(succ[e.From], e.To+n)
		}
	}
	order := topoOrder(succ)
	r.from = make([][]uint64, 2*n)
	for i := len(order) - 1; i >= 0; i-- {
		v := order[i]
		set := make([]uint64, words)
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

func (r *reachability) has(a, b int) bool    { return r.from[a][b/64]&(1<<(b%64)) != 0 }
func (r *reachability) within(a, b int) bool { return a != b && r.has(a, b) }
func (r *reachability) next(a, b int) bool   { return r.has(a, b+r.n) }

// firingIndex finds every firing, whether the plan lists each task's
// firings together in micro-batch order (the compiler's layout: offsets)
// or in any order (a map).
func TestFiringIndex(t *testing.T) {
	p := mustCompile(t, "mlp", "dp=2,mb=3", 12)
	check := func() {
		at := p.firingIndex()
		for i, f := range p.Firings {
			require.Equal(t, i, at(f.Task, f.Micro), "%+v", f)
		}
	}
	check()
	p.Firings[0], p.Firings[len(p.Firings)-1] = p.Firings[len(p.Firings)-1], p.Firings[0]
	check()
}
