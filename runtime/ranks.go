package runtime

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/kernels/cpu"
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
//     it finish when the data lands; for a collective (all-reduce,
//     reduce-scatter, all-gather) whose members are on several ranks,
//     each of those, whose part finishes when its own members' writes
//     are complete.
//   - A rank that waits on an edge from a firing it does not perform hears
//     of it from the firing's *notifiers* (MsgDone): the receiver of a
//     cross-rank transfer (the data has landed), every rank of a
//     collective (the waiter counts them all), else the home rank.
//   - A collective's ranks exchange only what each needs, directly. An
//     all-reduce splits its registers into one contiguous chunk per rank
//     taking part (chunkOf; small registers leave the last chunks empty):
//     once its own edges allow, each rank sends chunk k of each of its
//     members' registers to the k-th of those ranks (MsgPart); that rank
//     sums chunk k over all members in member order, with the weights one
//     process uses (reduce), and sends the result to the others
//     (MsgReduced). A reduce-scatter sends each member's part i of its
//     read to member i's rank, which sums the parts as one process does;
//     an all-gather sends each member's read to the other ranks. So every
//     replica gets the bits one process computes, and an all-reduce costs
//     each rank 2(n−1)/n of the register, not n−1 times it. An edge into a
//     collective from a firing that another of its ranks performs is
//     that rank's alone to wait for: it sends its parts after, and every
//     rank's result is made of every rank's parts.
//
// Every message names its run, firing, iteration and sender, and a part
// its member (Reg) and chunk; a rank keeps a collective's messages until
// its part takes them, since other ranks may be ahead of it.
//
// A transfer's sender holds its stream until the receiver acknowledges
// (the receiver's MsgDone), so that the transfer occupies its stream from
// send to landing, as the simulator has it.
//
// A run stops early only where every rank stops: after the same whole
// iterations, so that the weights of every rank are those of that many
// steps. Rank 0 decides, once its Stop closes (stopRanks): it pauses its
// own run and sends every rank MsgPause; a paused rank begins no iteration
// that none of its streams has begun (those in flight go on) and answers
// with the iterations it has begun (MsgBegun). Rank 0 takes the most any
// rank has begun, L, and sends MsgStopAt L; each rank then runs up to L
// and no further. The answers come from each rank's receiving goroutine,
// not its streams, so they wait for no firing; and a rank paused at b ≤ L
// only waits for L, after which the run is a run of L iterations, which
// every rank can finish (an iteration's firings need none of a later
// iteration's). A rank whose streams have run all of the Run's iterations
// may end its Run before MsgPause reaches it, and its inbox then drops
// it: so every rank but 0 sends MsgBegun unasked at the end of each Run.
// A rank lost, stalled or failed meanwhile fails the run as it would
// otherwise: the link's error, ErrStalled or its MsgFailed.
//
// Another rank's Stop closing asks rank 0 to stop (MsgStopRequest, sent
// once a Run, at its start if Stop closed before): rank 0's StopAsked
// hears of it, and closes rank 0's Stop if the caller so chooses (flowrun
// does as for rank 0's own interrupt). A request that comes between two
// Runs waits in the inbox for the next.

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
	parts   []int          // collectives: MsgParts to receive
	sums    []int          // all-reduces: MsgReduced to receive
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
	rk.sums = make([]int, n)
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
				if k := rk.ranks[p.Registers[w].Device]; !slices.Contains(on, k) {
					on = append(on, k)
				}
			}
			slices.Sort(on)
			rk.active[f], rk.perform[f], rk.notify[f] = on, on, on
			if slices.Contains(on, rk.me) {
				rk.parts[f], rk.sums[f] = rk.expect(p, t, on)
			}
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

// expect returns the MsgParts and MsgReduced this rank receives for a
// firing of collective t over ranks on, this rank among them.
func (rk *ranked) expect(p *plans.Plan, t *plans.Task, on []int) (parts, sums int) {
	mine, theirs := 0, 0
	for _, w := range t.Writes {
		if rk.local(p.Registers[w].Device) {
			mine++
		} else {
			theirs++
		}
	}
	switch t.Kind {
	case plans.AllGather:
		return theirs, 0
	case plans.ReduceScatter:
		return theirs * mine, 0
	}
	size := p.Registers[t.Writes[0]].Spec.Shape.NumElements()
	for c, k := range on {
		lo, hi := chunkOf(size, len(on), c)
		switch {
		case lo == hi:
		case k == rk.me:
			parts = theirs
		default:
			sums++
		}
	}
	return parts, sums
}

