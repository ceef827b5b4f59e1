package cost

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
	"github.com/stretchr/testify/require"
)

// Within a family, shapes are priced by interpolating the measured ones in
// log-log space; a shape outside the measured range follows the nearest
// segment.
func TestFamilyInterpolation(t *testing.T) {
	pts := []FamilyPoint{{Work: 1e6, Time: time.Millisecond}, {Work: 4e6, Time: 2 * time.Millisecond}}
	for _, tt := range []struct {
		w    float64
		want time.Duration
	}{
		{1e6, time.Millisecond},
		{2e6, 1414214 * time.Nanosecond}, // slope ½: √2 ms
		{16e6, 4 * time.Millisecond},     // extended along the segment
	} {
		got, ok := interpolate(pts, tt.w)
		require.True(t, ok)
		require.InDelta(t, tt.want.Seconds(), got, 1e-9, "work %g", tt.w)
	}
	_, ok := interpolate(pts[:1], 1e6)
	require.False(t, ok, "one point is no family")
}

// Fit keeps a kind's families and reports the held-out error of
// interpolating within them: exact for a family whose time is a power law.
func TestFitFamilies(t *testing.T) {
	dev, err := topology.Spec("cpu", 1)
	require.NoError(t, err)
	var samples []Sample
	for i, fam := range []struct {
		name string
		rate float64 // FLOP/s
	}{{"a", 10e9}, {"b", 30e9}} {
		for b := 1; b <= 64; b *= 2 {
			flops := float64(b) * 1e6
			samples = append(samples, Sample{
				Work: Work{Kind: "matmul", FLOPs: flopsOf(flops), Bytes: 1, DType: "f32", Shape: []int{b, i}, Family: fam.name},
				Time: time.Duration(flops / fam.rate * 1e9),
			})
		}
	}
	of, rep, err := Fit(dev, samples)
	require.NoError(t, err)
	require.Len(t, of.Families, 2)
	require.Less(t, rep.MedianRelErr, 1e-6, "interpolating a power law is exact")
	m := NewComputeModel(&Calibration{Version: CalibrationVersion, Devices: map[string]*DeviceCalibration{"cpu/1": {Cores: 1, Ops: map[string]*OpFit{"matmul": &of}}}})
	p, err := m.Predict(dev, Work{Kind: "matmul", FLOPs: 3e6, Bytes: 1, DType: "f32", Shape: []int{3, 1}, Family: "b"})
	require.NoError(t, err)
	require.Equal(t, FromFamily, p.Source)
	require.InDelta(t, 3e6/30e9, p.Time.Seconds(), 1e-8)
}

func flopsOf(f float64) units.FLOPs { return units.FLOPs(f) }

// Shapes of one family at the same work (one layer twice, moving other
// bytes) make one point, at their median time: a family's points are at
// increasing work, as a calibration file must hold them.
func TestFamilyEqualWork(t *testing.T) {
	dev, err := topology.Spec("cpu", 1)
	require.NoError(t, err)
	var samples []Sample
	for i, c := range []struct {
		flops float64
		t     time.Duration
	}{{1e6, 100 * time.Microsecond}, {1e6, 300 * time.Microsecond}, {2e6, 200 * time.Microsecond}, {2e6, 260 * time.Microsecond}, {2e6, 600 * time.Microsecond}, {4e6, 400 * time.Microsecond}} {
		samples = append(samples, Sample{Work: Work{Kind: "add", FLOPs: flopsOf(c.flops), Bytes: units.Bytes(i + 1), DType: "f32", Shape: []int{i}, Family: "f"}, Time: c.t})
	}
	of, err := ExactOnly(dev, samples)
	require.NoError(t, err)
	require.Equal(t, []FamilyPoint{{1e6, 200 * time.Microsecond}, {2e6, 260 * time.Microsecond}, {4e6, 400 * time.Microsecond}}, of.Families["f"])
	cal := &Calibration{Version: CalibrationVersion, Devices: map[string]*DeviceCalibration{"cpu/1": {Cores: 1, Ops: map[string]*OpFit{"add": &of}}}}
	path := filepath.Join(t.TempDir(), "calib.json")
	require.NoError(t, cal.WriteFile(path))
	_, err = LoadCalibration(path)
	require.NoError(t, err, "a file calibration writes loads")
}
