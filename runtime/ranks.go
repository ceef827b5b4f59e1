package runtime

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/trace"
)

// A multi-process run splits a plan's devices over ranks. Each rank runs
// the streams of its devices exactly as one process runs all of them, by
// the plan's edges; what crosses ranks is a firing finishing on one rank
// that another waits for. Three rules make that so without a central
// scheduler:
//
//   - A firing's *performers* are the ranks that see it finish: its home
//     rank; for a transfer to another rank, also the receiver, which sees
//     it finish when the data lands; for an all-reduce over replicas on
//     several ranks, each of those, which finishes its own part.
//   - A rank that waits on an edge from a firing it does not perform hears
//     of it from the firing's *notifiers* (MsgDone): the receiver of a
//     cross-rank transfer (the data has landed), every part of an
//     all-reduce, else the home rank.
//   - The ranks of an all-reduce each send their replicas' registers to
//     the others (MsgPart) once their own edges allow, and each sums all
//     of them in replica order: every replica gets the bits one process
//     would compute. An edge into the all-reduce from a firing that
//     another of its ranks performs is that rank's to wait for: its part
//     arrives after it.
//
// A transfer's sender holds its stream until the receiver acknowledges
// (the receiver's MsgDone), so that the transfer occupies its stream from
// send to landing, as the simulator has it.

// ranked is a PlanRunner's part of a multi-process run.
type ranked struct {
	link  Link
	me    int
	ranks []int // by device
	runs  int   // Run calls so far

	// By firing:
	active  [][]int        // ranks that run it on one of their streams
	perform [][]int        // ranks that see it finish (active ⊆ perform)
	notify  [][]int        // the ranks that tell others it finished
	subs    [][]int        // ranks this rank tells when it finishes it
	need    []int          // MsgDones it waits for, if it does not perform it
	waits   [][]plans.Edge // the incoming edges this rank waits on
	home    []int          // its stream on this rank (−1: none)
	parts   []int          // all-reduces: registers of other ranks to receive
}

// NewRankRunner prepares rank link.Rank()'s part of a multi-process run of
// p: the devices d with ranks[d] equal to it. Every rank of the run makes
// its runner from the same plan and ranks, and they call Run together.
// Multi-process plans run on CPU devices.
func NewRankRunner(p *plans.Plan, ranks []int, link Link) (*PlanRunner, error) {
	if err := CheckRanks(p, ranks, link.Size()); err != nil {
		return nil, err
	}
	rk := &ranked{link: link, me: link.Rank(), ranks: ranks}
	return newPlanRunnerOn(p, nil, rk)
}

// CheckRanks checks a placement of p's devices on world ranks, before any
// process is started: one rank per device, every rank with a device, and
// only CPU devices (multi-process runs do not place GPUs yet).
func CheckRanks(p *plans.Plan, ranks []int, world int) error {
	if len(ranks) != len(p.Devices) {
		return fmt.Errorf("runtime: %d ranks given for the plan's %d devices", len(ranks), len(p.Devices))
	}
	used := make([]bool, world)
	for d, k := range ranks {
		if k < 0 || k >= world {
			return fmt.Errorf("runtime: device %s is placed on rank %d, outside the %d ranks", p.Devices[d].Name, k, world)
		}
		if isGPU(p.Devices[d]) {
			return fmt.Errorf("runtime: device %s is a %s: multi-process runs support CPU devices only", p.Devices[d].Name, p.Devices[d].Type)
		}
		used[k] = true
	}
	if k := slices.Index(used, false); k >= 0 {
		return fmt.Errorf("runtime: rank %d has none of the plan's %d devices", k, len(p.Devices))
	}
	return nil
}

// local says whether device d is this process's.
func (rk *ranked) local(d int) bool { return rk == nil || rk.ranks[d] == rk.me }