// Chunks of an all-reduce over ranks: at least minChunk elements (16 KiB
// of float32), below which a message's fixed cost outweighs the bytes it
// saves, and a multiple of chunkAlign (a cache line).
const (
	minChunk   = 4096
	chunkAlign = 16
)

// chunkOf returns the elements [lo, hi) of chunk c of the n chunks of a
// register of size elements: contiguous, in order, of equal size but the
// last; the last ones are empty where the register is small.
func chunkOf(size, n, c int) (lo, hi int) {
	per := (size + n - 1) / n
	per = max(minChunk, (per+chunkAlign-1)/chunkAlign*chunkAlign)
	return min(c*per, size), min((c+1)*per, size)
}

// performs says whether this rank sees firing f finish by itself.
func (rk *ranked) performs(f int) bool { return slices.Contains(rk.perform[f], rk.me) }

// rankRun is a Run's multi-process state; run.mu guards it.
type rankRun struct {
	id     int
	heard  map[[2]int]int        // MsgDones by (firing, iteration), for notifiers of several ranks
	parts  map[[2]int][]*Message // MsgParts and MsgReduced received, by (firing, iteration)
	landed []trace.Event         // cross-rank transfers received here
	// begunOf holds, on rank 0, the iterations each other rank has
	// begun, as it answered MsgPause or ended the Run.
	begunOf map[int]int
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
func (x *run) receive(inbox <-chan *Message, quit <-chan struct{}) {
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
				x.fail(err)
				return
			}
			if err := x.handle(m); err != nil {
				x.fail(err)
				return
			}
		}
	}
}

