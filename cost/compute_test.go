package cost

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
)

func TestComputeDefaults(t *testing.T) {
	a100, _ := topology.Spec("A100-SXM4-40GB", 0)
	var m ComputeModel // zero value: catalog defaults
	// A large bf16 GEMM: compute-bound. eff = 0.7 · F/(F + half), half =
	// 3 µs of FP32 peak.
	half := 19.5e12 * 3e-6
	F := units.FLOPs(2 * 8192 * 8192 * 8192)
	w := Work{Kind: "matmul", FLOPs: F, Bytes: 3 * 8192 * 8192 * 2, DType: "bf16"}
	eff := 0.7 * float64(F) / (float64(F) + half)
	want := 4*time.Microsecond + F.Over(312e12*units.FLOPsPerSecond(eff))
	p, err := m.Predict(a100, w)
	if err != nil || p.Time != want || p.Source != FromDefault {
		t.Errorf("GEMM: got %v from %v (%v), want %v from default", p.Time, p.Source, err, want)
	}
	// An elementwise op: memory-bound. half = 3 µs of HBM bandwidth.
	w = Work{Kind: "relu", FLOPs: 2 << 20, Bytes: 16 << 20, DType: "f32"}
	meff := 0.85 * float64(16<<20) / (float64(16<<20) + 1555e9*3e-6)
	want = 4*time.Microsecond + units.Bytes(16<<20).Over(1555e9*units.BytesPerSecond(meff))
	if got, _ := m.Time(a100, w); got != want {
		t.Errorf("relu: got %v, want %v", got, want)
	}
	for _, bad := range []Work{{Kind: "x", FLOPs: -1}, {Kind: "x", DType: "int4"}} {
		if _, err := m.Time(a100, bad); !errors.Is(err, ErrBadWork) {
			t.Errorf("%+v: got %v, want ErrBadWork", bad, err)
		}
	}
}

func TestCalibrationLookupOrder(t *testing.T) {
	cpu, _ := topology.Spec("cpu", 2)
	cal := NewCalibration()
	cal.Devices["cpu"] = &DeviceCalibration{Ops: map[string]*OpFit{
		"matmul": {Launch: time.Microsecond, Compute: Curve{0.5, 1e6, 1}, Memory: Curve{0.5, 1e5, 1},
			Exact: []Measurement{{DType: "f32", Shape: []int{64, 64, 64}, Time: 77 * time.Microsecond}}},
		"*": {Launch: 3 * time.Microsecond, Compute: Curve{0.1, 1, 1}, Memory: Curve{0.1, 1, 1}},
	}}
	m := NewComputeModel(cal)
	mm := Work{Kind: "matmul", FLOPs: 2 * 64 * 64 * 64, Bytes: 3 * 64 * 64 * 4, DType: "f32", Shape: []int{64, 64, 64}}
	tests := []struct {
		dev  topology.DeviceSpec
		w    Work
		want Source
	}{
		{cpu, mm, FromExact},
		{cpu, Work{Kind: "matmul", FLOPs: 1e6, Shape: []int{65, 64, 64}}, FromFit},
		{cpu, Work{Kind: "softmax", Bytes: 1e6}, FromFit},
	}
	for _, tt := range tests {
		p, err := m.Predict(tt.dev, tt.w)
		if err != nil || p.Source != tt.want {
			t.Errorf("%s %v: got %v (%v), want %v", tt.w.Kind, tt.w.Shape, p.Source, err, tt.want)
		}
	}
	if p, _ := m.Predict(cpu, mm); p.Time != 77*time.Microsecond {
		t.Errorf("exact: got %v, want 77µs", p.Time)
	}
	t4, _ := topology.Spec("T4", 0)
	if p, _ := m.Predict(t4, mm); p.Source != FromDefault {
		t.Errorf("uncalibrated T4: got %v, want default", p.Source)
	}

	// A kind measured on too few shapes to fit prices the others by the
	// default efficiencies, and says so.
	measured, err := ExactOnly(cpu, []Sample{{Work: mm, Time: 77 * time.Microsecond}})
	if err != nil {
		t.Fatal(err)
	}
	cal.Devices["cpu"].Ops["matmul"] = &measured
	m = NewComputeModel(cal)
	for _, tt := range []struct {
		w    Work
		want Source
	}{{mm, FromExact}, {Work{Kind: "matmul", FLOPs: 1e6, DType: "f32", Shape: []int{65, 64, 64}}, FromDefault}} {
		if p, err := m.Predict(cpu, tt.w); err != nil || p.Source != tt.want {
			t.Errorf("measured only, %v: got %v (%v), want %v", tt.w.Shape, p.Source, err, tt.want)
		}
	}
	// Under the bare type, made on 2 cores (DeviceCalibration.Cores),
	// for a CPU of 4: its defaults are those of 2 cores.
	cal.Devices["cpu"].Cores = 2
	m = NewComputeModel(cal)
	cpu4, _ := topology.Spec("cpu", 4)
	if p, err := m.Predict(cpu4, Work{Kind: "matmul", FLOPs: 1e6, DType: "f32", Shape: []int{65, 64, 64}}); err != nil || p.Source != FromDefault {
		t.Errorf("measured only on 2 cores, priced for 4: got %v (%v), want default", p.Source, err)
	}
}

