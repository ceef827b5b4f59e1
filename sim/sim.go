package sim

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/trace"
)

// Durations prices plan tasks: how long one firing of task t runs on its
// device when nothing else runs on the device's host.
type Durations interface {
	Duration(p *plans.Plan, t int) (time.Duration, error)
}

// Contention is implemented by Durations that also model devices slowing
// each other down through the memory system of a host they share: a
// firing of task t progresses at rate 1/(1 + Slowdown(t)·b), where b is
// the number of other devices of its device's host busy at the moment
// (tasks differ: a kernel bound by memory bandwidth slows more).
type Contention interface {
	Slowdown(p *plans.Plan, t int) float64
}

// LinkSharing is implemented by Durations whose transfers and collectives
// cross links that concurrent ones may share: Links returns, for each link
// (direction) a firing of task t crosses, the share of its bandwidth the
// firing uses while it runs alone (averaged over its duration; nil for
// tasks that use no link).
type LinkSharing interface {
	Links(p *plans.Plan, t int) ([]cost.LinkUse, error)
}

// Dispatch is implemented by Durations that model the latency of waking
// a stream. The runtime runs each stream on a goroutine. When a firing
// ends and releases both the next firing of its own stream and a firing
// of another stream, its goroutine goes on on its thread and the released
// one must be woken on another: the released firing, on device dev,
// starts Dispatch(p, dev) after the end, or when the releasing stream
// first has nothing to run, if that is sooner (its thread is then free).
// A firing released by a stream that has nothing to run starts at once.
type Dispatch interface {
	Dispatch(p *plans.Plan, device int) time.Duration
}

// Simulate executes iters iterations of p and returns the trace. Each
// firing starts as soon as every firing its edges name has finished, and
// runs for its task's duration, stretched while other devices of its host
// are busy if d models contention, and while the firings crossing one of
// its links ask more than the link's bandwidth if d shares links: then
// the firings progress at rates that are max-min fair (progressive
// filling: every firing's rate, as a share of its rate alone, rises
// together until a link it crosses is full). If d models dispatch, a
// firing another stream wakes starts that much later (see Dispatch).
func Simulate(p *plans.Plan, d Durations, iters int) (*trace.Trace, error) {
	if iters < 1 {
		return nil, fmt.Errorf("sim: iterations must be ≥ 1, got %d", iters)
	}
	if nf := max(len(p.Firings), 1); iters > trace.MaxEvents/nf {
		return nil, fmt.Errorf("sim: %d iterations of %d firings each are more than the %d events a trace holds (at most %d iterations of this plan)",
			iters, nf, trace.MaxEvents, trace.MaxEvents/nf)
	}
	edges, err := p.Deps()
	if err != nil {
		return nil, err
	}
	dur := make([]time.Duration, len(p.Tasks))
	for t := range p.Tasks {
		if dur[t], err = d.Duration(p, t); err != nil {
			return nil, fmt.Errorf("sim: pricing %s: %w", p.Tasks[t].Name, err)
		}
		if dur[t] < 0 {
			return nil, fmt.Errorf("sim: pricing %s: negative duration %v", p.Tasks[t].Name, dur[t])
		}
	}
	nf := len(p.Firings)
	out := outEdges(edges, nf)
	waiting := make([]int32, nf*iters) // unfinished dependencies, by instance f + i·nf
	for _, e := range edges {
		for i := e.Delta; i < iters; i++ {
			waiting[e.To+i*nf]++
		}
	}
	s := &engine{p: p, dur: dur, hosts: newHosts(p, d), homes: make([]int, len(p.Tasks))}
	for t, task := range p.Tasks {
		s.homes[t] = p.Streams[task.Streams[0]].Device
	}
	if dl, ok := d.(Dispatch); ok {
		if s.dispatch = dispatchLatencies(p, dl); s.dispatch != nil {
			s.woken, s.waking = map[int]bool{}, make([][]int, len(p.Streams))
		}
	}
	if ls, ok := d.(LinkSharing); ok {
		if s.links, err = linkShares(p, ls); err != nil {
			return nil, err
		}
	}
	tr := p.NewTrace("sim")
	tr.Events = make([]trace.Event, 0, nf*iters)
	for inst, w := range waiting {
		if w == 0 {
			s.start(inst, 0)
		}
	}
	done := 0
	var released []int // instances one finish releases
	for len(s.q) > 0 {
		ev := s.pop()
		if ev.release {
			s.wake(ev.inst, ev.at)
			continue
		}
		r := s.running[ev.inst]
		if r == nil || r.version != ev.version {
			continue // rescheduled since
		}
		s.finish(ev.inst, ev.at)
		f, i := ev.inst%nf, ev.inst/nf
		fi := p.Firings[f]
		tr.Events = append(tr.Events, trace.Event{Task: int32(fi.Task), Iter: int32(i), Micro: int32(fi.Micro), Start: r.start, End: ev.at})
		s.free = append(s.free, r)
		done++
		released = released[:0]
		for k := out.start[f]; k < out.start[f+1]; k++ {
			j := i + int(out.delta[k])
			if j >= iters {
				continue
			}
			next := int(out.to[k]) + j*nf
			if waiting[next]--; waiting[next] == 0 {
				released = append(released, next)
			}
		}
		s.release(ev.inst, released, ev.at)
	}
	if done != nf*iters {
		return nil, fmt.Errorf("sim: %d of %d firings never became ready (a dependency cycle across iterations)", nf*iters-done, nf*iters)
	}
	return tr, nil
}

