package plans

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
)

// order creates the firings and fixes every stream's order for one
// iteration: the compute streams by the pipeline schedule, all-reduces in
// the order gradients become ready, transfers in the order their data is
// produced.
func (c *compiler) order() {
	// A task's firings are consecutive, by micro-batch: firing (t, m) is
	// first[t] + m (m = −1, a per-iteration task's only firing, is first[t]).
	first := make([]int, len(c.p.Tasks))
	c.p.Firings = slices.Grow(c.p.Firings, c.p.firingCount()) // millions, for the largest plans
	for _, t := range c.p.Tasks {
		first[t.ID] = len(c.p.Firings)
		if t.PerMicro {
			for m := range c.p.Fires(t.ID) {
				c.p.Firings = append(c.p.Firings, Firing{Task: t.ID, Micro: m})
			}
		} else {
			c.p.Firings = append(c.p.Firings, Firing{Task: t.ID, Micro: -1})
		}
	}
	at := func(t, m int) int { return first[t] + max(m, 0) }
	// Every firing is once on each stream of its task: the orders are
	// made that long at once, not grown (millions of firings, for the
	// largest plans).
	want := make([]int, len(c.p.Streams))
	for _, t := range c.p.Tasks {
		for _, s := range t.Streams {
			want[s] += c.p.Fires(t.ID)
		}
	}
	for s := range c.p.Streams {
		if want[s] > 0 { // else nil, as a plan file writes an empty order
			c.p.Streams[s].Order = make([]int, 0, want[s])
		}
	}
	block := func(tasks []int, m int) []int {
		fs := make([]int, len(tasks))
		for i, t := range tasks {
			fs[i] = at(t, m)
		}
		return fs
	}
	for d := range c.p.Devices {
		cs, ok := c.streams[d]["compute"]
		if !ok { // a tensor-parallel rank the plan leaves out (Config.SharedTP)
			continue
		}
		compute := &c.p.Streams[cs]
		f, b := c.fwd[d], c.bwd[d]
		// ZeRO stage 3's prefetch: gathers ahead of their layers, and
		// bounded by the release of earlier layers (prefetch.go).
		var fu, bu [][]gatherUnit
		var released []int
		if c.gatherLayer != nil {
			fu, bu = make([][]gatherUnit, len(f)), make([][]gatherUnit, len(b))
			for k := range f {
				f[k], fu[k] = c.prefetchBlock(d, f[k])
				b[k], bu[k] = c.prefetchBlock(d, b[k])
			}
		}
		replica := c.p.Replica(d)
		for _, step := range c.schedule(replica, c.p.Stage(d)) {
			tasks := b[step.chunk]
			if step.forward {
				tasks = f[step.chunk]
			}
			// A round the replica has no micro-batch in: the block's
			// round tasks only (Task.Rounds).
			idle := step.micro >= c.st.Micros(replica)
			if fu != nil {
				units := bu[step.chunk]
				if step.forward {
					units = fu[step.chunk]
				}
				released = c.boundGathers(units, step.micro, idle, released, at)
			}
			// A block's tasks on another stream of the device (ZeRO's
			// per-micro-batch collectives on a GPU's coll stream) keep
			// the block's order there: gathers ahead of their readers,
			// reduce-scatters after their producers.
			for _, t := range tasks {
				if idle && !c.p.Tasks[t].Rounds {
					continue
				}
				s := c.streamOn(t, d)
				c.p.Streams[s].Order = append(c.p.Streams[s].Order, at(t, step.micro))
			}
		}
		// All-reduces in the order gradients become ready (on the stream
		// each occupies on this device), then the updates.
		for _, t := range c.colls[d] {
			for _, s := range c.p.Tasks[t].Streams {
				if c.p.Streams[s].Device == d {
					c.p.Streams[s].Order = append(c.p.Streams[s].Order, at(t, -1))
				}
			}
		}
		compute.Order = append(compute.Order, block(c.updates[d], -1)...)
		// ZeRO's all-gathers of the updated weights follow the updates.
		for _, t := range c.gathers[d] {
			for _, s := range c.p.Tasks[t].Streams {
				if c.p.Streams[s].Device == d {
					c.p.Streams[s].Order = append(c.p.Streams[s].Order, at(t, -1))
				}
			}
		}
	}
	// Transfers follow their data: on the sending device, right after the
	// firing that produced it (on its compute stream, for a CPU), or in that
	// order on a stream of their own; a firing's transfers by destination.
	keys := slices.Collect(maps.Keys(c.xfers))
	slices.SortFunc(keys, func(a, b [2]int) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	sends := make([][]int, len(c.p.Tasks)) // producing task → its transfer tasks
	for _, k := range keys {
		sends[k[0]] = append(sends[k[0]], c.xfers[k]...)
	}
	for d := range c.p.Devices {
		cs, ok := c.streams[d]["compute"]
		if !ok {
			continue
		}
		compute := &c.p.Streams[cs]
		var order []int
		if want[cs] > 0 {
			order = make([]int, 0, want[cs])
		}
		for _, f := range compute.Order {
			order = append(order, f)
			fi := c.p.Firings[f]
			for _, x := range sends[fi.Task] {
				s := c.p.Tasks[x].Streams[0]
				if c.p.Streams[s].Device != d {
					// A group's collective produced it: the member that
					// sends it places it, after its own firing.
					continue
				}
				xf := at(x, fi.Micro)
				if s == cs {
					order = append(order, xf)
				} else {
					c.p.Streams[s].Order = append(c.p.Streams[s].Order, xf)
				}
			}
		}
		compute.Order = order
	}
}

// streamOn is the stream task t occupies on device d.
func (c *compiler) streamOn(t, d int) int {
	for _, s := range c.p.Tasks[t].Streams {
		if c.p.Streams[s].Device == d {
			return s
		}
	}
	panic(fmt.Sprintf("plans: task %s has no stream on device %d", c.p.Tasks[t].Name, d)) // the compiler put it in d's blocks
}

type step struct {
	forward bool
	micro   int
	chunk   int // of the device's stages (interleaved schedules)
}

// schedule is the order of forward and backward micro-batch blocks on a
// pipeline stage (a device's rank in the pipeline) of a replica: over its
// micro-batches, or under ZeRO stages 2 and 3 over the rounds
// (Task.Rounds), the most micro-batches of any replica, so that the
// replicas meet in their round collectives in the same order. Steps of
// rounds past the replica's micro-batches are idle: they run only their
// blocks' round tasks. (Under GPipe and 1F1B the steps of the replica's
// micro-batches keep the order of its own schedule: see
// TestRoundScheduleKeepsOwnOrder.)
func (c *compiler) schedule(replica, stage int) []step {
	mb := c.st.Micros(replica)
	if c.st.Zero >= 2 {
		mb = c.st.MB
	}
	if v := c.st.VirtualStages(); v > 1 {
		return interleaved(c.st.PP, v, stage, mb)
	}
	var s []step
	if c.st.Sched == GPipe {
		for m := range mb {
			s = append(s, step{true, m, 0})
		}
		for m := range mb {
			s = append(s, step{false, m, 0})
		}
		return s
	}
	warm := min(c.st.PP-stage-1, mb)
	for m := range warm {
		s = append(s, step{true, m, 0})
	}
	for m := range mb - warm {
		s = append(s, step{true, warm + m, 0}, step{false, m, 0})
	}
	for m := mb - warm; m < mb; m++ {
		s = append(s, step{false, m, 0})
	}
	return slices.Clip(s)
}

// interleaved is Megatron-LM's interleaved 1F1B schedule (Narayanan et
// al., 2021) for pipeline rank r of pp, each holding v chunks (model
// stages r, r+pp, …), over mb micro-batches (a multiple of pp): forward
// blocks go pp micro-batches through chunk 0, then the same pp through
// chunk 1, …, then the next pp; backward blocks likewise from the last
// chunk down. Rank r runs 2·(pp−r−1) + (v−1)·pp forwards to warm up, then
// alternates one forward and one backward, then drains.
func interleaved(pp, v, r, mb int) []step {
	total := mb * v
	at := func(k int, forward bool) step {
		chunk := k / pp % v
		if !forward {
			chunk = v - 1 - chunk
		}
		return step{forward, k/(pp*v)*pp + k%pp, chunk}
	}
	warm := min(2*(pp-r-1)+(v-1)*pp, total)
	var s []step
	for k := range warm {
		s = append(s, at(k, true))
	}
	for k := range total - warm {
		s = append(s, at(warm+k, true), at(k, false))
	}
	for k := total - warm; k < total; k++ {
		s = append(s, at(k, false))
	}
	return s
}
