package plans

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// A plan file holds a plan compactly, as DESIGN §4.2 asks: a task is an
// actor, one entry however often it fires, so the file lists no firing a
// task implies, and a stream's order is the schedule's pattern over
// micro-batches, not the firings unrolled. Decode unrolls both into the
// same Plan that Compile made.
//
// Firings are implied by the tasks, in task order: a per-micro-batch task
// fires for micro-batches 0 to Micros(Replica)−1, a per-iteration task
// once (micro −1), and firing (t, m) is the number of firings of tasks
// before t, plus m for a per-micro-batch task. The file lists only the
// firings that wait for others beyond what registers and streams say
// (Firing.After), by task and micro-batch.
//
// A stream's order is runs, each its blocks in turn (a block: tasks fired
// one after another for one micro-batch), Repeat times, the micro-batch
// one more each time. A 1F1B stage is three runs (warm-up forwards; a
// backward and a forward, the steady state; cool-down backwards) and one
// per block of per-iteration tasks, whatever the micro-batches; an
// interleaved stage a few per pp micro-batches, where its chunks change.

// header is a plan's fields as its file holds them; file embeds it and
// adds the fields whose form differs (Plan.Streams and Plan.Firings are
// not written as they are).
type header Plan

// file is a plan as a plan file holds it.
type file struct {
	*header
	Streams []fileStream `json:"streams"`
	// Firings are the firings with an After, the one thing about a
	// firing its task does not imply.
	Firings []fileFiring `json:"firings,omitempty"`
}

// fileStream is a Stream whose order is runs.
type fileStream struct {
	Device int    `json:"device"`
	Name   string `json:"name"`
	Order  []run  `json:"order"`
}

// run is a stretch of a stream's order: Blocks in turn, Repeat times,
// every block's micro-batch one more each time (so a block of
// per-iteration tasks is not repeated).
type run struct {
	Repeat int     `json:"repeat"`
	Blocks []block `json:"blocks"`
}

// block is tasks fired in turn for one micro-batch (−1: per-iteration
// tasks), in a run's first repetition.
type block struct {
	Micro int   `json:"micro"`
	Tasks []int `json:"tasks"`
}

// firingRef names a firing by its task and micro-batch.
type firingRef struct {
	Task  int `json:"task"`
	Micro int `json:"micro"`
}

// fileFiring is a firing and the firings it waits for (Firing.After).
type fileFiring struct {
	Task  int         `json:"task"`
	Micro int         `json:"micro"`
	After []firingRef `json:"after"`
}

// maxPeriod bounds the blocks of a run the encoder looks for: 1F1B's
// steady state has two, a forward and a backward.
const maxPeriod = 8

// firstFirings returns, for each task, the index of its first firing
// in a plan file's numbering (see the comment at the top of file.go), and
// the number of firings.
func (p *Plan) firstFirings() ([]int, int) {
	first := make([]int, len(p.Tasks))
	n := 0
	for t := range p.Tasks {
		first[t] = n
		n += p.Fires(t)
	}
	return first, n
}