// release starts the instances the end of inst released at now. With
// dispatch latencies, if inst's stream goes on (inst released its next
// firing), those of other streams are woken: they start after their
// device's latency, or when inst's stream has nothing to run, if sooner.
// If inst's stream has nothing to run, the firings it woke before start.
func (s *engine) release(inst int, released []int, now trace.Time) {
	goesOn := false
	if s.dispatch != nil {
		for _, next := range released {
			goesOn = goesOn || s.stream(next) == s.stream(inst)
		}
	}
	from := s.stream(inst)
	for _, next := range released {
		if lat := s.latency(next); goesOn && lat > 0 && s.stream(next) != from {
			s.woken[next] = true
			s.waking[from] = append(s.waking[from], next)
			s.seq++
			s.push(event{at: now + trace.Time(lat), seq: s.seq, inst: next, release: true})
			continue
		}
		s.start(next, now)
	}
	if s.dispatch != nil && !goesOn {
		for _, next := range s.waking[from] {
			s.wake(next, now)
		}
		s.waking[from] = s.waking[from][:0]
	}
}

// latency is the dispatch latency of inst's device (0: none).
func (s *engine) latency(inst int) time.Duration {
	if s.dispatch == nil {
		return 0
	}
	return s.dispatch[s.home(inst)]
}

// wake starts inst, woken by another stream, unless it has started.
func (s *engine) wake(inst int, now trace.Time) {
	if s.woken[inst] {
		delete(s.woken, inst)
		s.start(inst, now)
	}
}

// dispatchLatencies returns the dispatch latency of every device of p,
// nil if all are zero.
func dispatchLatencies(p *plans.Plan, d Dispatch) []time.Duration {
	lat := make([]time.Duration, len(p.Devices))
	some := false
	for dev := range p.Devices {
		lat[dev] = max(d.Dispatch(p, dev), 0)
		some = some || lat[dev] > 0
	}
	if !some {
		return nil
	}
	return lat
}

// outs lists each firing's edges out, in the plan's order: those of f are
// at [start[f], start[f+1]) of to and delta, side by side, so that the
// event loop reads them in one sweep of memory.
type outs struct{ start, to, delta []int32 }

// outEdges groups edges by the firing they leave.
func outEdges(edges []plans.Edge, firings int) outs {
	o := outs{start: make([]int32, firings+1), to: make([]int32, len(edges)), delta: make([]int32, len(edges))}
	for _, e := range edges {
		o.start[e.From+1]++
	}
	for f := range firings {
		o.start[f+1] += o.start[f]
	}
	next := slices.Clone(o.start[:firings])
	for _, e := range edges {
		o.to[next[e.From]], o.delta[next[e.From]] = int32(e.To), int32(e.Delta)
		next[e.From]++
	}
	return o
}

// linkShare is a firing's share of one link direction (dense index).
type linkShare struct {
	link  int
	share float64
}

// dirLink is one direction of a link, or both (cost.LinkUse.Both).
type dirLink struct {
	link      topology.LinkID
	fwd, both bool
}

// links are the link directions a plan's tasks use, numbered densely.
type links struct {
	of   [][]linkShare // by task
	load []float64     // by link: the shares the running firings ask
}