// Lacks names the devices a calibration holds nothing for: a CPU's key
// has its cores, and a calibration under the bare type holds every count.
func TestCalibrationLacks(t *testing.T) {
	cpu2, _ := topology.Spec("cpu", 2)
	cpu8, _ := topology.Spec("cpu", 8)
	t4, _ := topology.Spec("T4", 0)
	a100, _ := topology.Spec("A100", 0)
	cal := NewCalibration()
	cal.Devices["cpu/2"] = &DeviceCalibration{}
	cal.Devices["T4"] = &DeviceCalibration{}
	lacking, held := cal.Lacks([]topology.DeviceSpec{cpu2, cpu8, t4, a100, cpu8})
	if want := []string{"A100-SXM4-40GB", "cpu/8"}; !slices.Equal(lacking, want) {
		t.Errorf("lacking: got %v, want %v", lacking, want)
	}
	if want := []string{"T4", "cpu/2"}; !slices.Equal(held, want) {
		t.Errorf("held: got %v, want %v", held, want)
	}
	cal.Devices["cpu"] = &DeviceCalibration{}
	if lacking, _ := cal.Lacks([]topology.DeviceSpec{cpu2, cpu8}); len(lacking) != 0 {
		t.Errorf("with a bare cpu entry: got %v lacking, want none", lacking)
	}
}

// synthetic draws samples from a known OpFit with multiplicative noise.
func synthetic(dev topology.DeviceSpec, truth OpFit, kind string, n int, noise float64, seed uint64) []Sample {
	r := rand.New(rand.NewPCG(seed, 1))
	peak, _ := dev.Peak.PeakFor("f32")
	var s []Sample
	for i := range n {
		k := 16 + r.IntN(1000)
		mm, nn := 16+r.IntN(1000), 16+r.IntN(1000)
		w := Work{Kind: kind, FLOPs: units.FLOPs(2 * k * mm * nn), Bytes: units.Bytes(4 * (k*mm + mm*nn + k*nn)), DType: "f32", Shape: []int{mm, nn, k}}
		sec := truth.predict(peak, dev.MemBandwidth, float64(w.FLOPs), float64(w.Bytes))
		sec *= 1 + noise*(2*r.Float64()-1)
		s = append(s, Sample{Work: w, Time: time.Duration(sec * 1e9)})
		_ = i
	}
	return s
}