// handle applies one message from another rank.
func (x *run) handle(m *Message) error {
	p := x.r.p
	rk := x.r.rk
	switch m.Kind {
	case MsgPause, MsgBegun, MsgStopAt, MsgStopRequest:
		return x.handleStop(m)
	case MsgFailed:
		return failure(m)
	}
	if m.Firing < 0 || m.Firing >= len(p.Firings) || m.Iter < 0 || m.Iter >= x.asked {
		return fmt.Errorf("runtime: rank %d sent a message about firing %d of iteration %d, outside the plan's %d firings and %d iterations",
			m.From, m.Firing, m.Iter, len(p.Firings), x.asked)
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
	case MsgPart, MsgReduced:
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

// handleStop applies a message of the stop protocol (see the rules
// above).
func (x *run) handleStop(m *Message) error {
	me := x.r.rk.me
	x.mu.Lock()
	switch {
	case m.Kind == MsgBegun && me == 0 && m.From != 0 && m.Iter >= 0 && m.Iter <= x.asked:
		x.rr.begunOf[m.From] = max(x.rr.begunOf[m.From], m.Iter)
		x.cond.Broadcast()
		x.mu.Unlock()
		return nil
	case m.Kind == MsgPause && me != 0 && m.From == 0:
		x.paused = true
		begun := x.begun // no stream goes past it while paused
		x.mu.Unlock()
		return x.send(0, &Message{Kind: MsgBegun, Iter: begun})
	case m.Kind == MsgStopAt && me != 0 && m.From == 0 && m.Iter >= max(x.begun, 1) && m.Iter <= x.asked:
		x.iters = min(x.iters, m.Iter)
		x.paused = false
		x.cond.Broadcast()
		x.mu.Unlock()
		return nil
	case m.Kind == MsgStopRequest && me == 0 && m.From != 0:
		x.mu.Unlock()
		if asked := x.r.StopAsked; asked != nil {
			asked(m.From)
		}
		return nil
	}
	x.mu.Unlock()
	return fmt.Errorf("runtime: rank %d sent rank %d a stop message (kind %d) for iteration %d, which the protocol has no place for", m.From, me, m.Kind, m.Iter)
}

// watchStop acts once the runner's Stop closes: rank 0 stops every rank
// (stopRanks), another rank asks rank 0 to (MsgStopRequest). The end it
// returns, called once the streams are done, waits for a stop begun to
// finish: the other ranks may be paused until they hear where to stop.
func (x *run) watchStop() (end func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-x.r.Stop:
		case <-quit:
			return
		case <-x.ctx.Done():
			return
		}
		var err error
		if x.r.rk.me == 0 {
			err = x.stopRanks()
		} else if err = x.send(0, &Message{Kind: MsgStopRequest}); err != nil {
			err = fmt.Errorf("runtime: asking rank 0 to stop: %w", err)
		}
		if err != nil {
			x.fail(err)
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// stopRanks pauses every rank, learns the iterations each has begun, and
// ends the run on every rank after the most of them.
func (x *run) stopRanks() error {
	rk := x.r.rk
	x.mu.Lock()
	x.paused = true
	x.mu.Unlock()
	n := rk.link.Size()
	for k := range n {
		if k != rk.me {
			if err := x.send(k, &Message{Kind: MsgPause}); err != nil {
				return fmt.Errorf("runtime: stopping: %w", err)
			}
		}
	}
	if err := x.await(func() bool { return len(x.rr.begunOf) == n-1 }); err != nil {
		return err
	}
	x.mu.Lock()
	at := max(x.begun, 1)
	for _, b := range x.rr.begunOf {
		at = max(at, b)
	}
	x.iters = min(x.iters, at)
	x.paused = false
	x.cond.Broadcast()
	x.mu.Unlock()
	for k := range n {
		if k != rk.me {
			if err := x.send(k, &Message{Kind: MsgStopAt, Iter: at}); err != nil {
				return fmt.Errorf("runtime: stopping: %w", err)
			}
		}
	}
	return nil
}

// reportEnd tells rank 0, unasked, that this rank's streams have begun
// (and finished) all the iterations of the run, in case rank 0 is
// stopping: this rank's inbox drops the MsgPause that comes after its Run.
func (x *run) reportEnd() error {
	x.mu.Lock()
	begun := x.begun
	x.mu.Unlock()
	return x.send(0, &Message{Kind: MsgBegun, Iter: begun})
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
// ranks (see the rules above): for an all-reduce the registers written
// (each a copy of its read, for a tensor-parallel sum), for an all-gather
// or a reduce-scatter from the registers read.
func (x *run) allReduceRanks(t *plans.Task, f, it int, reads, writes []Buffer) error {
	p := x.r.p
	var dev *CPU
	var local []int // members on this rank
	for i, w := range t.Writes {
		if d := p.Registers[w].Device; x.r.rk.local(d) {
			dev = x.r.devs[d]
			local = append(local, i)
		}
	}
	switch t.Kind {
	case plans.AllGather:
		return x.allGatherRanks(t, f, it, dev, local, reads, writes)
	case plans.ReduceScatter:
		return x.reduceScatterRanks(t, f, it, dev, local, reads, writes)
	}
	return x.allReduceChunks(t, f, it, dev, local, writes)
}

// allReduceChunks is an all-reduce's part on this rank: it reduces its own
// chunk of the members' writes and gathers the other ranks' chunks.
func (x *run) allReduceChunks(t *plans.Task, f, it int, dev *CPU, local []int, writes []Buffer) error {
	p := x.r.p
	rk := x.r.rk
	on := rk.active[f]
	size := p.Registers[t.Writes[0]].Spec.Shape.NumElements()
	for c, k := range on {
		lo, hi := chunkOf(size, len(on), c)
		if k == rk.me || lo == hi {
			continue
		}
		for _, i := range local {
			if err := x.send(k, &Message{Kind: MsgPart, Firing: f, Iter: it, Reg: t.Writes[i], Chunk: c, F: writes[i].F[lo:hi]}); err != nil {
				return err
			}
		}
	}
	mine := slices.Index(on, rk.me)
	if lo, hi := chunkOf(size, len(on), mine); lo < hi {
		got, err := x.collect(f, it, MsgPart, rk.parts[f])
		if err != nil {
			return err
		}
		bufs := make([][]float32, len(t.Writes))
		for _, i := range local {
			bufs[i] = writes[i].F[lo:hi]
		}
		if err := x.members(t, f, got, bufs, func(int) (int, int) { return mine, hi - lo }); err != nil {
			return err
		}
		reduce(dev.pool, bufs, p.AllReduceWeights(t))
		for _, i := range local {
			if i != 0 {
				cpu.Copy(dev.pool, bufs[0], bufs[i])
			}
		}
		for _, k := range on {
			if k == rk.me {
				continue
			}
			if err := x.send(k, &Message{Kind: MsgReduced, Firing: f, Iter: it, Chunk: mine, F: bufs[0]}); err != nil {
				return err
			}
		}
	}
	got, err := x.collect(f, it, MsgReduced, rk.sums[f])
	if err != nil {
		return err
	}
	seen := make([]bool, len(on))
	for _, m := range got {
		c := m.Chunk
		if c < 0 || c >= len(on) || on[c] != m.From || seen[c] {
			return fmt.Errorf("runtime: rank %d sent chunk %d of %s, not its own", m.From, c, p.FiringName(f))
		}
		seen[c] = true
		lo, hi := chunkOf(size, len(on), c)
		if len(m.F) != hi-lo {
			return fmt.Errorf("runtime: rank %d sent %d values of chunk %d of %s, which has %d", m.From, len(m.F), c, p.FiringName(f), hi-lo)
		}
		for _, i := range local {
			cpu.Copy(dev.pool, m.F, writes[i].F[lo:hi])
		}
	}
	return nil
}

// reduceScatterRanks is a reduce-scatter's part on this rank: each member
// gets part i of every member's read, i the member's own index, from every
// member's rank, and reduces them as one process does.
func (x *run) reduceScatterRanks(t *plans.Task, f, it int, dev *CPU, local []int, reads, writes []Buffer) error {
	p := x.r.p
	rk := x.r.rk
	n := len(t.Writes)
	shard := func(i int) *graph.Shard { return graph.SeqShard(p.Registers[t.Reads[i].Reg].Spec.Shape, t.Axis, n, i) }
	size := func(i int) int { return p.Registers[t.Writes[i]].Spec.Shape.NumElements() }
	for i, w := range t.Writes {
		k := rk.ranks[p.Registers[w].Device]
		if k == rk.me {
			continue
		}
		part := make([]float32, size(i)) // Send copies it
		for _, j := range local {
			graph.Take(shard(i), reads[j].F, part)
			if err := x.send(k, &Message{Kind: MsgPart, Firing: f, Iter: it, Reg: t.Writes[j], Chunk: i, F: part}); err != nil {
				return err
			}
		}
	}
	got, err := x.collect(f, it, MsgPart, rk.parts[f])
	if err != nil {
		return err
	}
	weights := p.AllReduceWeights(t)
	for _, i := range local {
		bufs := make([][]float32, n)
		for _, j := range local {
			bufs[j] = make([]float32, size(i))
			graph.Take(shard(i), reads[j].F, bufs[j])
		}
		var mine []*Message
		for _, m := range got {
			if m.Chunk == i {
				mine = append(mine, m)
			}
		}
		if err := x.members(t, f, mine, bufs, func(int) (int, int) { return i, size(i) }); err != nil {
			return err
		}
		reduce(dev.pool, bufs, weights)
		cpu.Copy(dev.pool, bufs[0], writes[i].F)
	}
	return nil
}

// allGatherRanks is an all-gather's part on this rank: it sends its
// members' reads to the other ranks and places every member's in its own.
func (x *run) allGatherRanks(t *plans.Task, f, it int, dev *CPU, local []int, reads, writes []Buffer) error {
	p := x.r.p
	rk := x.r.rk
	for _, k := range rk.active[f] {
		if k == rk.me {
			continue
		}
		for _, i := range local {
			if err := x.send(k, &Message{Kind: MsgPart, Firing: f, Iter: it, Reg: t.Writes[i], Chunk: i, F: reads[i].F}); err != nil {
				return err
			}
		}
	}
	got, err := x.collect(f, it, MsgPart, rk.parts[f])
	if err != nil {
		return err
	}
	ins := make([][]float32, len(t.Writes))
	for _, i := range local {
		ins[i] = reads[i].F
	}
	if err := x.members(t, f, got, ins, func(i int) (int, int) { return i, p.Registers[t.Reads[i].Reg].Spec.Shape.NumElements() }); err != nil {
		return err
	}
	bufs := make([]Buffer, len(ins))
	for i, in := range ins {
		bufs[i] = Buffer{F: in}
	}
	return splitCollective(dev.pool, p, t, bufs, writes)
}

// members puts the payloads of parts, one from each member of t not on
// this rank, into bufs by member, and checks that every member has one.
// want(i) is the chunk and the number of values member i's part holds.
func (x *run) members(t *plans.Task, f int, parts []*Message, bufs [][]float32, want func(i int) (chunk, n int)) error {
	p := x.r.p
	for _, m := range parts {
		i := slices.Index(t.Writes, m.Reg)
		if i < 0 || x.r.rk.local(p.Registers[m.Reg].Device) || bufs[i] != nil {
			return fmt.Errorf("runtime: rank %d sent register %d for %s, not one of its parts", m.From, m.Reg, p.FiringName(f))
		}
		chunk, n := want(i)
		if m.Chunk != chunk {
			return fmt.Errorf("runtime: rank %d sent chunk %d of %s for %s, not the one this rank takes", m.From, m.Chunk, p.Registers[m.Reg].Name, p.FiringName(f))
		}
		if len(m.F) != n {
			return fmt.Errorf("runtime: rank %d sent %d values of %s for %s, want %d",
				m.From, len(m.F), p.Registers[m.Reg].Name, p.FiringName(f), n)
		}
		bufs[i] = m.F
	}
	for i, b := range bufs {
		if b == nil {
			return fmt.Errorf("runtime: %s lacks %s", p.FiringName(f), p.Registers[t.Writes[i]].Name)
		}
	}
	return nil
}

// send sends m, of this run and from this rank, to rank k.
func (x *run) send(k int, m *Message) error {
	m.Run, m.From = x.rr.id, x.r.rk.me
	if err := x.r.rk.link.Send(k, m); err != nil {
		return fmt.Errorf("sending to rank %d: %w", k, err)
	}
	return nil
}

// collect waits for the n messages of kind about firing f of iteration it
// and takes them.
func (x *run) collect(f, it int, kind MessageKind, n int) ([]*Message, error) {
	key := [2]int{f, it}
	count := func() int {
		c := 0
		for _, m := range x.rr.parts[key] {
			if m.Kind == kind {
				c++
			}
		}
		return c
	}
	if err := x.await(func() bool { return count() == n }); err != nil {
		return nil, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	var got, rest []*Message
	for _, m := range x.rr.parts[key] {
		if m.Kind == kind {
			got = append(got, m)
		} else {
			rest = append(rest, m)
		}
	}
	if rest == nil {
		delete(x.rr.parts, key)
	} else {
		x.rr.parts[key] = rest
	}
	return got, nil
}

// RankResult is what one rank of a multi-process run measured, for
// MergeRanks.
type RankResult struct {
	Rank int
	// Start is the rank's clock when the run started; event times count
	// from it. It keeps its monotonic reading, so ranks of one process
	// merge exactly; sent to another process it is the wall clock's.
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
// clock minus that rank's, as measured; where the ranks' events show a
// rank's clock further off than that (a firing that seems to start before
// what it waited for on another rank ended), alignClocks corrects it. A
// transfer to another rank lasts from its send
// to its landing, which is kept within the sender's span (the data landed
// before the sender heard so): clocks out of step, even by the gap
// between the two clock readings of one time.Now, must not stretch it
// over the sender's next task. An all-reduce over several ranks lasts
// from the last part's start to the first part's end, the span in which
// all of its ranks were in it.
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
	alignClocks(p, parts, shift)
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
			ev.End = max(ev.Start, min(ev.End, e.End+shift[k]))
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
// returned stop is called; a bad message, another rank's failure or a
// failed link fails the run.
func (x *run) startReceiving() (stop func()) {
	rk := x.r.rk
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		x.receive(rk.link.Inbox(x.rr.id), quit)
	}()
	return func() {
		close(quit)
		<-done
	}
}