// linkShares numbers the link directions the plan's tasks use densely and
// lists each task's shares (nil: no task uses a link).
func linkShares(p *plans.Plan, ls LinkSharing) (*links, error) {
	index := map[dirLink]int{}
	out := make([][]linkShare, len(p.Tasks))
	shared := false
	for t := range p.Tasks {
		uses, err := ls.Links(p, t)
		if err != nil {
			return nil, fmt.Errorf("sim: links of %s: %w", p.Tasks[t].Name, err)
		}
		for _, u := range uses {
			if !(u.Share > 0) {
				continue
			}
			k := dirLink{u.Link, u.Forward, u.Both}
			i, ok := index[k]
			if !ok {
				i = len(index)
				index[k] = i
			}
			out[t] = append(out[t], linkShare{i, u.Share})
			shared = true
		}
	}
	if !shared {
		return nil, nil
	}
	return &links{of: out, load: make([]float64, len(index))}, nil
}

// hosts groups a plan's devices by the host whose memory they share.
type hosts struct {
	of       []int     // host index by device; −1: shares with no one
	slowdown []float64 // by task
	members  [][]int   // devices by host
	// A device listed for peers (Plan.Listed: tensor-parallel ranks,
	// data-parallel replicas), which run alike and at once, stands for
	// those of its host, busy when it is: all of them while it runs a
	// task of its own (class 0), but for a group's collective only those
	// of the other kind, since the whole plan has one such collective for
	// the group, at home on one of its members (class 1: a tensor-parallel
	// group's, standing for the replicas; class 2: the replicas', standing
	// for the ranks). weight is by device and class, class by task.
	weight [][3]int
	class  []uint8
}

func newHosts(p *plans.Plan, d Durations) *hosts {
	h := &hosts{of: make([]int, len(p.Devices)), slowdown: make([]float64, len(p.Tasks)), weight: make([][3]int, len(p.Devices)),
		class: make([]uint8, len(p.Tasks))}
	for dev, pd := range p.Devices {
		l := p.Listed(dev)
		if pd.Host != p.Devices[l].Host {
			continue
		}
		sameRank, sameReplica := p.TPRank(dev) == p.TPRank(l), p.Replica(dev) == p.Replica(l)
		h.weight[l][0]++
		if sameRank {
			h.weight[l][1]++ // a replica of l's rank
		}
		if sameReplica {
			h.weight[l][2]++ // a rank of l's replica
		}
	}
	for t, task := range p.Tasks {
		if task.Kind.Collective() {
			h.class[t] = 2
			if task.Sum {
				h.class[t] = 1
			}
		}
	}
	c, ok := d.(Contention)
	index := map[string]int{}
	for dev, pd := range p.Devices {
		h.of[dev] = -1
		if !ok || pd.Host == "" {
			continue
		}
		k, seen := index[pd.Host]
		if !seen {
			k = len(h.members)
			index[pd.Host] = k
			h.members = append(h.members, nil)
		}
		h.of[dev] = k
		h.members[k] = append(h.members[k], dev)
	}
	for t, task := range p.Tasks {
		if ok && h.of[p.Streams[task.Streams[0]].Device] >= 0 {
			h.slowdown[t] = c.Slowdown(p, t)
		}
	}
	return h
}

// running is a firing in progress: the work it has left, in nanoseconds
// of running alone, and the rate it progresses at since the last change:
// host (the contention of its host) times link (its fair share of the
// links it crosses).
type running struct {
	dev        int
	start      trace.Time
	since      trace.Time
	remaining  float64
	host, link float64
	version    uint64
}

func (r *running) rate() float64 { return r.host * r.link }

// rerate sets r's rates from now on, rescheduling its end if they change.
func (s *engine) rerate(inst int, r *running, host, link float64, now trace.Time) {
	if host == r.host && link == r.link {
		return
	}
	r.remaining = max(r.remaining-float64(now-r.since)*r.rate(), 0)
	r.since, r.host, r.link = now, host, link
	s.schedule(inst, r, now)
}

// event is the expected end of one firing instance, or with release
// set, its start after a dispatch latency.
type event struct {
	at      trace.Time
	seq     uint64
	inst    int
	version uint64
	release bool
}