// toFile returns p in its file's form. It fails for a plan whose firings
// are not those its tasks imply, in the file's numbering: the file could
// not say so. Anything else wrong is written for Decode to refuse.
func (p *Plan) toFile() (*file, error) {
	for i, t := range p.Tasks {
		if t.PerMicro && p.Shares != nil && (t.Replica < 0 || t.Replica >= len(p.Shares)) {
			return nil, fmt.Errorf("plans: tasks[%d]: %s fires per micro-batch of replica %d, which replica_micro_batches %v does not count", i, t.Name, t.Replica, p.Shares)
		}
	}
	first, n := p.firstFirings()
	if n != len(p.Firings) {
		return nil, fmt.Errorf("plans: the tasks fire %d times per iteration, the plan lists %d firings: a plan file implies the firings from the tasks", n, len(p.Firings))
	}
	for t := range p.Tasks {
		for k := range p.Fires(t) {
			want := Firing{Task: t, Micro: -1}
			if p.Tasks[t].PerMicro {
				want.Micro = k
			}
			if f := p.Firings[first[t]+k]; f.Task != want.Task || f.Micro != want.Micro {
				return nil, fmt.Errorf("plans: firings[%d] is task %d micro-batch %d, where a plan file implies task %d micro-batch %d (each task's firings in turn, by micro-batch)",
					first[t]+k, f.Task, f.Micro, want.Task, want.Micro)
			}
		}
	}
	f := &file{header: (*header)(p), Streams: make([]fileStream, len(p.Streams))}
	for i, s := range p.Streams {
		for _, x := range s.Order {
			if x < 0 || x >= n {
				return nil, fmt.Errorf("plans: streams[%d]: firing %d out of range", i, x)
			}
		}
		f.Streams[i] = fileStream{Device: s.Device, Name: s.Name, Order: p.runs(s.Order)}
	}
	for i, fi := range p.Firings {
		if len(fi.After) == 0 {
			continue
		}
		ff := fileFiring{Task: fi.Task, Micro: fi.Micro, After: make([]firingRef, len(fi.After))}
		for j, a := range fi.After {
			if a < 0 || a >= n {
				return nil, fmt.Errorf("plans: firings[%d]: after %d out of range", i, a)
			}
			ff.After[j] = firingRef{Task: p.Firings[a].Task, Micro: p.Firings[a].Micro}
		}
		f.Firings = append(f.Firings, ff)
	}
	return f, nil
}

// runs writes a stream's order, firings of p, as runs: blocks are the
// stretches of one micro-batch, and from each block on, the repeated run
// covering the most firings, by the fewest blocks (else the block alone).
func (p *Plan) runs(order []int) []run {
	if order == nil {
		return nil
	}
	type span struct{ from, to, micro int } // order[from:to]
	var spans []span
	for i, x := range order {
		m := p.Firings[x].Micro
		if len(spans) == 0 || spans[len(spans)-1].micro != m {
			spans = append(spans, span{i, i, m})
		}
		spans[len(spans)-1].to = i + 1
	}
	tasks := make([]int, len(order))
	for i, x := range order {
		tasks[i] = p.Firings[x].Task
	}
	same := func(a, b span, shift int) bool {
		return a.micro >= 0 && b.micro == a.micro+shift && slices.Equal(tasks[a.from:a.to], tasks[b.from:b.to])
	}
	// repeats is how many times spans[i:i+period] repeat from i.
	repeats := func(i, period int) int {
		r := 1
		for ; i+(r+1)*period <= len(spans); r++ {
			for j := range period {
				if !same(spans[i+j], spans[i+r*period+j], r) {
					return r
				}
			}
		}
		return r
	}
	runs := make([]run, 0, len(spans))
	for i := 0; i < len(spans); {
		period, reps, most := 1, 1, 0
		for q := 1; q <= maxPeriod && i+2*q <= len(spans); q++ {
			if r := repeats(i, q); r > 1 {
				if covered := spans[i+q*r-1].to - spans[i].from; covered > most {
					period, reps, most = q, r, covered
				}
			}
		}
		rn := run{Repeat: reps, Blocks: make([]block, period)}
		for j, s := range spans[i : i+period] {
			rn.Blocks[j] = block{Micro: s.micro, Tasks: slices.Clone(tasks[s.from:s.to])}
		}
		runs = append(runs, rn)
		i += period * reps
	}
	return runs
}

