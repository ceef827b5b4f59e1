package cost

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
)

// ErrBadWork is wrapped when a Work cannot be priced.
var ErrBadWork = errors.New("cost: bad work")

// Work is what the compute model prices: one kernel of an op kind, its
// arithmetic and memory traffic, its data type and its shape (the shape
// only matters for exact measured entries).
type Work struct {
	Kind  string // op kind: "matmul", "conv2d", "relu", …
	FLOPs units.FLOPs
	Bytes units.Bytes // bytes read plus written
	DType string      // f32, tf32, f16, bf16, f8 (see topology.CanonicalDType)
	Shape []int
	// Family, if set, names shapes that differ only in how much work they
	// do — one layer at several batch sizes. A fit interpolates a family's
	// measured shapes before it falls back to the op kind's curves.
	Family string
	// Traffic, if set, is the bytes the kernel moves through memory where
	// Bytes says something else: an in-process collective's Bytes is its
	// message, its traffic depends on the members and on how it reduces.
	// A fit on samples that have it prices memory by it (OpFit.Traffic).
	Traffic units.Bytes
}

// Curve is a saturating efficiency curve over work size w (FLOPs or bytes):
//
//	eff(w) = Max · w^Gamma / (w^Gamma + Half^Gamma)
//
// Max is the asymptotic fraction of peak, Half the size at which half of it
// is reached, Gamma the sharpness of the knee (1: a hyperbola, under which
// time is affine in w).
type Curve struct {
	Max   float64 `json:"max"`
	Half  float64 `json:"half"`
	Gamma float64 `json:"gamma"`
}

// At evaluates the curve.
func (c Curve) At(w float64) float64 {
	if w <= 0 {
		return c.Max
	}
	r := math.Pow(c.Half/w, c.Gamma)
	return c.Max / (1 + r)
}

// OpFit is the model of one op kind on one device type.
type OpFit struct {
	Launch  time.Duration `json:"launch_ns"`
	Compute Curve         `json:"compute"` // over FLOPs, fraction of the dtype's peak
	Memory  Curve         `json:"memory"`  // over bytes, fraction of memory bandwidth
	// Exact holds measured shapes; a Work whose dtype and shape match one
	// is priced at its measured time, not by the curves.
	Exact []Measurement `json:"exact,omitempty"`
	// Families holds, per shape family (Work.Family), the family's
	// measured shapes by work, for interpolation.
	Families map[string][]FamilyPoint `json:"families,omitempty"`
	// Report is the fit's own error on held-out shapes, when fitted.
	Report *FitReport `json:"fit,omitempty"`
	// Traffic says that the memory curve is over Work.Traffic, where a
	// Work has it, not Work.Bytes (absent in files of before: Bytes).
	Traffic bool `json:"traffic,omitempty"`
}

// defaults says whether f's curves are dev's default efficiencies, as
// ExactOnly's are (shapes measured, too few to fit curves).
func (f *OpFit) defaults(dev topology.DeviceSpec) bool {
	d := defaultFit(dev)
	return f.Launch == d.Launch && f.Compute == d.Compute && f.Memory == d.Memory
}

// FamilyPoint is one measured shape of a family: its work (FLOPs, or
// bytes for an op that does no arithmetic) and its time.
type FamilyPoint struct {
	Work float64       `json:"work"`
	Time time.Duration `json:"time_ns"`
}

// workOf is the size a family is interpolated over.
func workOf(flops, bytes float64) float64 {
	if flops > 0 {
		return flops
	}
	return bytes
}

// interpolate prices work w within a family: piecewise-linear in log time
// over log work between the measured points, extended along the nearest
// segment (its slope held between 0 and 1.5: time neither falls with work
// nor grows much faster than it). ok is false with fewer than two points.
func interpolate(pts []FamilyPoint, w float64) (t float64, ok bool) {
	if len(pts) < 2 || w <= 0 {
		return 0, false
	}
	i := sort.Search(len(pts), func(i int) bool { return pts[i].Work >= w })
	i = min(max(i, 1), len(pts)-1)
	a, b := pts[i-1], pts[i]
	if a.Work <= 0 || b.Work <= a.Work || a.Time <= 0 || b.Time <= 0 {
		return 0, false
	}
	slope := math.Log(float64(b.Time)/float64(a.Time)) / math.Log(b.Work/a.Work)
	if w < a.Work || w > b.Work {
		slope = min(max(slope, 0), 1.5)
	}
	return float64(a.Time) * math.Pow(w/a.Work, slope) / 1e9, true
}

// Measurement is the measured time of one shape (the median of repeats).
type Measurement struct {
	DType string        `json:"dtype"`
	Shape []int         `json:"shape"`
	Time  time.Duration `json:"time_ns"`
	// Traffic is the Work's Traffic, which tells apart works of one shape
	// that move different bytes (absent: any).
	Traffic units.Bytes `json:"traffic,omitempty"`
}