// engine is the simulation state and its event queue, a heap ordered by
// (time, sequence): sequences are unique, so the order is total.
type engine struct {
	p     *plans.Plan
	dur   []time.Duration // by task
	homes []int           // device by task
	// dispatch is the dispatch latency by device (nil: none); woken are
	// the instances woken and not started yet, waking by stream those it
	// woke (some since started).
	dispatch []time.Duration
	woken    map[int]bool
	waking   [][]int
	hosts    *hosts
	links    *links // nil: links are not shared
	flows    []int  // running instances whose tasks use links, in start order
	over     int    // links asked more than they have by the running flows
	// scratch of share and fill
	rates       []float64
	used, asked []float64
	full        []bool

	q       []event
	seq     uint64
	running map[int]*running
	free    []*running // finished, for reuse
	byDev   [][]int    // running instances by device, in start order
	classes [][3]int   // running instances by device and hosts.class
	busy    []int      // devices busy on each host, as standing counts them
}

func (s *engine) home(inst int) int { return s.homes[s.task(inst)] }

// rate is the progress rate of firing instance inst, running on its home
// device, now.
func (s *engine) rate(inst int) float64 {
	dev, k := s.home(inst), s.hosts.slowdown[s.task(inst)]
	h := s.hosts.of[dev]
	if h < 0 || k == 0 {
		return 1
	}
	others := s.busy[h]
	if len(s.byDev[dev]) > 0 {
		others--
	}
	return 1 / (1 + k*float64(others))
}

func (s *engine) schedule(inst int, r *running, now trace.Time) {
	r.version++
	s.seq++
	end := now + trace.Time(math.Ceil(r.remaining/r.rate()))
	s.push(event{at: end, seq: s.seq, inst: inst, version: r.version})
}

// newRunning returns a finished firing's record to reuse, or a new one.
func (s *engine) newRunning() *running {
	if n := len(s.free); n > 0 {
		r := s.free[n-1]
		s.free = s.free[:n-1]
		return r
	}
	return new(running)
}

func (s *engine) start(inst int, now trace.Time) {
	if s.running == nil {
		s.running = map[int]*running{}
		s.byDev = make([][]int, len(s.p.Devices))
		s.busy = make([]int, len(s.hosts.members))
		s.classes = make([][3]int, len(s.p.Devices))
	}
	dev := s.home(inst)
	task := s.p.Firings[inst%len(s.p.Firings)].Task
	s.byDev[dev] = append(s.byDev[dev], inst)
	s.changeBusy(dev, task, +1, now)
	r := s.newRunning()
	*r = running{dev: dev, start: now, since: now, remaining: float64(s.dur[task]), host: s.rate(inst), link: 1}
	s.running[inst] = r
	if s.links != nil && len(s.links.of[task]) > 0 {
		s.flows = append(s.flows, inst)
		s.load(task, +1)
		s.share(now) // schedules r too
		return
	}
	s.schedule(inst, r, now)
}

