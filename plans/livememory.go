package plans

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/flowkit/flowkit/trace"
	"github.com/flowkit/flowkit/units"
)

// LiveMemory is what an execution trace of a plan (simulated or measured)
// held in each device's memory over time, and at each device's peak what
// filled it.
//
// A slot of a register is live from the start of the firing that writes a
// version into it to the end of the last firing that reads that version
// (a version read in an iteration past the trace's last stays live to the
// trace's end); a persistent register is always live, all of it. Live
// bytes count each live slot once, at its size without the arena's
// alignment. The arena (Memory.Peak) holds at least the live peak of any
// execution: two registers live at once never share bytes in it, and the
// planner must keep apart every two that some execution the dependency
// edges allow could hold at once, not only those this trace did, and
// leaves gaps where sizes do not fit.
type LiveMemory struct {
	Devices []DeviceLive `json:"devices"` // in the trace's order
	// Unlisted counts the devices left out, which have no stream in the
	// trace: in a plan that lists one rank for several, the others hold
	// what it holds.
	Unlisted int `json:"unlisted_devices,omitempty"`
}

// DeviceLive is one device's live memory in a trace.
type DeviceLive struct {
	Device string      `json:"device"`
	Arena  units.Bytes `json:"arena_bytes"` // the plan's Memory.Peak
	Peak   units.Bytes `json:"live_peak_bytes"`
	// At is the first moment the live bytes reach Peak, and Iter the
	// earliest iteration of the trace not finished then.
	At   trace.Time `json:"at_ns"`
	Iter int        `json:"iteration"`
	// ByCategory divides Peak by what its registers hold.
	ByCategory ByCategory `json:"by_category"`
	// Largest are the registers with the most bytes live at At, largest
	// first.
	Largest []LiveRegister `json:"largest"`
	// Steps is the timeline: from each step's At until the next, Bytes
	// are live. The first is at 0, the last (at the trace's end) 0 bytes
	// but the persistent.
	Steps []LiveStep `json:"-"`
}

// LiveStep is a change of a device's live bytes.
type LiveStep struct {
	At    trace.Time
	Bytes units.Bytes
}

// LiveRegister is a register's share of a device's live peak.
type LiveRegister struct {
	Name     string      `json:"name"`
	Category Category    `json:"category"`
	Slots    int         `json:"live_slots"` // of its Slots
	Bytes    units.Bytes `json:"bytes"`
}

// LiveMemory returns what trace tr of the plan held in memory, with the
// top largest registers at each device's peak (0: all live then). The
// trace must be valid and hold every firing of its iterations.
func (p *Plan) LiveMemory(tr *trace.Trace, top int) (*LiveMemory, error) {
	if err := tr.Validate(); err != nil {
		return nil, err
	}
	return p.liveMemory(tr, top)
}

// LiveMemoryChecked is LiveMemory of a checked trace, which it does not
// validate again.
func (p *Plan) LiveMemoryChecked(c trace.Checked, top int) (*LiveMemory, error) {
	if err := c.Err(); err != nil {
		return nil, err
	}
	return p.liveMemory(c.Trace(), top)
}

// liveMemory is LiveMemory of a trace that Validate passed.
func (p *Plan) liveMemory(tr *trace.Trace, top int) (*LiveMemory, error) {
	if len(tr.Devices) != len(p.Devices) {
		return nil, fmt.Errorf("plans: trace has %d devices, the plan %d", len(tr.Devices), len(p.Devices))
	}
	ev, iters, err := p.firingEvents(tr)
	if err != nil {
		return nil, err
	}
	spans, err := p.liveSpans(ev, iters)
	if err != nil {
		return nil, err
	}
	ends := tr.IterationEnds()
	end := slices.Max(ends)
	p.extendCarried(spans, iters, end)

	byDevice := make([][]int, len(p.Devices))
	for r := range p.Registers {
		byDevice[p.Registers[r].Device] = append(byDevice[p.Registers[r].Device], r)
	}
	out := &LiveMemory{}
	for d, name := range tr.Devices {
		if len(tr.Streams[d]) == 0 {
			out.Unlisted++
			continue
		}
		dl := p.deviceLive(spans, byDevice[d], end, top)
		dl.Device, dl.Arena = name, p.Memory[d].Peak
		dl.Iter = len(ends) - 1
		for i, e := range ends {
			if e > dl.At {
				dl.Iter = i
				break
			}
		}
		out.Devices = append(out.Devices, dl)
	}
	return out, nil
}

