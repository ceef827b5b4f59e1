package cost

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
)

// ErrFit is wrapped when samples cannot be fitted.
var ErrFit = errors.New("cost: cannot fit")

// Sample is one measured kernel.
type Sample struct {
	Work Work
	Time time.Duration
}

// FitReport is a fit's error, relative (|pred−meas|/meas), on the shapes
// held out of it.
type FitReport struct {
	Kind         string  `json:"kind"`
	Samples      int     `json:"samples"`  // measurements given
	Shapes       int     `json:"shapes"`   // distinct (dtype, shape, work) among them
	HeldOut      int     `json:"held_out"` // shapes held out to test the fit
	MedianRelErr float64 `json:"median_rel_err"`
	MaxRelErr    float64 `json:"max_rel_err"`
}

func (r FitReport) String() string {
	return fmt.Sprintf("%s: %d samples, %d shapes, held out %d: median error %.1f%%, max %.1f%%",
		r.Kind, r.Samples, r.Shapes, r.HeldOut, 100*r.MedianRelErr, 100*r.MaxRelErr)
}

// shapeStat is one distinct shape with the median of its measurements.
type shapeStat struct {
	family string
	dtype  string
	shape  []int
	flops  float64
	bytes  float64
	peak   float64
	t      float64 // seconds
	// traffic is the work's Traffic (0: none), which bytes then is.
	traffic units.Bytes
}

// Fit fits the compute model of one op kind on device dev from measured
// samples (all of one Work.Kind; repeats of a shape are reduced to their
// median). It fits the launch overhead and the two efficiency curves by
// minimizing the squared error of log time (so every shape counts by its
// relative error) with Nelder–Mead from nine deterministic starts, with a
// weak pull towards the catalog defaults that keeps parameters the data
// cannot see (compute curves of memory-bound ops) at sane values.
//
// To report an honest error, every fourth shape in order of work is held
// out, the model is fitted on the rest and tested on them; the OpFit
// returned is then refitted on all shapes, and carries every shape's
// median as an exact measurement. At least four distinct shapes are
// needed.
func Fit(dev topology.DeviceSpec, samples []Sample) (OpFit, FitReport, error) {
	if len(samples) == 0 {
		return OpFit{}, FitReport{}, fmt.Errorf("%w: no samples", ErrFit)
	}
	kind := samples[0].Work.Kind
	stats, err := shapeStats(dev, kind, samples)
	if err != nil {
		return OpFit{}, FitReport{}, err
	}
	if len(stats) < 4 {
		return OpFit{}, FitReport{}, fmt.Errorf("%w %s: %d distinct shapes, need at least 4", ErrFit, kind, len(stats))
	}
	var train, test []shapeStat
	for i, s := range stats {
		if i%4 == 2 {
			test = append(test, s)
		} else {
			train = append(train, s)
		}
	}
	held := fitStats(dev, train)
	heldFamilies := families(train)
	errs := make([]float64, len(test))
	for i, s := range test {
		p, ok := interpolate(heldFamilies[s.family], workOf(s.flops, s.bytes))
		if !ok {
			p = held.predict(units.FLOPsPerSecond(s.peak), dev.MemBandwidth, s.flops, s.bytes)
		}
		errs[i] = math.Abs(p-s.t) / s.t
	}
	slices.Sort(errs)
	rep := FitReport{Kind: kind, Samples: len(samples), Shapes: len(stats), HeldOut: len(test),
		MedianRelErr: median(errs), MaxRelErr: errs[len(errs)-1]}
	of := fitStats(dev, stats)
	of.measured(stats)
	of.Report = &rep
	return of, rep, nil
}

// FitAll fits every op kind found in samples and returns them as one
// device's calibration, with the reports in kind order.
func FitAll(dev topology.DeviceSpec, samples []Sample) (*DeviceCalibration, []FitReport, error) {
	byKind := map[string][]Sample{}
	for _, s := range samples {
		byKind[s.Work.Kind] = append(byKind[s.Work.Kind], s)
	}
	dc := &DeviceCalibration{Ops: map[string]*OpFit{}}
	if dev.Class == topology.CPU {
		dc.Cores = dev.Cores
	}
	var reps []FitReport
	for _, kind := range sortedKeys(byKind) {
		of, rep, err := Fit(dev, byKind[kind])
		if err != nil {
			return nil, nil, err
		}
		dc.Ops[kind] = &of
		reps = append(reps, rep)
	}
	return dc, reps, nil
}