func (s *engine) finish(inst int, now trace.Time) {
	dev := s.running[inst].dev
	delete(s.running, inst)
	list := s.byDev[dev]
	for i, x := range list {
		if x == inst {
			s.byDev[dev] = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	s.changeBusy(dev, s.task(inst), -1, now)
	if s.links != nil && len(s.links.of[s.task(inst)]) > 0 {
		i := slices.Index(s.flows, inst)
		s.flows = slices.Delete(s.flows, i, i+1)
		s.load(s.task(inst), -1)
		s.share(now)
	}
}

// share gives the running firings that use links their max-min fair
// rates: all rise together from 0 (as shares of their rates alone) until
// a link they cross is full or they reach 1; those on a full link keep
// that rate, the others rise on. A firing whose rate changes is
// rescheduled; one just started (never scheduled) is scheduled. While no
// link is asked more than it has, every rate is 1 without filling.
func (s *engine) share(now trace.Time) {
	rate := s.rates[:0]
	for range s.flows {
		rate = append(rate, 1)
	}
	s.rates = rate
	if s.over > 0 {
		s.fill(rate)
	}
	for i, inst := range s.flows {
		r := s.running[inst]
		x := max(rate[i], 1e-9) // a firing never stops: a full link still moves it
		if r.version == 0 {
			r.link = x
			s.schedule(inst, r, now)
			continue
		}
		s.rerate(inst, r, r.host, x, now)
	}
}

// fill sets rate (by flow) by progressive filling.
func (s *engine) fill(rate []float64) {
	n := len(s.links.load)
	if len(s.used) < n {
		s.used, s.asked, s.full = make([]float64, n), make([]float64, n), make([]bool, n)
	}
	frozen := make([]bool, len(s.flows))
	var touched []int // links whose used, asked or full are set
	for _, inst := range s.flows {
		for _, l := range s.links.of[s.task(inst)] {
			touched = append(touched, l.link)
		}
	}
	left := len(s.flows)
	for left > 0 {
		for _, l := range touched {
			s.asked[l], s.full[l] = 0, false
		}
		for i, inst := range s.flows {
			if !frozen[i] {
				for _, l := range s.links.of[s.task(inst)] {
					s.asked[l.link] += l.share
				}
			}
		}
		level := 1.0
		for _, l := range touched {
			if a := s.asked[l]; a > 0 {
				level = min(level, (1-s.used[l])/a)
			}
		}
		level = max(level, 0)
		for _, l := range touched {
			if a := s.asked[l]; a > 0 && (1-s.used[l])/a <= level*(1+1e-12) {
				s.full[l] = true
			}
		}
		for i, inst := range s.flows {
			if frozen[i] {
				continue
			}
			on := level >= 1
			for _, l := range s.links.of[s.task(inst)] {
				on = on || s.full[l.link]
			}
			if !on {
				continue
			}
			frozen[i], rate[i] = true, level
			left--
			for _, l := range s.links.of[s.task(inst)] {
				s.used[l.link] += level * l.share
			}
		}
	}
	for _, l := range touched {
		s.used[l], s.asked[l], s.full[l] = 0, 0, false
	}
}

// load adds (sign +1) or removes (−1) a firing's shares from its links'
// loads, counting the links asked more than they have.
func (s *engine) load(task int, sign float64) {
	for _, l := range s.links.of[task] {
		was := s.links.load[l.link] > 1+1e-9
		s.links.load[l.link] += sign * l.share
		is := s.links.load[l.link] > 1+1e-9
		switch {
		case is && !was:
			s.over++
		case was && !is:
			s.over--
		}
	}
}

func (s *engine) task(inst int) int { return s.p.Firings[inst%len(s.p.Firings)].Task }

// stream is the home stream of inst's task: the goroutine that runs it.
func (s *engine) stream(inst int) int { return s.p.Tasks[s.task(inst)].Streams[0] }

// changeBusy counts a firing of task t starting (+1) or ending (−1) on dev
// and, where that changes how many devices of its host dev stands for busy
// (standing), re-rates the firings running on the host.
func (s *engine) changeBusy(dev, t, delta int, now trace.Time) {
	h := s.hosts.of[dev]
	if h < 0 {
		return
	}
	was := s.standing(dev)
	s.classes[dev][s.hosts.class[t]] += delta
	d := s.standing(dev) - was
	if d == 0 {
		return
	}
	s.busy[h] += d
	for _, other := range s.hosts.members[h] {
		for _, inst := range s.byDev[other] {
			if r := s.running[inst]; r != nil { // not the firing starting
				s.rerate(inst, r, s.rate(inst), r.link, now)
			}
		}
	}
}

// standing is how many devices of its host dev stands for busy now: none
// while it runs nothing, else those its running firings stand for (see
// hosts.weight; the two kinds of collective share dev itself).
func (s *engine) standing(dev int) int {
	c, w := s.classes[dev], s.hosts.weight[dev]
	switch {
	case c[0] > 0:
		return w[0]
	case c[1] > 0 && c[2] > 0:
		return w[1] + w[2] - 1
	case c[1] > 0:
		return w[1]
	case c[2] > 0:
		return w[2]
	}
	return 0
}

// before orders events by time, then by when they were scheduled.
func (e event) before(f event) bool {
	if e.at != f.at {
		return e.at < f.at
	}
	return e.seq < f.seq
}

// push adds an event to the queue, a binary heap.
func (s *engine) push(e event) {
	q := append(s.q, e)
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q[i].before(q[p]) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
	s.q = q
}

// pop removes the first event from the queue.
func (s *engine) pop() event {
	q := s.q
	top, n := q[0], len(q)-1
	q[0] = q[n]
	q = q[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && q[l].before(q[m]) {
			m = l
		}
		if r := l + 1; r < n && q[r].before(q[m]) {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	s.q = q
	return top
}

// DurationFunc adapts a function to Durations.
type DurationFunc func(p *plans.Plan, t int) (time.Duration, error)

// Duration implements Durations.
func (f DurationFunc) Duration(p *plans.Plan, t int) (time.Duration, error) { return f(p, t) }
