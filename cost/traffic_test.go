package cost

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
)

// allReduceSamples are in-process all-reduces over two members of b bytes
// at eight sizes, in place (traffic 7b) and, as tensor-parallel sums, out
// of place (11b), timed as 3 µs plus their traffic at 10 GB/s.
func allReduceSamples(withTraffic bool) []Sample {
	var out []Sample
	for i := range 8 {
		n := 256 << (2 * i)
		b := units.Bytes(4 * n)
		for _, k := range []units.Bytes{7, 11} {
			w := Work{Kind: "allreduce", FLOPs: units.FLOPs(2 * n), Bytes: b, DType: "f32", Shape: []int{2, n}}
			if withTraffic {
				w.Traffic = k * b
			}
			t := 3*time.Microsecond + (k * b).Over(10e9)
			out = append(out, Sample{Work: w, Time: t})
		}
	}
	return out
}

// With their traffic, all-reduces of one message size that move different
// bytes fit one model; by message size alone, where the two are one shape,
// they cannot.
func TestFitByTraffic(t *testing.T) {
	dev, _ := topology.Spec("cpu", 1)
	bySize, _, err := Fit(dev, allReduceSamples(false))
	if err != nil {
		t.Fatal(err)
	}
	byTraffic, rep, err := Fit(dev, allReduceSamples(true))
	if err != nil {
		t.Fatal(err)
	}
	if rep.MedianRelErr > 0.03 || rep.MaxRelErr > 0.06 {
		t.Errorf("held-out error: got median %.3f, max %.3f; want ≤ 0.03, 0.06", rep.MedianRelErr, rep.MaxRelErr)
	}
	if !byTraffic.Traffic || len(byTraffic.Exact) != 16 || bySize.Traffic || len(bySize.Exact) != 8 {
		t.Fatalf("got traffic %v, %v and %d, %d exact entries; want true, false and 16, 8",
			byTraffic.Traffic, bySize.Traffic, len(byTraffic.Exact), len(bySize.Exact))
	}
	// Off the measured shapes, the curves price by traffic.
	worst := func(of OpFit) float64 {
		cal := NewCalibration()
		of.Exact = nil
		cal.Devices["cpu/1"] = &DeviceCalibration{Ops: map[string]*OpFit{"allreduce": &of}}
		m := NewComputeModel(cal)
		n := 3 << 16
		b := units.Bytes(4 * n)
		var worst float64
		for _, k := range []units.Bytes{7, 11} {
			got, err := m.Time(dev, Work{Kind: "allreduce", FLOPs: units.FLOPs(2 * n), Bytes: b, Traffic: k * b, DType: "f32", Shape: []int{2, n}})
			if err != nil {
				t.Fatal(err)
			}
			want := 3*time.Microsecond + (k * b).Over(10e9)
			worst = max(worst, math.Abs(float64(got-want))/float64(want))
		}
		return worst
	}
	if e := worst(byTraffic); e > 0.05 {
		t.Errorf("fitted by traffic: got error %.3f, want ≤ 0.05", e)
	}
	if e := worst(bySize); e < 0.15 {
		t.Errorf("fitted by message size: got error %.3f, want ≥ 0.15 (the samples are not what the test means)", e)
	}
}

// Exact measurements of one shape are told apart by their traffic; one of
// a file of before traffic was recorded prices every traffic of its shape.
func TestExactByTraffic(t *testing.T) {
	dev, _ := topology.Spec("cpu", 1)
	fit := func(exact ...Measurement) *Calibration {
		cal := NewCalibration()
		of := *defaultFit(dev)
		of.Exact = exact
		cal.Devices["cpu/1"] = &DeviceCalibration{Ops: map[string]*OpFit{"allreduce": &of}}
		return cal
	}
	w := func(traffic units.Bytes) Work {
		return Work{Kind: "allreduce", FLOPs: 2048, Bytes: 4096, Traffic: traffic, DType: "f32", Shape: []int{2, 1024}}
	}
	shape := []int{2, 1024}
	newer := NewComputeModel(fit(Measurement{DType: "f32", Shape: shape, Time: 7000, Traffic: 7 * 4096},
		Measurement{DType: "f32", Shape: shape, Time: 11000, Traffic: 11 * 4096}))
	older := NewComputeModel(fit(Measurement{DType: "f32", Shape: shape, Time: 9000}))
	tests := []struct {
		name string
		m    *ComputeModel
		w    Work
		want time.Duration
		src  Source
	}{
		{"in place", newer, w(7 * 4096), 7000, FromExact},
		{"out of place", newer, w(11 * 4096), 11000, FromExact},
		{"unmeasured traffic", newer, w(5 * 4096), 0, FromDefault}, // the default efficiencies, as ExactOnly's
		{"old file", older, w(11 * 4096), 9000, FromExact},
		{"old work", older, w(0), 9000, FromExact},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := tt.m.Predict(dev, tt.w)
			if err != nil || p.Source != tt.src || tt.src == FromExact && p.Time != tt.want {
				t.Errorf("got %v from %s (%v), want %v from %s", p.Time, p.Source, err, tt.want, tt.src)
			}
		})
	}
}

// A calibration file written before dispatch latencies and traffic were
// measured loads, with neither: no latency, all-reduces priced by their
// measured shapes as before.
func TestOldCalibrationLoads(t *testing.T) {
	cal, err := LoadCalibration("../results/tp-cpu/calib.json")
	if err != nil {
		t.Fatal(err)
	}
	dev, _ := topology.Spec("cpu", 1)
	m := NewComputeModel(cal)
	if d := m.Dispatch(dev); d != 0 {
		t.Errorf("dispatch: got %v, want 0", d)
	}
	of := cal.Devices["cpu/1"].Ops["allreduce"]
	if of == nil || of.Traffic || len(of.Exact) == 0 {
		t.Fatalf("allreduce: got %+v, want a fit by bytes with exact entries", of)
	}
	e := of.Exact[len(of.Exact)-1]
	n := e.Shape[1]
	p, err := m.Predict(dev, Work{Kind: "allreduce", FLOPs: units.FLOPs(2 * n), Bytes: units.Bytes(4 * n), Traffic: units.Bytes(7 * 4 * n), DType: "f32", Shape: e.Shape})
	if err != nil || p.Source != FromExact || p.Time != e.Time {
		t.Errorf("allreduce %v: got %v from %s (%v), want %v measured", e.Shape, p.Time, p.Source, err, e.Time)
	}
	var buf strings.Builder
	if err := cal.Write(&buf); err != nil || strings.Contains(buf.String(), "dispatch_ns") || strings.Contains(buf.String(), "traffic") {
		t.Errorf("rewritten old file gained new fields (%v)", err)
	}
}