// predict is the compute model's formula:
//
//	t = Launch + max(FLOPs / (peak · eff_c(FLOPs)), Bytes / (bw · eff_m(Bytes)))
func (f *OpFit) predict(peak units.FLOPsPerSecond, bw units.BytesPerSecond, flops, bytes float64) float64 {
	var tc, tm float64
	if flops > 0 {
		tc = flops / (float64(peak) * f.Compute.At(flops))
	}
	if bytes > 0 {
		tm = bytes / (float64(bw) * f.Memory.At(bytes))
	}
	return f.Launch.Seconds() + max(tc, tm)
}

// defaultFit is the uncalibrated model of a device: the catalog's default
// efficiencies with hyperbolic curves.
func defaultFit(dev topology.DeviceSpec) *OpFit {
	e := dev.Default
	return &OpFit{
		Launch:  e.Launch,
		Compute: Curve{Max: e.Compute, Half: float64(e.HalfFLOPs), Gamma: 1},
		Memory:  Curve{Max: e.Memory, Half: float64(e.HalfBytes), Gamma: 1},
	}
}

// Source says which part of the model priced a Work.
type Source string

const (
	FromExact   Source = "exact"   // a measured shape
	FromFamily  Source = "family"  // interpolated between measured shapes of its family
	FromFit     Source = "fit"     // a calibrated curve
	FromDefault Source = "default" // catalog peaks and default efficiencies (also a fit's that are those, as ExactOnly's)
)

// Prediction is a priced Work.
type Prediction struct {
	Time    time.Duration
	Compute time.Duration // the arithmetic term, before max
	Memory  time.Duration // the memory term, before max
	Source  Source
}

// ComputeModel prices kernels on devices. Lookup order for a Work of kind
// K and dtype D on device type T: an exact measured shape of K (or of the
// "*" entry) under T in the calibration; then T's fitted curves for K, or
// its "*" entry; then the catalog defaults for T. A nil *Calibration, or a
// zero ComputeModel, uses the defaults only. It is safe for concurrent use.
type ComputeModel struct {
	calib *Calibration
	exact map[string]time.Duration
}

// NewComputeModel returns a model using c (which may be nil).
func NewComputeModel(c *Calibration) *ComputeModel {
	m := &ComputeModel{calib: c, exact: map[string]time.Duration{}}
	if c == nil {
		return m
	}
	for typ, dc := range c.Devices {
		for kind, of := range dc.Ops {
			for _, e := range of.Exact {
				dt, _ := topology.CanonicalDType(e.DType)
				m.exact[exactKey(typ, kind, dt, e.Shape, e.Traffic)] = e.Time
			}
		}
	}
	return m
}

func exactKey(typ, kind, dtype string, shape []int, traffic units.Bytes) string {
	var b strings.Builder
	b.WriteString(typ + "\x00" + kind + "\x00" + dtype + "\x00")
	for _, d := range shape {
		b.WriteString(strconv.Itoa(d) + "x")
	}
	if traffic > 0 {
		b.WriteString("\x00" + strconv.FormatInt(int64(traffic), 10))
	}
	return b.String()
}

// Time prices w on a device of spec dev.
func (m *ComputeModel) Time(dev topology.DeviceSpec, w Work) (time.Duration, error) {
	p, err := m.Predict(dev, w)
	return p.Time, err
}

// Predict prices w on a device of spec dev and says how.
func (m *ComputeModel) Predict(dev topology.DeviceSpec, w Work) (Prediction, error) {
	if w.FLOPs < 0 || w.Bytes < 0 || math.IsNaN(float64(w.FLOPs)) || math.IsInf(float64(w.FLOPs), 0) {
		return Prediction{}, fmt.Errorf("%w: %s with %v and %v", ErrBadWork, w.Kind, w.FLOPs, w.Bytes)
	}
	dtype, ok := topology.CanonicalDType(w.DType)
	if !ok {
		return Prediction{}, fmt.Errorf("%w: %s: unknown dtype %q (want one of %s)", ErrBadWork, w.Kind, w.DType, strings.Join(topology.DTypes, ", "))
	}
	peak, _ := dev.Peak.PeakFor(dtype)
	if m != nil && m.calib != nil {
		key := CalibrationKey(dev)
		dc := m.calib.Devices[key]
		measuredOn := dev // the spec the calibration was made on
		if dc == nil {
			key = dev.Type
			dc = m.calib.Devices[key]
			if dc != nil && dc.Cores > 0 && dc.Cores != dev.Cores {
				if s, err := topology.Spec(dev.Type, dc.Cores); err == nil {
					measuredOn = s
				}
			}
		}
		if dc != nil {
			for _, kind := range []string{w.Kind, "*"} {
				// A measurement of the work's traffic, else one that does
				// not say (of a file of before traffic was measured).
				for _, traffic := range []units.Bytes{w.Traffic, 0} {
					if t, ok := m.exact[exactKey(key, kind, dtype, w.Shape, traffic)]; ok && w.Shape != nil {
						return Prediction{Time: t, Source: FromExact}, nil
					}
				}
			}
			if of := dc.Ops[w.Kind]; of != nil && w.Family != "" {
				if t, ok := interpolate(of.Families[w.Family], workOf(float64(w.FLOPs), float64(w.Bytes))); ok {
					return Prediction{Time: time.Duration(math.Round(t * 1e9)), Source: FromFamily}, nil
				}
			}
			for _, kind := range []string{w.Kind, "*"} {
				if of := dc.Ops[kind]; of != nil {
					src := FromFit
					if of.defaults(measuredOn) {
						src = FromDefault
					}
					return price(of, peak, dev.MemBandwidth, w, src), nil
				}
			}
		}
	}
	return price(defaultFit(dev), peak, dev.MemBandwidth, w, FromDefault), nil
}