// derive computes who performs, notifies and waits for what.
func (rk *ranked) derive(p *plans.Plan, edges []plans.Edge) {
	n := len(p.Firings)
	rk.active = make([][]int, n)
	rk.perform = make([][]int, n)
	rk.notify = make([][]int, n)
	rk.subs = make([][]int, n)
	rk.need = make([]int, n)
	rk.waits = make([][]plans.Edge, n)
	rk.home = make([]int, n)
	rk.parts = make([]int, n)
	for f, fi := range p.Firings {
		t := &p.Tasks[fi.Task]
		src := rk.ranks[p.Streams[t.Streams[0]].Device]
		rk.active[f] = []int{src}
		rk.perform[f] = []int{src}
		rk.notify[f] = []int{src}
		switch t.Kind {
		case plans.Transfer:
			if dst := rk.ranks[p.Registers[t.Writes[0]].Device]; dst != src {
				rk.perform[f] = []int{src, dst}
				rk.notify[f] = []int{dst}
				rk.addSub(f, dst, src) // the acknowledgement
			}
		case plans.AllReduce, plans.AllGather, plans.ReduceScatter:
			var on []int
			for _, w := range t.Writes {
				k := rk.ranks[p.Registers[w].Device]
				if !slices.Contains(on, k) {
					on = append(on, k)
				}
				if k != rk.me {
					rk.parts[f]++
				}
			}
			if !slices.Contains(on, rk.me) {
				rk.parts[f] = 0
			}
			slices.Sort(on)
			rk.active[f], rk.perform[f], rk.notify[f] = on, on, on
		}
		rk.home[f] = -1
		for _, s := range t.Streams {
			if rk.local(p.Streams[s].Device) {
				rk.home[f] = s
				break
			}
		}
	}
	for _, e := range edges {
		for _, k := range rk.active[e.To] {
			switch {
			case slices.Contains(rk.perform[e.From], k):
			case len(rk.active[e.To]) > 1 && p.Tasks[p.Firings[e.To].Task].Kind.Collective() &&
				slices.ContainsFunc(rk.perform[e.From], func(j int) bool { return slices.Contains(rk.active[e.To], j) }):
				continue // another part waits for it
			default:
				for _, j := range rk.notify[e.From] {
					rk.addSub(e.From, j, k)
				}
				if k == rk.me {
					rk.need[e.From] = len(rk.notify[e.From])
				}
			}
			if k == rk.me {
				rk.waits[e.To] = append(rk.waits[e.To], e)
			}
		}
	}
}

// addSub records that notifier j tells rank k when firing f finishes (kept
// only where j is this rank).
func (rk *ranked) addSub(f, j, k int) {
	if j == rk.me && k != rk.me && !slices.Contains(rk.subs[f], k) {
		rk.subs[f] = append(rk.subs[f], k)
	}
}

// performs says whether this rank sees firing f finish by itself.
func (rk *ranked) performs(f int) bool { return slices.Contains(rk.perform[f], rk.me) }

// rankRun is a Run's multi-process state; run.mu guards it.
type rankRun struct {
	id     int
	heard  map[[2]int]int        // MsgDones by (firing, iteration), for notifiers of several ranks
	parts  map[[2]int][]*Message // all-reduce parts received, by (firing, iteration)
	landed []trace.Event         // cross-rank transfers received here
}

// send tells the ranks subscribed to firing f of iteration it that it
// finished here.
func (x *run) notify(f, it int) error {
	rk := x.r.rk
	for _, k := range rk.subs[f] {
		if err := rk.link.Send(k, &Message{Run: x.rr.id, From: rk.me, Kind: MsgDone, Firing: f, Iter: it}); err != nil {
			return fmt.Errorf("runtime: telling rank %d of %s: %w", k, x.r.p.FiringName(f), err)
		}
	}
	return nil
}

// receive handles the run's messages until the run ends or the link fails.
func (x *run) receive(inbox <-chan *Message, quit <-chan struct{}, fail func(error)) {
	for {
		select {
		case <-quit:
			return
		case <-x.ctx.Done():
			return
		case m, ok := <-inbox:
			if !ok {
				err := x.r.rk.link.Err()
				if err == nil {
					err = fmt.Errorf("runtime: the link to the other ranks closed")
				}
				fail(err)
				return
			}
			if err := x.handle(m); err != nil {
				fail(err)
				return
			}
		}
	}
}

// handle applies one message from another rank.
func (x *run) handle(m *Message) error {
	p := x.r.p
	rk := x.r.rk
	if m.Firing < 0 || m.Firing >= len(p.Firings) || m.Iter < 0 || m.Iter >= x.iters {
		return fmt.Errorf("runtime: rank %d sent a message about firing %d of iteration %d, outside the plan's %d firings and %d iterations",
			m.From, m.Firing, m.Iter, len(p.Firings), x.iters)
	}
	f, it := m.Firing, m.Iter
	switch m.Kind {
	case MsgData:
		fi := p.Firings[f]
		t := &p.Tasks[fi.Task]
		dst := t.Writes[0]
		if t.Kind != plans.Transfer || !rk.local(p.Registers[dst].Device) {
			return fmt.Errorf("runtime: rank %d sent data for %s, which lands elsewhere", m.From, p.FiringName(f))
		}
		b := x.r.slot(dst, p.Slot(dst, p.WriteVersion(dst, t.ID, it, fi.Micro)))
		if len(b.F) != len(m.F) || len(b.I) != len(m.I) {
			return fmt.Errorf("runtime: rank %d sent %d+%d values for %s, which holds %d+%d",
				m.From, len(m.F), len(m.I), p.FiringName(f), len(b.F), len(b.I))
		}
		copy(b.F, m.F)
		copy(b.I, m.I)
		now := trace.Time(time.Since(x.start))
		x.mu.Lock()
		x.rr.landed = append(x.rr.landed, trace.Event{Task: int32(fi.Task), Iter: int32(it), Micro: int32(fi.Micro), Start: now, End: now})
		x.finish(f, it)
		x.mu.Unlock()
		return x.notify(f, it)
	case MsgPart:
		x.mu.Lock()
		key := [2]int{f, it}
		x.rr.parts[key] = append(x.rr.parts[key], m)
		x.cond.Broadcast()
		x.mu.Unlock()
	case MsgDone:
		x.mu.Lock()
		defer x.mu.Unlock()
		if rk.performs(f) { // a transfer's receiver acknowledging
			x.finish(f, it)
			return nil
		}
		x.rr.heard[[2]int{f, it}]++
		// Notifiers report in iteration order each, not together.
		for x.done[f] < x.iters && x.rr.heard[[2]int{f, x.done[f]}] == rk.need[f] {
			delete(x.rr.heard, [2]int{f, x.done[f]})
			x.finish(f, x.done[f])
		}
	default:
		return fmt.Errorf("runtime: rank %d sent a message of unknown kind %d", m.From, m.Kind)
	}
	return nil
}

