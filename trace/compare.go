package trace

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"time"
)

// Comparison sets a predicted trace against a measured one of the same
// plan. Durations are integer nanoseconds (fields ending in _ns in JSON);
// the _ms fields repeat them in milliseconds for people. A relative error
// is (predicted − measured) / measured, and 0 where the measured value is 0.
type Comparison struct {
	Plan       string        `json:"plan,omitempty"`
	Warmup     int           `json:"warmup"`
	PredIters  int           `json:"pred_iters"` // iterations measured after warmup
	MeasIters  int           `json:"meas_iters"`
	PredStep   time.Duration `json:"pred_step_ns"`
	MeasStep   time.Duration `json:"meas_step_ns"`
	PredStepMs float64       `json:"pred_step_ms"`
	MeasStepMs float64       `json:"meas_step_ms"`
	StepRelErr float64       `json:"step_rel_err"`
	Iters      []IterError   `json:"iters"` // iterations after warmup that both traces ran
	Tasks      []TaskError   `json:"tasks"` // worst first
}

// IterError compares the duration of one iteration: from the end of the
// previous iteration (or from 0) to its end.
type IterError struct {
	Iter   int           `json:"iter"`
	Pred   time.Duration `json:"pred_ns"`
	Meas   time.Duration `json:"meas_ns"`
	RelErr float64       `json:"rel_err"`
}

// TaskError compares one task's mean duration.
type TaskError struct {
	Task   int32         `json:"task"`
	Name   string        `json:"name"`
	Kind   string        `json:"kind,omitempty"`
	Op     string        `json:"op,omitempty"`
	Phase  string        `json:"phase,omitempty"`
	Pred   time.Duration `json:"pred_ns"` // mean duration
	Meas   time.Duration `json:"meas_ns"`
	PredMs float64       `json:"pred_ms"`
	MeasMs float64       `json:"meas_ms"`
	Err    time.Duration `json:"err_ns"` // Pred − Meas
	RelErr float64       `json:"rel_err"`
	// PerIter is the number of firings per measured iteration (per
	// predicted iteration if the measured trace has none).
	PerIter float64 `json:"per_iter"`
	// Share is the task's measured time per iteration over the measured
	// step time; with concurrent tasks, shares can sum to more than 1.
	Share float64 `json:"share"`
	// Impact is |Err| × PerIter: how much the error moves the step time if
	// the task is on the critical path. Tasks are sorted by it.
	Impact time.Duration `json:"impact_ns"`
}

// Compare compares a predicted trace with a measured one over the
// iterations after warmup. Both must be valid and list the same tasks, by
// count and names in order; otherwise the error wraps ErrMismatch and names
// the first difference.
func Compare(pred, meas *Trace, warmup int) (*Comparison, error) {
	if err := pred.Validate(); err != nil {
		return nil, fmt.Errorf("predicted: %w", err)
	}
	if err := meas.Validate(); err != nil {
		return nil, fmt.Errorf("measured: %w", err)
	}
	return compare(pred, meas, warmup)
}