func TestFitRecoversKnownModel(t *testing.T) {
	dev, _ := topology.Spec("cpu", 2)
	truth := OpFit{Launch: 3 * time.Microsecond, Compute: Curve{Max: 0.6, Half: 2e6, Gamma: 1.3}, Memory: Curve{Max: 0.5, Half: 1e5, Gamma: 1}}
	samples := synthetic(dev, truth, "matmul", 60, 0.02, 7)
	of, rep, err := Fit(dev, samples)
	if err != nil {
		t.Fatal(err)
	}
	if rep.HeldOut != 15 || rep.Shapes != 60 {
		t.Errorf("got %d held out of %d shapes, want 15 of 60", rep.HeldOut, rep.Shapes)
	}
	if rep.MedianRelErr > 0.03 || rep.MaxRelErr > 0.08 {
		t.Errorf("held-out error: got median %.3f, max %.3f; want ≤ 0.03, 0.08", rep.MedianRelErr, rep.MaxRelErr)
	}
	// Predictions on fresh shapes match the truth.
	peak, _ := dev.Peak.PeakFor("f32")
	for _, s := range synthetic(dev, truth, "matmul", 20, 0, 99) {
		want := truth.predict(peak, dev.MemBandwidth, float64(s.Work.FLOPs), float64(s.Work.Bytes))
		got := of.predict(peak, dev.MemBandwidth, float64(s.Work.FLOPs), float64(s.Work.Bytes))
		if math.Abs(got-want)/want > 0.05 {
			t.Errorf("shape %v: got %.3gs, want %.3gs", s.Work.Shape, got, want)
		}
	}
	if len(of.Exact) != 60 || of.Report == nil {
		t.Errorf("got %d exact entries and report %v, want 60 and a report", len(of.Exact), of.Report)
	}
}

func TestFitErrors(t *testing.T) {
	dev, _ := topology.Spec("cpu", 1)
	ok := synthetic(dev, *defaultFit(dev), "matmul", 8, 0, 1)
	mixed := append(synthetic(dev, *defaultFit(dev), "add", 1, 0, 2), ok...)
	for name, s := range map[string][]Sample{
		"none":      nil,
		"too few":   ok[:3],
		"two kinds": mixed,
		"zero time": {{Work: Work{Kind: "x", FLOPs: 1}, Time: 0}},
	} {
		if _, _, err := Fit(dev, s); !errors.Is(err, ErrFit) {
			t.Errorf("%s: got %v, want ErrFit", name, err)
		}
	}
}