// extendCarried keeps live to the trace's end the last version of each
// register that a later iteration reads (ReadPrev), past the trace.
func (p *Plan) extendCarried(spans []map[int]*span, iters int, end trace.Time) {
	for i := range p.Tasks {
		for _, u := range p.Tasks[i].Reads {
			if u.Mode != ReadPrev || p.Registers[u.Reg].Persistent {
				continue
			}
			if s := spans[u.Reg][iters*p.WritesPerIteration(u.Reg)-1]; s != nil {
				s.end = end
			}
		}
	}
}

// slotLife is a span during which one slot of register reg is live.
type slotLife struct {
	reg        int
	start, end trace.Time
}

// slotLives returns the spans during which slots of register r are live:
// each slot's versions' spans, merged where they overlap (an in-place
// write overlaps the version it replaces in the one slot).
func (p *Plan) slotLives(r int, versions map[int]*span) []slotLife {
	bySlot := make([][]span, p.Registers[r].Slots)
	for v, s := range versions {
		if s.end > s.start {
			k := p.Slot(r, v)
			bySlot[k] = append(bySlot[k], *s)
		}
	}
	var out []slotLife
	for _, ss := range bySlot {
		slices.SortFunc(ss, func(a, b span) int { return cmp.Compare(a.start, b.start) })
		for i, s := range ss {
			if i > 0 && s.start <= out[len(out)-1].end {
				out[len(out)-1].end = max(out[len(out)-1].end, s.end)
				continue
			}
			out = append(out, slotLife{r, s.start, s.end})
		}
	}
	return out
}

// deviceLive sweeps the slot lives of a device's registers (regs) over
// time, to the trace's end.
func (p *Plan) deviceLive(spans []map[int]*span, regs []int, end trace.Time, top int) DeviceLive {
	var base units.Bytes
	var lives []slotLife
	for _, r := range regs {
		if p.Registers[r].Persistent {
			base += p.Registers[r].Bytes()
			continue
		}
		lives = append(lives, p.slotLives(r, spans[r])...)
	}
	type change struct {
		at    trace.Time
		delta units.Bytes
	}
	changes := make([]change, 0, 2*len(lives))
	for _, l := range lives {
		b := p.Registers[l.reg].SlotBytes
		changes = append(changes, change{l.start, b}, change{l.end, -b})
	}
	slices.SortStableFunc(changes, func(a, b change) int { return cmp.Compare(a.at, b.at) })
	dl := DeviceLive{Peak: base, Steps: []LiveStep{{0, base}}}
	live := base
	for i, c := range changes {
		live += c.delta
		if i+1 < len(changes) && changes[i+1].at == c.at {
			continue // the bytes live from c.at on are those after all its changes
		}
		if last := &dl.Steps[len(dl.Steps)-1]; last.At == c.at {
			last.Bytes = live
		} else if last.Bytes != live {
			dl.Steps = append(dl.Steps, LiveStep{c.at, live})
		}
		if live > dl.Peak {
			dl.Peak, dl.At = live, c.at
		}
	}
	if last := dl.Steps[len(dl.Steps)-1]; last.At < end && last.Bytes != base {
		dl.Steps = append(dl.Steps, LiveStep{end, base})
	}

	// What was live at the peak.
	slots := map[int]int{}
	for _, l := range lives {
		if l.start <= dl.At && dl.At < l.end {
			slots[l.reg]++
		}
	}
	cat := p.Categories()
	var largest []LiveRegister
	for _, r := range regs {
		reg := &p.Registers[r]
		lr := LiveRegister{Name: reg.Name, Category: cat[r], Slots: reg.Slots, Bytes: reg.Bytes()}
		if !reg.Persistent {
			lr.Slots, lr.Bytes = slots[r], units.Bytes(slots[r])*reg.SlotBytes
		}
		if lr.Bytes > 0 {
			dl.ByCategory[lr.Category] += lr.Bytes
			largest = append(largest, lr)
		}
	}
	slices.SortStableFunc(largest, func(a, b LiveRegister) int { return cmp.Compare(b.Bytes, a.Bytes) })
	if top > 0 && len(largest) > top {
		largest = largest[:top]
	}
	dl.Largest = largest
	return dl
}