// sendTransfer sends a cross-rank transfer's data and waits until the
// receiver has it.
func (x *run) sendTransfer(f, it int, src Buffer) error {
	p := x.r.p
	rk := x.r.rk
	t := &p.Tasks[p.Firings[f].Task]
	to := rk.ranks[p.Registers[t.Writes[0]].Device]
	m := &Message{Run: x.rr.id, From: rk.me, Kind: MsgData, Firing: f, Iter: it, Reg: t.Writes[0], F: src.F, I: src.I}
	if err := rk.link.Send(to, m); err != nil {
		return fmt.Errorf("sending to rank %d: %w", to, err)
	}
	return x.await(func() bool { return x.done[f] > it })
}

// await blocks until cond (called with x.mu held) holds or the run fails.
func (x *run) await(cond func() bool) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	for !cond() {
		if err := context.Cause(x.ctx); err != nil {
			return err
		}
		x.cond.Wait()
	}
	return nil
}

// allReduceRanks runs this rank's part of a collective over several
// ranks: it sends its members' registers to the other ranks, receives
// theirs, and combines them all in member order into its own: for an
// all-reduce the registers written (each a copy of its read, for a
// tensor-parallel sum), for an all-gather or a reduce-scatter the
// registers read.
func (x *run) allReduceRanks(t *plans.Task, f, it int, reads, writes []Buffer) error {
	p := x.r.p
	rk := x.r.rk
	split := t.Kind != plans.AllReduce
	send, sizeOf := writes, func(i int) int { return p.Registers[t.Writes[i]].Spec.Shape.NumElements() }
	if split {
		send, sizeOf = reads, func(i int) int { return p.Registers[t.Reads[i].Reg].Spec.Shape.NumElements() }
	}
	var dev *CPU
	for i, w := range t.Writes {
		d := p.Registers[w].Device
		if !rk.local(d) {
			continue
		}
		dev = x.r.devs[d]
		for _, k := range rk.active[f] {
			if k == rk.me {
				continue
			}
			m := &Message{Run: x.rr.id, From: rk.me, Kind: MsgPart, Firing: f, Iter: it, Reg: w, F: send[i].F}
			if err := rk.link.Send(k, m); err != nil {
				return fmt.Errorf("sending to rank %d: %w", k, err)
			}
		}
	}
	key := [2]int{f, it}
	if err := x.await(func() bool { return len(x.rr.parts[key]) == rk.parts[f] }); err != nil {
		return err
	}
	x.mu.Lock()
	got := x.rr.parts[key]
	delete(x.rr.parts, key)
	x.mu.Unlock()
	bufs := slices.Clone(send)
	for _, m := range got {
		i := slices.Index(t.Writes, m.Reg)
		if i < 0 || rk.local(p.Registers[m.Reg].Device) || bufs[i].F != nil {
			return fmt.Errorf("runtime: rank %d sent register %d for %s, not one of its parts", m.From, m.Reg, p.FiringName(f))
		}
		if len(m.F) != sizeOf(i) {
			return fmt.Errorf("runtime: rank %d sent %d values of %s for %s, which has %d",
				m.From, len(m.F), p.Registers[m.Reg].Name, p.FiringName(f), sizeOf(i))
		}
		bufs[i] = Buffer{F: m.F}
	}
	for i, b := range bufs {
		if b.F == nil {
			return fmt.Errorf("runtime: %s lacks %s", p.FiringName(f), p.Registers[t.Writes[i]].Name)
		}
	}
	if split {
		return splitCollective(dev.pool, p, t, bufs, writes)
	}
	allReduce(dev.pool, bufs, p.AllReduceWeights(t))
	return nil
}