// plan unrolls a file into the plan it holds. It checks what it needs to
// unroll safely (the counts, each task's replica, each entry of the
// compact form) and leaves the rest to check and Deps; errors name the
// entry (streams[i].order[j].blocks[k]) and what is wrong with it.
func (f *file) plan() (*Plan, error) {
	p := (*Plan)(f.header)
	if err := p.checkHeader(); err != nil {
		return nil, err
	}
	if err := p.checkReplicas(); err != nil {
		return nil, err
	}
	if n := p.firingCount(); n > MaxFirings {
		return nil, fmt.Errorf("plans: the tasks fire %d times per iteration, more than the %d a plan may have", n, MaxFirings)
	}
	// Encode indents ops' attributes with the rest; the compiler's are
	// compact.
	for i := range p.Tasks {
		if op := p.Tasks[i].Op; op != nil && len(op.Attrs) > 0 {
			var b bytes.Buffer
			if err := json.Compact(&b, op.Attrs); err != nil {
				return nil, fmt.Errorf("plans: tasks[%d]: op attrs: %w", i, err)
			}
			op.Attrs = b.Bytes()
		}
	}
	first, n := p.firstFirings()
	// at is firing (t, m) of the first repetition of a run of reps, or an
	// error saying why there is none.
	at := func(t, m, reps int) (int, error) {
		switch {
		case t < 0 || t >= len(p.Tasks):
			return 0, fmt.Errorf("task %d out of range (%d tasks)", t, len(p.Tasks))
		case !p.Tasks[t].PerMicro && (m != -1 || reps != 1):
			return 0, fmt.Errorf("task %d (%s) fires once per iteration: want micro −1, not repeated; got micro %d, %d times", t, p.Tasks[t].Name, m, reps)
		case p.Tasks[t].PerMicro && (m < 0 || m > p.Fires(t)-reps):
			return 0, fmt.Errorf("task %d (%s) fires for micro-batches 0 to %d: got %d times from micro-batch %d", t, p.Tasks[t].Name, p.Fires(t)-1, reps, m)
		}
		return first[t] + max(m, 0), nil
	}
	// budget bounds what the orders unroll to, before anything is: every
	// firing once on each stream of its task (check checks them firing by
	// firing).
	budget := 0
	for t, task := range p.Tasks {
		budget += p.Fires(t) * len(task.Streams)
	}
	for i, s := range f.Streams {
		for j, rn := range s.Order {
			where := fmt.Sprintf("streams[%d].order[%d]", i, j)
			if rn.Repeat < 1 || len(rn.Blocks) == 0 {
				return nil, fmt.Errorf("plans: %s: repeat %d with %d blocks: want at least 1 of each", where, rn.Repeat, len(rn.Blocks))
			}
			for k, b := range rn.Blocks {
				if len(b.Tasks) == 0 {
					return nil, fmt.Errorf("plans: %s.blocks[%d]: no tasks", where, k)
				}
				for _, t := range b.Tasks {
					if _, err := at(t, b.Micro, rn.Repeat); err != nil {
						return nil, fmt.Errorf("plans: %s.blocks[%d]: %w", where, k, err)
					}
				}
				if budget -= len(b.Tasks) * rn.Repeat; budget < 0 {
					return nil, fmt.Errorf("plans: %s: the streams list more firings than the tasks make on their streams", where)
				}
			}
		}
	}
	p.Firings = make([]Firing, 0, n)
	for t, task := range p.Tasks {
		for k := range p.Fires(t) {
			m := -1
			if task.PerMicro {
				m = k
			}
			p.Firings = append(p.Firings, Firing{Task: t, Micro: m})
		}
	}
	p.Streams = make([]Stream, len(f.Streams))
	for i, s := range f.Streams {
		p.Streams[i] = Stream{Device: s.Device, Name: s.Name}
		for _, rn := range s.Order {
			for r := range rn.Repeat {
				for _, b := range rn.Blocks {
					for _, t := range b.Tasks {
						x, _ := at(t, b.Micro, rn.Repeat)
						p.Streams[i].Order = append(p.Streams[i].Order, x+r)
					}
				}
			}
		}
	}
	for i, ff := range f.Firings {
		x, err := at(ff.Task, ff.Micro, 1)
		if err != nil {
			return nil, fmt.Errorf("plans: firings[%d]: %w", i, err)
		}
		if p.Firings[x].After != nil {
			return nil, fmt.Errorf("plans: firings[%d]: task %d micro-batch %d is listed twice", i, ff.Task, ff.Micro)
		}
		if len(ff.After) == 0 {
			return nil, fmt.Errorf("plans: firings[%d]: no after: the file lists only firings that wait for others", i)
		}
		after := make([]int, len(ff.After))
		for j, a := range ff.After {
			if after[j], err = at(a.Task, a.Micro, 1); err != nil {
				return nil, fmt.Errorf("plans: firings[%d].after[%d]: %w", i, j, err)
			}
		}
		p.Firings[x].After = after
	}
	return p, nil
}
