package trace

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// IsComm reports whether tasks of a kind move data rather than compute:
// transfers and copies (the plan's "transfer", and "input", which copies a
// micro-batch of the inputs in), collectives ("allreduce", "allgather",
// "reducescatter"), a gradient bucket's copies ("pack", "unpack") and the
// generic "copy", "send", "recv", "collective" and "alltoall". Every other
// kind ("compute", "accumulate", ...) computes.
func IsComm(kind string) bool {
	switch kind {
	case "transfer", "input", "copy", "send", "recv",
		"allreduce", "allgather", "reducescatter", "alltoall", "collective", "pack", "unpack":
		return true
	}
	return false
}

// Breakdown says where each device's steady-state step goes. It covers
// the window StepTime measures, from the end of iteration Warmup−1 (from 0
// when Warmup is 0) to the end of the last iteration, and divides every
// figure by the Iters iterations in it. Whatever ran in the window counts,
// whichever iteration it belongs to; events are clipped to the window.
type Breakdown struct {
	Plan    string            `json:"plan,omitempty"`
	Source  string            `json:"source,omitempty"`
	Warmup  int               `json:"warmup"`
	Iters   int               `json:"iters"`   // iterations in the window
	Step    time.Duration     `json:"step_ns"` // StepTime(Warmup)
	Devices []DeviceBreakdown `json:"devices"` // in the trace's order
	// Unlisted counts the devices left out, which have no stream in the
	// trace: in a plan that lists one rank for several, the others run
	// as it does.
	Unlisted int `json:"unlisted_devices,omitempty"`
}

// DeviceBreakdown is one device's share of a Breakdown, per step. A
// device is busy computing while any event of a computing task (IsComm
// false) occupies one of its streams, and communicating while an event of
// a communicating task does; its streams run concurrently, so each figure
// is the length of a union of intervals, not a sum of durations. An event
// counts on every device whose streams it occupies (both ends of a
// transfer, every member of a collective).
//
//	Compute     = |computing|
//	Comm        = |communicating|
//	ExposedComm = |communicating \ computing|: no compute runs meanwhile
//	Idle        = Step − Compute − ExposedComm: nothing runs (a pipeline
//	              bubble, waiting for a peer, dispatch)
//
// So Compute + ExposedComm + Idle = Step exactly, and the communication
// hidden behind compute is Comm − ExposedComm. Each figure is its total
// over the window divided by Iters, rounded down; Idle takes what the
// rounding leaves, under 3 ns.
type DeviceBreakdown struct {
	Device      string        `json:"device"`
	Step        time.Duration `json:"step_ns"`
	Compute     time.Duration `json:"compute_ns"`
	Comm        time.Duration `json:"comm_ns"`
	ExposedComm time.Duration `json:"exposed_comm_ns"`
	Idle        time.Duration `json:"idle_ns"`
}

// Breakdown returns where each device's step goes after warmup
// iterations, but for devices with no stream in the trace (Unlisted). The
// trace must be valid.
func (t *Trace) Breakdown(warmup int) (*Breakdown, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t.breakdown(warmup)
}

// breakdown is Breakdown of a trace that Validate passed.
func (t *Trace) breakdown(warmup int) (*Breakdown, error) {
	from, to, n, err := t.window(warmup)
	if err != nil {
		return nil, err
	}
	step := to.Sub(from) / time.Duration(n)
	b := &Breakdown{Plan: t.Plan, Source: t.Source, Warmup: warmup, Iters: n, Step: step}

	// intervals[d][0] computes, [1] communicates.
	intervals := make([][2][]span, len(t.Devices))
	for _, e := range t.Events {
		s, end := max(e.Start, from), min(e.End, to)
		if end <= s {
			continue
		}
		task := &t.Tasks[e.Task]
		c := 0
		if IsComm(task.Kind) {
			c = 1
		}
		for i, ref := range task.Streams {
			if !slices.ContainsFunc(task.Streams[:i], func(r StreamRef) bool { return r.Device == ref.Device }) {
				intervals[ref.Device][c] = append(intervals[ref.Device][c], span{s, end})
			}
		}
	}
	per := func(total time.Duration) time.Duration { return total / time.Duration(n) }
	for d, name := range t.Devices {
		if len(t.Streams[d]) == 0 {
			b.Unlisted++
			continue
		}
		compute, comm := intervals[d][0], intervals[d][1]
		c, m := unionLength(compute), unionLength(comm)
		busy := unionLength(slices.Concat(compute, comm))
		db := DeviceBreakdown{Device: name, Step: step, Compute: per(c), Comm: per(m), ExposedComm: per(busy - c)}
		db.Idle = step - db.Compute - db.ExposedComm
		b.Devices = append(b.Devices, db)
	}
	return b, nil
}

// span is the half-open interval [start, end).
type span struct{ start, end Time }