// compare is Compare of traces that Validate passed.
func compare(pred, meas *Trace, warmup int) (*Comparison, error) {
	if len(pred.Tasks) != len(meas.Tasks) {
		return nil, fmt.Errorf("%w: predicted has %d tasks, measured %d", ErrMismatch, len(pred.Tasks), len(meas.Tasks))
	}
	for i := range pred.Tasks {
		if p, m := pred.Tasks[i].Name, meas.Tasks[i].Name; p != m {
			return nil, fmt.Errorf("%w: task %d is %q in predicted, %q in measured", ErrMismatch, i, p, m)
		}
	}
	predStep, err := pred.StepTime(warmup)
	if err != nil {
		return nil, fmt.Errorf("predicted: %w", err)
	}
	measStep, err := meas.StepTime(warmup)
	if err != nil {
		return nil, fmt.Errorf("measured: %w", err)
	}

	c := &Comparison{
		Plan:       cmp.Or(meas.Plan, pred.Plan),
		Warmup:     warmup,
		PredIters:  pred.Iterations() - warmup,
		MeasIters:  meas.Iterations() - warmup,
		PredStep:   predStep,
		MeasStep:   measStep,
		PredStepMs: ms(predStep),
		MeasStepMs: ms(measStep),
		StepRelErr: relErr(predStep, measStep),
	}

	pe, me := pred.IterationEnds(), meas.IterationEnds()
	for i := warmup; i < min(len(pe), len(me)); i++ {
		var p, m time.Duration
		if i == 0 {
			p, m = pe[0].Sub(0), me[0].Sub(0)
		} else {
			p, m = pe[i].Sub(pe[i-1]), me[i].Sub(me[i-1])
		}
		c.Iters = append(c.Iters, IterError{Iter: i, Pred: p, Meas: m, RelErr: relErr(p, m)})
	}

	ps, msr := pred.TaskStats(warmup), meas.TaskStats(warmup)
	c.Tasks = make([]TaskError, len(meas.Tasks))
	for i, task := range meas.Tasks {
		p, m := ps[i], msr[i]
		perIter := float64(m.Count) / float64(c.MeasIters)
		if m.Count == 0 {
			perIter = float64(p.Count) / float64(c.PredIters)
		}
		share := 0.0
		if measStep > 0 {
			share = float64(m.Total) / float64(c.MeasIters) / float64(measStep)
		}
		diff := p.Mean - m.Mean
		c.Tasks[i] = TaskError{
			Task: int32(i), Name: task.Name, Kind: task.Kind, Op: task.Op, Phase: task.Phase,
			Pred: p.Mean, Meas: m.Mean, PredMs: ms(p.Mean), MeasMs: ms(m.Mean),
			Err: diff, RelErr: relErr(p.Mean, m.Mean),
			PerIter: perIter, Share: share,
			Impact: time.Duration(math.Round(math.Abs(float64(diff)) * perIter)),
		}
	}
	slices.SortStableFunc(c.Tasks, func(a, b TaskError) int {
		return cmp.Or(cmp.Compare(b.Impact, a.Impact), cmp.Compare(a.Name, b.Name))
	})
	return c, nil
}

// WriteTable writes c for people: the step times and their error, then the
// top tasks with the largest impact (all of them if top ≤ 0).
func (c *Comparison) WriteTable(w io.Writer, top int) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if c.Plan != "" {
		fmt.Fprintf(tw, "plan: %s\n", c.Plan)
	}
	fmt.Fprintf(tw, "step time: predicted %s, measured %s, error %s (warmup %d; %d predicted, %d measured iterations)\n",
		fmtDur(c.PredStep), fmtDur(c.MeasStep), fmtPct(c.StepRelErr), c.Warmup, c.PredIters, c.MeasIters)
	tasks := c.Tasks
	if top > 0 && top < len(tasks) {
		tasks = tasks[:top]
	}
	// The task name is the trailing cell, so it stays left-aligned.
	fmt.Fprintf(tw, "\n#\timpact\tpred\tmeas\terror\trel err\tshare\tn/iter\t  task\n")
	for i, t := range tasks {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%.1f%%\t%g\t  %s\n",
			i+1, fmtDur(t.Impact), fmtDur(t.Pred), fmtDur(t.Meas), signed(t.Err), fmtPct(t.RelErr), 100*t.Share, t.PerIter, t.Name)
	}
	if len(tasks) < len(c.Tasks) {
		fmt.Fprintf(tw, "(%d more not shown)\n", len(c.Tasks)-len(tasks))
	}
	return tw.Flush()
}

func relErr(pred, meas time.Duration) float64 {
	if meas == 0 {
		return 0
	}
	return float64(pred-meas) / float64(meas)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fmtPct(f float64) string { return fmt.Sprintf("%+.1f%%", 100*f) }

// fmtDur prints d with a unit chosen by its size and a fixed number of
// decimals, so columns of durations line up and read alike.
func fmtDur(d time.Duration) string {
	a := d.Abs()
	switch {
	case a < time.Microsecond:
		return fmt.Sprintf("%dns", int64(d))
	case a < time.Millisecond:
		return fmt.Sprintf("%.2fµs", float64(d)/float64(time.Microsecond))
	case a < time.Second:
		return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.3fs", d.Seconds())
}

func signed(d time.Duration) string {
	if d > 0 {
		return "+" + fmtDur(d)
	}
	return fmtDur(d)
}
