package plans

import (
	"slices"

	"github.com/flowkit/flowkit/graph"
)

// This file is ZeRO stage 3's prefetch (Strategy.Prefetch), as FSDP does
// it: each layer's gathers are issued a layer (or N) ahead of the layer
// that reads them, on the device's gather stream, so that they overlap
// the compute of the layers before; and a layer's gathers wait until the
// layer N+1 before it, in the order the device runs them, has released
// its gathered weights (FSDP's limit_all_gathers), so that at most N+1
// layers' weights are whole at once and the memory planner, which plans
// for every execution the edges allow, reuses the bytes of the others.
//
// Registers are typed by shape, so the bound is not a buffer of N+1
// layers shared by all of them: each weight keeps its one-slot register,
// and the bound is an order, the first gather of a layer listing the
// last reader of that earlier layer's gathered weights among its
// firing's After.

// gatherUnit is one layer's gathers in a micro-batch block of a device:
// the gather tasks in order and the block's last task reading one of
// their registers, which releases them. Bounded says whether the gathers
// wait for the release of the unit N+1 before them in the block (those
// of the block's first N+1 units wait for units of earlier blocks).
type gatherUnit struct {
	gathers []int
	release int
	bounded bool
}

// nodeLayer is the layer of a forward node, or of the forward node a
// backward node derives from (−1 if none).
func (c *compiler) nodeLayer(n *graph.Node) int {
	if n.Phase != graph.Forward {
		n = n.Origin
	}
	if n == nil {
		return -1
	}
	if l, ok := c.layerOf[n.ID]; ok {
		return l
	}
	return -1
}

// prefetchBlock reorders the tasks of one of device dev's micro-batch
// blocks so that each layer's gathers come right after the release of the
// layer N+1 before it (N the prefetch depth), and returns the block's
// layers of gathers in order. The first N+1 layers' gathers go to the
// block's start: what they wait for is in earlier blocks. Where a layer's
// weights are read after the next layer's first reader (a weight read in
// two layers), the later layer's gathers stay just before their first
// reader, unbounded within the block.
func (c *compiler) prefetchBlock(dev int, tasks []int) ([]int, []gatherUnit) {
	var units []gatherUnit
	var first, last []int   // positions of each unit's first and last readers
	unitOf := map[int]int{} // gathered register on dev → unit
	moved := map[int]bool{} // gather tasks
	layer := -1
	for i, t := range tasks {
		if l, ok := c.gatherLayer[t]; ok {
			if len(units) == 0 || l >= 0 && l != layer {
				units = append(units, gatherUnit{})
				first, last = append(first, -1), append(last, -1)
			}
			if l >= 0 {
				layer = l
			}
			u := len(units) - 1
			units[u].gathers = append(units[u].gathers, t)
			moved[t] = true
			for _, r := range c.p.Tasks[t].Writes {
				if c.p.Registers[r].Device == dev {
					unitOf[r] = u
				}
			}
			continue
		}
		for _, use := range c.p.Tasks[t].Reads {
			if u, ok := unitOf[use.Reg]; ok {
				units[u].release, last[u] = t, i
				if first[u] < 0 {
					first[u] = i
				}
			}
		}
	}
	if units == nil {
		return tasks, nil
	}
	n := c.st.Prefetch
	after := map[int][]int{} // position → the gathers placed after it (−1: the block's start)
	at := -1
	for i := range units {
		u := &units[i]
		switch {
		case i <= n:
		case max(at, last[i-n-1]) < first[i]:
			at = max(at, last[i-n-1])
			u.bounded = true
		default:
			at = first[i] - 1
		}
		after[at] = append(after[at], u.gathers...)
	}
	out := slices.Clone(after[-1])
	for i, t := range tasks {
		if !moved[t] {
			out = append(out, t)
		}
		out = append(out, after[i]...)
	}
	return out, units
}

// boundGathers adds the After edges of one block's layers of gathers (see
// prefetchBlock), fired for micro-batch micro: the first gather of each
// waits for the release of the layer N+1 before it among the device's
// layers so far (released: their releasing firings, in the device's
// order), which it returns extended by the block's. In an idle round (see
// schedule) nothing reads the gathered weights: a layer's last gather
// releases them.
func (c *compiler) boundGathers(units []gatherUnit, micro int, idle bool, released []int, at func(t, m int) int) []int {
	n := c.st.Prefetch
	for i, u := range units {
		if g := len(released); g > n && (i <= n || u.bounded) {
			f := &c.p.Firings[at(u.gathers[0], micro)]
			if a := released[g-n-1]; !slices.Contains(f.After, a) {
				f.After = append(f.After, a)
			}
		}
		release := u.release
		if idle {
			release = u.gathers[len(u.gathers)-1]
		}
		released = append(released, at(release, micro))
	}
	return released
}
