package trace_test

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/flowkit/flowkit/trace"
)

// A checked trace is validated once, by Check: the analyses run on it
// (what flowrun exec --compare runs on each trace) do not validate it
// again, and give what the ones of an unchecked trace give.
func TestCheckedValidatesOnce(t *testing.T) {
	tr, deps := pipeline()
	n := trace.Validations()
	c, err := trace.Check(tr)
	if err != nil {
		t.Fatal(err)
	}
	if c.Trace() != tr {
		t.Fatalf("Check returned another trace")
	}
	b, err := c.Breakdown(1)
	if err != nil {
		t.Fatal(err)
	}
	path, err := c.CriticalPath(deps, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.StepReport(deps, 1)
	if err != nil {
		t.Fatal(err)
	}
	cmp, err := trace.CompareChecked(c, c, 1)
	if err != nil {
		t.Fatal(err)
	}
	var pprof, chrome bytes.Buffer
	if err := c.WritePprof(&pprof, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteChrome(&chrome); err != nil {
		t.Fatal(err)
	}
	if got := trace.Validations() - n; got != 1 {
		t.Fatalf("a checked trace was validated %d times, want once", got)
	}

	// The same as the trace's own, which validate it each.
	wantB, _ := tr.Breakdown(1)
	wantPath, _ := tr.CriticalPath(deps, 1, 2)
	wantCmp, _ := trace.Compare(tr, tr, 1)
	var wantPprof, wantChrome bytes.Buffer
	_ = trace.WritePprof(&wantPprof, tr, 1)
	_ = trace.WriteChrome(&wantChrome, tr)
	for _, x := range []struct {
		what      string
		got, want any
	}{
		{"breakdown", b, wantB}, {"critical path", path, wantPath}, {"step report", r, &trace.StepReport{Breakdown: wantB, Path: wantPath}},
		{"comparison", cmp, wantCmp}, {"pprof", pprof.Bytes(), wantPprof.Bytes()}, {"chrome", chrome.Bytes(), wantChrome.Bytes()},
	} {
		if !reflect.DeepEqual(x.got, x.want) {
			t.Errorf("%s of the checked trace: got %+v, want %+v", x.what, x.got, x.want)
		}
	}

	// NewStepReport validates once too, not for the breakdown and again
	// for the path.
	n = trace.Validations()
	if _, err := trace.NewStepReport(tr, deps, 1); err != nil {
		t.Fatal(err)
	}
	if got := trace.Validations() - n; got != 1 {
		t.Fatalf("NewStepReport validated the trace %d times, want once", got)
	}
}

// A trace that Validate refuses is refused by Check, and a Checked that
// no Check returned is an error, not a panic.
func TestCheckedRefuses(t *testing.T) {
	tr, deps := pipeline()
	tr.Events[0].End = tr.Events[0].Start - 1
	if _, err := trace.Check(tr); !errors.Is(err, trace.ErrInvalid) {
		t.Fatalf("Check of an event ending before it starts: got %v, want ErrInvalid", err)
	}
	var zero trace.Checked
	good, err := trace.Check(fixture())
	if err != nil {
		t.Fatal(err)
	}
	var w bytes.Buffer
	_, err1 := zero.Breakdown(0)
	_, err2 := zero.CriticalPath(deps, 0, 0)
	_, err3 := zero.StepReport(deps, 0)
	_, err4 := trace.CompareChecked(zero, good, 0)
	_, err5 := trace.CompareChecked(good, zero, 0)
	for i, err := range []error{err1, err2, err3, err4, err5, zero.WritePprof(&w, 0), zero.WriteChrome(&w)} {
		if !errors.Is(err, trace.ErrInvalid) {
			t.Errorf("%d: a zero Checked: got %v, want ErrInvalid", i, err)
		}
	}
}