// WriteTable writes m for people: one row per device with its arena, its
// live peak and when, and the peak's bytes by category.
func (m *LiveMemory) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "device\tarena\tlive peak\tat\t")
	for c := range Category(NumCategories) {
		fmt.Fprintf(tw, "%v\t", c)
	}
	fmt.Fprintln(tw)
	rows := make([]trace.Row, len(m.Devices))
	for i, d := range m.Devices {
		var cells strings.Builder
		fmt.Fprintf(&cells, "%v\t%v\t%.3fms it %d\t", d.Arena, d.Peak, float64(d.At)/1e6, d.Iter)
		for _, b := range d.ByCategory {
			fmt.Fprintf(&cells, "%v\t", b)
		}
		rows[i] = trace.Row{Device: d.Device, Cells: cells.String()}
	}
	for _, r := range trace.Alike(rows) {
		fmt.Fprintf(tw, "%s\t%s\n", r.Device, r.Cells)
	}
	return tw.Flush()
}

// Write writes m for people under a heading that says where the trace
// came from (of, e.g. "this simulation"): the table (WriteTable), then
// the largest registers live at the fullest device's peak.
func (m *LiveMemory) Write(w io.Writer, of string) error {
	fmt.Fprintf(w, "what fills memory (arena: planned for every execution; live peak: the most held at once in %s, by category):\n", of)
	if err := m.WriteTable(w); err != nil {
		return err
	}
	if n := m.Unlisted; n > 0 {
		fmt.Fprintf(w, "(and %d devices that hold what listed ones do: the plan lists one rank or replica for several)\n", n)
	}
	if len(m.Devices) == 0 {
		return nil
	}
	full := m.Devices[0]
	for _, d := range m.Devices[1:] {
		if d.Peak > full.Peak {
			full = d
		}
	}
	fmt.Fprintf(w, "largest registers live at %s's peak:\n", full.Device)
	for _, r := range full.Largest {
		fmt.Fprintf(w, "  %v  %s (%v, %d slot(s))\n", r.Bytes, r.Name, r.Category, r.Slots)
	}
	return nil
}

// Counters returns each device's live bytes over time as a counter of tr
// (in MiB), the trace m was computed from, for trace.WriteChrome: Perfetto
// draws it under the device's streams.
func (m *LiveMemory) Counters(tr *trace.Trace) ([]trace.Counter, error) {
	var cs []trace.Counter
	for _, d := range m.Devices {
		dev := slices.Index(tr.Devices, d.Device)
		if dev < 0 {
			return nil, fmt.Errorf("plans: live memory of device %s, which the trace does not have", d.Device)
		}
		c := trace.Counter{Device: dev, Name: "live memory (MiB)", Points: make([]trace.CounterPoint, len(d.Steps))}
		for i, st := range d.Steps {
			c.Points[i] = trace.CounterPoint{At: st.At, Value: float64(st.Bytes) / (1 << 20)}
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// WriteChrome writes tr, a trace of p, as trace.WriteChrome does, with
// each device's live memory (LiveMemory) as a counter track under its
// streams. A trace whose live memory cannot be followed (one that lacks
// firings) is written without it.
func (p *Plan) WriteChrome(w io.Writer, tr *trace.Trace) error {
	c, err := trace.Check(tr)
	if err != nil {
		return err
	}
	return p.WriteChromeChecked(w, c)
}

// WriteChromeChecked is WriteChrome of a checked trace, which it does not
// validate again.
func (p *Plan) WriteChromeChecked(w io.Writer, c trace.Checked) error {
	if err := c.Err(); err != nil {
		return err
	}
	tr := c.Trace()
	var counters []trace.Counter
	if live, err := p.liveMemory(tr, 1); err == nil {
		if counters, err = live.Counters(tr); err != nil {
			return err
		}
	}
	return c.WriteChrome(w, counters...)
}