func shapeStats(dev topology.DeviceSpec, kind string, samples []Sample) ([]shapeStat, error) {
	groups := map[string][]float64{}
	first := map[string]shapeStat{}
	for i, s := range samples {
		w := s.Work
		if w.Kind != kind {
			return nil, fmt.Errorf("%w: sample %d is %q, not %q: fit one kind at a time (or use FitAll)", ErrFit, i, w.Kind, kind)
		}
		if s.Time <= 0 || w.FLOPs < 0 || w.Bytes < 0 || w.FLOPs == 0 && w.Bytes == 0 {
			return nil, fmt.Errorf("%w: sample %d (%s %v): needs a positive time and some FLOPs or bytes", ErrFit, i, kind, w.Shape)
		}
		dt, ok := topology.CanonicalDType(w.DType)
		if !ok {
			return nil, fmt.Errorf("%w: sample %d: unknown dtype %q", ErrFit, i, w.DType)
		}
		peak, _ := dev.Peak.PeakFor(dt)
		bytes := w.Bytes
		if w.Traffic > 0 {
			bytes = w.Traffic
		}
		key := fmt.Sprintf("%s|%v|%g|%d|%d", dt, w.Shape, float64(w.FLOPs), w.Bytes, w.Traffic)
		if _, ok := first[key]; !ok {
			first[key] = shapeStat{family: w.Family, dtype: dt, shape: slices.Clone(w.Shape), flops: float64(w.FLOPs), bytes: float64(bytes),
				peak: float64(peak), traffic: w.Traffic}
		}
		groups[key] = append(groups[key], s.Time.Seconds())
	}
	var stats []shapeStat
	for _, key := range sortedKeys(groups) {
		ts := groups[key]
		slices.Sort(ts)
		st := first[key]
		st.t = median(ts)
		stats = append(stats, st)
	}
	slices.SortStableFunc(stats, func(a, b shapeStat) int {
		wa, wb := max(a.flops/a.peak, a.bytes/float64(dev.MemBandwidth)), max(b.flops/b.peak, b.bytes/float64(dev.MemBandwidth))
		switch {
		case wa < wb:
			return -1
		case wa > wb:
			return 1
		}
		return strings.Compare(shapeString(a.shape), shapeString(b.shape))
	})
	return stats, nil
}

func shapeString(s []int) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = strconv.Itoa(d)
	}
	return strings.Join(parts, "x")
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

func logit(p float64) float64 { return math.Log(p / (1 - p)) }

// Parameters are searched unconstrained: x = (ln launch_s, logit(max_c/2),
// ln half_c, logit((γ_c−0.3)/2.7), logit(max_m/2), ln half_m,
// logit((γ_m−0.3)/2.7)).
func decode(x []float64) OpFit {
	return OpFit{
		Launch:  time.Duration(math.Round(math.Exp(x[0]) * 1e9)),
		Compute: Curve{Max: 2 * sigmoid(x[1]), Half: math.Exp(x[2]), Gamma: 0.3 + 2.7*sigmoid(x[3])},
		Memory:  Curve{Max: 2 * sigmoid(x[4]), Half: math.Exp(x[5]), Gamma: 0.3 + 2.7*sigmoid(x[6])},
	}
}

func encode(f OpFit, launch float64) []float64 {
	g := func(gamma float64) float64 { return logit((gamma - 0.3) / 2.7) }
	return []float64{math.Log(launch), logit(f.Compute.Max / 2), math.Log(f.Compute.Half), g(f.Compute.Gamma),
		logit(f.Memory.Max / 2), math.Log(f.Memory.Half), g(f.Memory.Gamma)}
}

