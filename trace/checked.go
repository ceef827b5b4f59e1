package trace

import (
	"fmt"
	"io"
)

// Checked is a trace that Validate passed. Every analysis of a trace
// validates it first, since it indexes tasks, devices and streams by what
// the events say, and on a long trace that costs about as much as the
// analysis; a caller that runs several on one trace (flowrun exec
// --compare compares it, breaks its step down, walks its critical path
// and writes it out) checks it once, with Check, and runs them on the
// Checked, which does not validate it again. The trace must not change
// once checked.
type Checked struct{ t *Trace }

// Check validates t (Validate) and returns it checked.
func Check(t *Trace) (Checked, error) {
	if err := t.Validate(); err != nil {
		return Checked{}, err
	}
	return Checked{t}, nil
}

// Trace returns the trace that was checked (nil for a zero Checked).
func (c Checked) Trace() *Trace { return c.t }

// errUnchecked refuses a zero Checked, which no Check returned.
var errUnchecked = fmt.Errorf("%w: the trace was not checked (trace.Check)", ErrInvalid)

// Err is nil for a trace Check returned, and for a zero Checked the error
// every analysis of it gives.
func (c Checked) Err() error {
	if c.t == nil {
		return errUnchecked
	}
	return nil
}

// Breakdown is Trace.Breakdown, without validating the trace again.
func (c Checked) Breakdown(warmup int) (*Breakdown, error) {
	if c.t == nil {
		return nil, errUnchecked
	}
	return c.t.breakdown(warmup)
}

// CriticalPath is Trace.CriticalPath, without validating the trace again.
func (c Checked) CriticalPath(deps []Dep, first, last int) (*CriticalPath, error) {
	if c.t == nil {
		return nil, errUnchecked
	}
	return c.t.criticalPath(deps, first, last)
}

// StepReport is NewStepReport, without validating the trace again.
func (c Checked) StepReport(deps []Dep, warmup int) (*StepReport, error) {
	if c.t == nil {
		return nil, errUnchecked
	}
	return newStepReport(c.t, deps, warmup)
}

// WritePprof is WritePprof, without validating the trace again.
func (c Checked) WritePprof(w io.Writer, warmup int) error {
	if c.t == nil {
		return errUnchecked
	}
	return writePprof(w, c.t, warmup)
}

// WriteChrome is WriteChrome, without validating the trace again (the
// counters are checked against it, as there).
func (c Checked) WriteChrome(w io.Writer, counters ...Counter) error {
	if c.t == nil {
		return errUnchecked
	}
	return writeChrome(w, c.t, counters...)
}

// CompareChecked is Compare, without validating the traces again.
func CompareChecked(pred, meas Checked, warmup int) (*Comparison, error) {
	switch {
	case pred.t == nil:
		return nil, fmt.Errorf("predicted: %w", errUnchecked)
	case meas.t == nil:
		return nil, fmt.Errorf("measured: %w", errUnchecked)
	}
	return compare(pred.t, meas.t, warmup)
}