func price(of *OpFit, peak units.FLOPsPerSecond, bw units.BytesPerSecond, w Work, src Source) Prediction {
	if of.Traffic && w.Traffic > 0 {
		w.Bytes = w.Traffic
	}
	f, b := float64(w.FLOPs), float64(w.Bytes)
	var p Prediction
	if f > 0 {
		p.Compute = w.FLOPs.Over(peak * units.FLOPsPerSecond(of.Compute.At(f)))
	}
	if b > 0 {
		p.Memory = w.Bytes.Over(bw * units.BytesPerSecond(of.Memory.At(b)))
	}
	p.Time = of.Launch + max(p.Compute, p.Memory)
	p.Source = src
	return p
}

// Slowdown is the calibrated contention of a device for kernels of kind
// (see DeviceCalibration.Contention and OpContention), 0 when
// uncalibrated.
func (m *ComputeModel) Slowdown(dev topology.DeviceSpec, kind string) float64 {
	dc := m.device(dev)
	if dc == nil {
		return 0
	}
	if k, ok := dc.OpContention[kind]; ok {
		return k
	}
	return dc.Contention
}

// Contends reports whether a device has any contention calibrated: for
// all its kernels or for some kinds (Slowdown above 0 for some kind).
func (m *ComputeModel) Contends(dev topology.DeviceSpec) bool {
	dc := m.device(dev)
	if dc == nil {
		return false
	}
	if dc.Contention > 0 {
		return true
	}
	for _, k := range dc.OpContention {
		if k > 0 {
			return true
		}
	}
	return false
}

// Dispatch is the calibrated dispatch latency of a device (see
// DeviceCalibration.Dispatch), 0 when uncalibrated.
func (m *ComputeModel) Dispatch(dev topology.DeviceSpec) time.Duration {
	if dc := m.device(dev); dc != nil {
		return dc.Dispatch
	}
	return 0
}

// device is the calibration of dev: under its key, else its bare type;
// nil if none.
func (m *ComputeModel) device(dev topology.DeviceSpec) *DeviceCalibration {
	if m == nil {
		return nil
	}
	return m.calib.For(dev)
}

// For returns the calibration of dev: under its key, else its bare type;
// nil if none.
func (c *Calibration) For(dev topology.DeviceSpec) *DeviceCalibration {
	if c == nil {
		return nil
	}
	for _, key := range []string{CalibrationKey(dev), dev.Type} {
		if dc := c.Devices[key]; dc != nil {
			return dc
		}
	}
	return nil
}

// Lacks returns the calibration keys of devs that c holds nothing for,
// neither under their key nor under their bare type (the devices the
// catalog's efficiencies price), sorted, each once; and the keys c holds.
func (c *Calibration) Lacks(devs []topology.DeviceSpec) (lacking, held []string) {
	m := &ComputeModel{calib: c}
	seen := map[string]bool{}
	for _, d := range devs {
		if k := CalibrationKey(d); !seen[k] && m.device(d) == nil {
			seen[k] = true
			lacking = append(lacking, k)
		}
	}
	slices.Sort(lacking)
	return lacking, sortedKeys(c.Devices)
}

// LacksOp says whether c holds dev's calibration but no fit of kernels of
// kind, neither its own nor a "*" entry: such a kernel is priced by the
// catalog's efficiencies, as on an uncalibrated device.
func (c *Calibration) LacksOp(dev topology.DeviceSpec, kind string) bool {
	dc := (&ComputeModel{calib: c}).device(dev)
	return dc != nil && dc.Ops[kind] == nil && dc.Ops["*"] == nil
}

// CalibrationKey is the key under which a calibration file holds a
// device's calibration: the device type, and for a CPU its core count
// ("cpu/2"), since a CPU's efficiencies change with the cores a kernel is
// spread over. A calibration stored under the bare type applies to every
// core count.
func CalibrationKey(dev topology.DeviceSpec) string {
	if dev.Class == topology.CPU && dev.Cores > 0 {
		return fmt.Sprintf("%s/%d", dev.Type, dev.Cores)
	}
	return dev.Type
}

// sortedKeys returns a map's keys in order, so that no map iteration
// decides an output.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