// fitStats fits OpFit parameters to shape medians.
func fitStats(dev topology.DeviceSpec, stats []shapeStat) OpFit {
	def := defaultFit(dev)
	tmin := math.Inf(1)
	for _, s := range stats {
		tmin = min(tmin, s.t)
	}
	prior := encode(*def, max(def.Launch.Seconds(), 1e-9))
	loss := func(x []float64) float64 {
		f := decode(x)
		f.Launch = 0
		launch := math.Exp(x[0])
		var sum float64
		for _, s := range stats {
			p := launch + f.predict(units.FLOPsPerSecond(s.peak), dev.MemBandwidth, s.flops, s.bytes)
			d := math.Log(p / s.t)
			sum += d * d
		}
		var reg float64
		for i := range x {
			d := x[i] - prior[i]
			reg += d * d
		}
		return sum/float64(len(stats)) + 1e-6*reg
	}
	var best []float64
	bestLoss := math.Inf(1)
	for _, launch := range []float64{0.5 * tmin, 0.05 * tmin, def.Launch.Seconds()} {
		for _, halfScale := range []float64{1, 1e-2, 1e2} {
			start := *def
			start.Compute.Half *= halfScale
			start.Memory.Half *= halfScale
			x0 := encode(start, max(launch, 1e-9))
			x, v := nelderMead(loss, x0, 0.5, 3000, 1e-12)
			if v < bestLoss {
				bestLoss, best = v, x
			}
		}
	}
	if best == nil {
		return *def
	}
	// Restarting Nelder–Mead from its own optimum escapes collapsed simplices.
	for range 3 {
		x, v := nelderMead(loss, best, 0.2, 3000, 1e-14)
		if v >= bestLoss {
			break
		}
		best, bestLoss = x, v
	}
	return decode(best)
}

// ExactOnly is the model of an op kind measured on too few shapes to fit
// curves: the measured shapes priced exactly, every other shape by the
// device's default efficiencies.
func ExactOnly(dev topology.DeviceSpec, samples []Sample) (OpFit, error) {
	if len(samples) == 0 {
		return OpFit{}, fmt.Errorf("%w: no samples", ErrFit)
	}
	stats, err := shapeStats(dev, samples[0].Work.Kind, samples)
	if err != nil {
		return OpFit{}, err
	}
	of := *defaultFit(dev)
	of.measured(stats)
	return of, nil
}

// measured records the measured shapes in f: as exact measurements, as
// families, and whether they priced memory by traffic.
func (f *OpFit) measured(stats []shapeStat) {
	f.Families = families(stats)
	for _, s := range stats {
		f.Exact = append(f.Exact, Measurement{DType: s.dtype, Shape: s.shape, Time: time.Duration(math.Round(s.t * 1e9)), Traffic: s.traffic})
		f.Traffic = f.Traffic || s.traffic > 0
	}
}

// families groups shapes by family into points sorted by work, keeping
// families of two or more. Shapes of one family at the same work (which
// no zoo model makes: a family leaves out only the batch) become one
// point, at their median time, as a family's points must be at increasing
// work (OpFit.check).
func families(stats []shapeStat) map[string][]FamilyPoint {
	by := map[string][]FamilyPoint{}
	for _, s := range stats {
		if s.family != "" {
			by[s.family] = append(by[s.family], FamilyPoint{Work: workOf(s.flops, s.bytes), Time: time.Duration(math.Round(s.t * 1e9))})
		}
	}
	out := map[string][]FamilyPoint{}
	for f, pts := range by {
		if len(pts) < 2 {
			continue
		}
		slices.SortFunc(pts, func(a, b FamilyPoint) int { return cmp.Or(cmp.Compare(a.Work, b.Work), cmp.Compare(a.Time, b.Time)) })
		var merged []FamilyPoint
		for i := 0; i < len(pts); {
			j := i + 1
			for j < len(pts) && pts[j].Work == pts[i].Work {
				j++
			}
			p := pts[i+(j-i)/2] // the median, the upper of two
			if (j-i)%2 == 0 {
				p.Time = (pts[i+(j-i)/2-1].Time + p.Time) / 2
			}
			merged = append(merged, p)
			i = j
		}
		if len(merged) < 2 {
			continue
		}
		out[f] = merged
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