func TestCalibrationRoundTrip(t *testing.T) {
	dev, _ := topology.Spec("cpu", 2)
	truth := OpFit{Launch: 2 * time.Microsecond, Compute: Curve{0.5, 1e6, 1}, Memory: Curve{0.6, 1e5, 1}}
	dc, reps, err := FitAll(dev, append(synthetic(dev, truth, "matmul", 12, 0, 3), synthetic(dev, truth, "conv2d", 12, 0, 4)...))
	if err != nil || len(reps) != 2 || reps[0].Kind != "conv2d" {
		t.Fatalf("FitAll: got %v, %v", reps, err)
	}
	dc.Contention, dc.OpContention = 0.1, map[string]float64{"conv2d": 0.05, "max_pool2d": 0.3}
	dc.Probe = &Probe{GEMM: 600 * time.Microsecond, Stream: 2 * time.Millisecond, Spread: 0.03}
	cal := NewCalibration()
	cal.Devices["cpu"] = dc
	m := NewComputeModel(cal)
	for kind, want := range map[string]float64{"conv2d": 0.05, "max_pool2d": 0.3, "matmul": 0.1} {
		if got := m.Slowdown(dev, kind); got != want {
			t.Errorf("Slowdown(%s) = %v, want %v (its own, else the device's)", kind, got, want)
		}
	}
	var a, b bytes.Buffer
	if err := cal.Write(&a); err != nil {
		t.Fatal(err)
	}
	back, err := ReadCalibration("calib.json", bytes.NewReader(a.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if err := back.Write(&b); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Errorf("round trip changed the file:\n%s\nvs\n%s", a.String(), b.String())
	}
}

func TestCalibrationLoaderErrors(t *testing.T) {
	good := `{"version": 1, "devices": {"cpu": {"ops": {"matmul": {"launch_ns": 100, "compute": {"max": 0.5, "half": 1e6, "gamma": 1}, "memory": {"max": 0.5, "half": 1e5, "gamma": 1}}}}}}`
	tests := []struct{ name, json, want string }{
		{"version", strings.Replace(good, `"version": 1`, `"version": 7`, 1), "calib.json: version: got 7, this flowkit reads version 1"},
		{"device", strings.Replace(good, `"cpu"`, `"Z80"`, 1), `calib.json: devices["Z80"]: unknown device type`},
		{"max", strings.Replace(good, `"max": 0.5`, `"max": 3`, 1), `calib.json: devices["cpu"].ops["matmul"].compute.max: must be in (0, 2], got 3`},
		{"launch", strings.Replace(good, `100`, `-5`, 1), `ops["matmul"].launch_ns: must not be negative`},
		{"syntax", strings.Replace(good, `"devices": {`, "\n\"devices\": x{", 1), "calib.json:2:12: invalid character 'x'"},
		{"unknown field", strings.Replace(good, `"launch_ns"`, `"lunch_ns"`, 1), `calib.json:1:55: unknown field "lunch_ns"`},
		{"type", strings.Replace(good, `100`, `"fast"`, 1), "calib.json:1:68: launch_ns: a JSON string where an integer is wanted"},
		{"dispatch", strings.Replace(good, `"ops"`, `"dispatch_ns": -3, "ops"`, 1), `devices["cpu"].dispatch_ns: must not be negative, got -3`},
		{"op contention", strings.Replace(good, `"ops"`, `"op_contention": {"max_pool2d": -0.2}, "ops"`, 1), `devices["cpu"].op_contention["max_pool2d"]: must be a number in [0, 10] for an op kind, got -0.2`},
		{"op contention kind", strings.Replace(good, `"ops"`, `"op_contention": {"": 0.2}, "ops"`, 1), `devices["cpu"].op_contention[""]: must be a number in [0, 10] for an op kind, got 0.2`},
		{"contention", strings.Replace(good, `"ops"`, `"contention": 1e6, "ops"`, 1), `devices["cpu"].contention: must be a number in [0, 10] (the slowdown per busy neighbour), got 1e+06`},
		{"cores", strings.Replace(strings.Replace(good, `"cpu"`, `"cpu/1"`, 1), `"ops"`, `"cores": 2, "ops"`, 1), `devices["cpu/1"].cores: 2, where the key says 1`},
		{"probe", strings.Replace(good, `"ops"`, `"probe": {"gemm_ns": 0, "stream_ns": 5}, "ops"`, 1), `devices["cpu"].probe: times must be positive, got gemm_ns 0, stream_ns 5`},
		{"probe spread", strings.Replace(good, `"ops"`, `"probe": {"gemm_ns": 4, "stream_ns": 5, "spread": -1}, "ops"`, 1), `devices["cpu"].probe.spread: must be a non-negative number, got -1`},
	}
	for _, tt := range tests {
		_, err := ReadCalibration("calib.json", strings.NewReader(tt.json))
		if !errors.Is(err, ErrCalibration) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want …%s…", tt.name, err, tt.want)
		}
	}
	if _, err := ReadCalibration("calib.json", strings.NewReader(good)); err != nil {
		t.Errorf("good file: %v", err)
	}
}

// The probe of a span is each kernel's median over its probes, spread by
// the larger of the kernels' (max − min) / median; a later probe's change
// is the mean of the kernels' changes.
func TestProbe(t *testing.T) {
	got := Over([]Probe{{GEMM: 1100, Stream: 4000}, {GEMM: 1000, Stream: 3800}, {GEMM: 1050, Stream: 4200}})
	if got.GEMM != 1050 || got.Stream != 4000 || math.Abs(got.Spread-0.1) > 1e-12 {
		t.Errorf("Over = %+v, want GEMM 1050, stream 4000, spread 0.1 (the stream's 400/4000)", got)
	}
	if got := Over([]Probe{{GEMM: 7, Stream: 9}}); got != (Probe{GEMM: 7, Stream: 9}) {
		t.Errorf("Over one probe = %+v", got)
	}
	before := Probe{GEMM: 1000, Stream: 4000}
	if c := before.Change(Probe{GEMM: 1200, Stream: 4400}); math.Abs(c-0.15) > 1e-12 {
		t.Errorf("Change = %v, want 0.15 (20%% and 10%% slower)", c)
	}
	if c := before.Change(before); c != 0 {
		t.Errorf("Change to itself = %v", c)
	}
}