// RankResult is what one rank of a multi-process run measured, for
// MergeRanks.
type RankResult struct {
	Rank int
	// Start is the rank's clock when the run started; event times count
	// from it.
	Start time.Time
	// Events are the firings the rank ran: for an all-reduce, its part;
	// for a transfer to another rank, from sending to the acknowledgement.
	Events []trace.Event
	// Landed are the transfers from other ranks received here: Start and
	// End are when the data landed.
	Landed []trace.Event
	// Loss sums, by iteration, the rank's loss firings' shares of the
	// iteration's mean loss.
	Loss []float64
}

// MergeRanks combines the results of a multi-process run's ranks into the
// run's result, on the clock of parts[0]'s rank. offsets[k] is rank k's
// clock minus that rank's. A transfer to another rank lasts from its send
// to its landing; an all-reduce over several ranks from the last part's
// start to the first part's end, the span in which all of its ranks were
// in it.
func MergeRanks(p *plans.Plan, parts []*RankResult, offsets []time.Duration) (*RunResult, error) {
	if len(parts) == 0 || len(offsets) != len(parts) {
		return nil, fmt.Errorf("runtime: merging %d rank results with %d clock offsets", len(parts), len(offsets))
	}
	type key struct{ task, iter, micro int32 }
	at := map[key]*trace.Event{}
	var order []key
	res := &RunResult{Loss: make([]float64, len(parts[0].Loss))}
	shift := make([]trace.Time, len(parts)) // to rank 0's clock
	for k, part := range parts {
		shift[k] = trace.Time(part.Start.Sub(parts[0].Start) - offsets[k])
	}
	for k, part := range parts {
		if len(part.Loss) != len(res.Loss) {
			return nil, fmt.Errorf("runtime: rank %d ran %d iterations, rank %d %d", part.Rank, len(part.Loss), parts[0].Rank, len(res.Loss))
		}
		for i, l := range part.Loss {
			res.Loss[i] += l
		}
		for _, e := range part.Events {
			e.Start += shift[k]
			e.End += shift[k]
			id := key{e.Task, e.Iter, e.Micro}
			if int(e.Task) < 0 || int(e.Task) >= len(p.Tasks) {
				return nil, fmt.Errorf("runtime: rank %d recorded task %d, outside the plan's %d", part.Rank, e.Task, len(p.Tasks))
			}
			prev, ok := at[id]
			switch {
			case !ok:
				at[id] = &e
				order = append(order, id)
			case p.Tasks[e.Task].Kind.Collective():
				prev.Start = max(prev.Start, e.Start)
				prev.End = min(prev.End, e.End)
			default:
				return nil, fmt.Errorf("runtime: ranks %d and another both ran task %s", part.Rank, p.Tasks[e.Task].Name)
			}
		}
	}
	for k, part := range parts {
		for _, e := range part.Landed {
			ev, ok := at[key{e.Task, e.Iter, e.Micro}]
			if !ok {
				return nil, fmt.Errorf("runtime: rank %d received %s of iteration %d, which no rank sent", part.Rank, p.Tasks[e.Task].Name, e.Iter)
			}
			ev.End = e.End + shift[k]
		}
	}
	tr := p.NewTrace("runtime")
	for _, id := range order {
		e := *at[id]
		e.End = max(e.End, e.Start) // clock uncertainty between hosts
		tr.Events = append(tr.Events, e)
	}
	slices.SortFunc(tr.Events, func(a, b trace.Event) int { return cmp.Compare(a.Start, b.Start) })
	res.Trace = tr
	prev := trace.Time(0)
	for _, end := range tr.IterationEnds() {
		res.Steps = append(res.Steps, end.Sub(prev))
		prev = end
	}
	return res, nil
}

// homeOf is the stream that runs firing f in this process: its home
// stream, or in a multi-process run the first of its streams on this
// rank's devices (−1 if none is).
func (r *PlanRunner) homeOf(f int) int {
	if r.rk != nil {
		return r.rk.home[f]
	}
	return r.streamOf(f)
}

// startReceiving handles the run's messages from the other ranks until the
// returned stop is called; a bad message or a failed link cancels the run.
func (x *run) startReceiving(cancel context.CancelCauseFunc) (stop func()) {
	rk := x.r.rk
	quit := make(chan struct{})
	done := make(chan struct{})
	fail := func(err error) {
		cancel(err)
		x.mu.Lock()
		x.cond.Broadcast()
		x.mu.Unlock()
	}
	go func() {
		defer close(done)
		x.receive(rk.link.Inbox(x.rr.id), quit, fail)
	}()
	return func() {
		close(quit)
		<-done
	}
}