// unionLength returns the length of the union of the spans, which it
// sorts.
func unionLength(s []span) time.Duration {
	slices.SortFunc(s, func(a, b span) int { return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.end, b.end)) })
	var total time.Duration
	var cur span
	for i, x := range s {
		switch {
		case i == 0:
			cur = x
		case x.start <= cur.end:
			cur.end = max(cur.end, x.end)
		default:
			total += cur.end.Sub(cur.start)
			cur = x
		}
	}
	if len(s) > 0 {
		total += cur.end.Sub(cur.start)
	}
	return total
}

// WriteTable writes b for people: one row per device with each part's
// time per step and its share of the step.
func (b *Breakdown) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "device\tstep\tcompute\tcomm\texposed comm\tidle\t\n")
	rows := make([]Row, len(b.Devices))
	for i, d := range b.Devices {
		rows[i] = Row{d.Device, fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t", fmtDur(d.Step),
			fmtShare(d.Compute, d.Step), fmtShare(d.Comm, d.Step), fmtShare(d.ExposedComm, d.Step), fmtShare(d.Idle, d.Step))}
	}
	for _, r := range Alike(rows) {
		fmt.Fprintf(tw, "%s\t%s\n", r.Device, r.Cells)
	}
	return tw.Flush()
}

// WriteBreakdowns writes a predicted and a measured breakdown of one plan
// side by side, device by device: compute, exposed communication and idle
// time per step, predicted / measured. Both must list the same devices.
func WriteBreakdowns(w io.Writer, pred, meas *Breakdown) error {
	if len(pred.Devices) != len(meas.Devices) {
		return fmt.Errorf("%w: predicted breakdown has %d devices, measured %d", ErrMismatch, len(pred.Devices), len(meas.Devices))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "device\tstep pred / meas\tcompute pred / meas\texposed comm pred / meas\tidle pred / meas\t\n")
	rows := make([]Row, len(pred.Devices))
	for i, p := range pred.Devices {
		m := meas.Devices[i]
		if p.Device != m.Device {
			return fmt.Errorf("%w: device %d is %q in the predicted breakdown, %q in the measured", ErrMismatch, i, p.Device, m.Device)
		}
		pair := func(a, b time.Duration) string { return fmtDur(a) + " / " + fmtDur(b) }
		rows[i] = Row{p.Device, fmt.Sprintf("%s\t%s\t%s\t%s\t", pair(p.Step, m.Step),
			pair(p.Compute, m.Compute), pair(p.ExposedComm, m.ExposedComm), pair(p.Idle, m.Idle))}
	}
	for _, r := range Alike(rows) {
		fmt.Fprintf(tw, "%s\t%s\n", r.Device, r.Cells)
	}
	return tw.Flush()
}

// fmtShare prints d and its share of whole, e.g. "1.250ms 25.0%".
func fmtShare(d, whole time.Duration) string {
	if whole == 0 {
		return fmtDur(d)
	}
	return fmt.Sprintf("%s %5.1f%%", fmtDur(d), 100*float64(d)/float64(whole))
}

// StepReport is where a trace's steady-state step goes: each device's
// Breakdown after warmup iterations and the CriticalPath of those
// iterations (which spans the same window).
type StepReport struct {
	Breakdown *Breakdown
	Path      *CriticalPath
}

// NewStepReport returns the StepReport of t, whose plan's edges are deps,
// after warmup iterations.
func NewStepReport(t *Trace, deps []Dep, warmup int) (*StepReport, error) {
	c, err := Check(t)
	if err != nil {
		return nil, err
	}
	return c.StepReport(deps, warmup)
}

// newStepReport is NewStepReport of a trace that Validate passed: it
// validates it once, not for the breakdown and again for the path.
func newStepReport(t *Trace, deps []Dep, warmup int) (*StepReport, error) {
	b, err := t.breakdown(warmup)
	if err != nil {
		return nil, err
	}
	c, err := t.criticalPath(deps, warmup, t.Iterations()-1)
	if err != nil {
		return nil, err
	}
	return &StepReport{Breakdown: b, Path: c}, nil
}

// Write writes r for people: the breakdown's table, then the critical
// path's summary with its top streams and tasks.
func (r *StepReport) Write(w io.Writer, top int) error {
	fmt.Fprintf(w, "where a step goes (per step after %d warm-up iterations):\n", r.Breakdown.Warmup)
	if err := r.Breakdown.WriteTable(w); err != nil {
		return err
	}
	if n := r.Breakdown.Unlisted; n > 0 {
		fmt.Fprintf(w, "(and %d devices that run as listed ones: the plan lists one rank or replica for several)\n", n)
	}
	return r.Path.WriteSummary(w, top)
}

// WriteStepReports writes a predicted and a measured StepReport of one
// plan side by side: the breakdowns (WriteBreakdowns), then each
// critical path's summary.
func WriteStepReports(w io.Writer, pred, meas *StepReport, top int) error {
	fmt.Fprintf(w, "where a step goes, predicted / measured (per step after %d warm-up iterations):\n", meas.Breakdown.Warmup)
	if err := WriteBreakdowns(w, pred.Breakdown, meas.Breakdown); err != nil {
		return err
	}
	if err := pred.Path.writeSummary(w, "predicted ", top); err != nil {
		return err
	}
	return meas.Path.writeSummary(w, "measured ", top)
}
