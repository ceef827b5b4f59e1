package runtime

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/plans"
)

// A speed check per kind of CPU device the calibration probed, each once:
// not for a GPU, nor for a CPU kind calibrated without a probe; and a
// check's figures are the probes' (a calibrated probe far faster than any
// CPU reads as much slower, and says the prediction runs low).
func TestSpeedChecks(t *testing.T) {
	cal := cost.NewCalibration()
	fast := &cost.Probe{GEMM: time.Microsecond, Stream: time.Microsecond}
	cal.Devices["cpu/1"] = &cost.DeviceCalibration{Probe: fast, Ops: map[string]*cost.OpFit{}}
	cal.Devices["cpu/2"] = &cost.DeviceCalibration{Ops: map[string]*cost.OpFit{}} // a file of before probes
	cal.Devices["H200"] = &cost.DeviceCalibration{Probe: fast, Ops: map[string]*cost.OpFit{}}
	devs := []plans.Device{{Name: "b", Type: "cpu", Workers: 1}, {Name: "gpu", Type: "H200"}, {Name: "a", Type: "cpu", Workers: 1}, {Name: "c", Type: "cpu", Workers: 2}}
	checks, err := SpeedChecks(cal, devs)
	require.NoError(t, err)
	require.Len(t, checks, 1)
	s := checks[0]
	require.Equal(t, "cpu/1", s.Key)
	s.Probe()
	s.Probe()
	s.Probe()
	s.Finish()
	require.Greater(t, s.Now.GEMM, 10*time.Microsecond)
	require.Greater(t, s.Now.Stream, 10*time.Microsecond)
	require.Equal(t, fast.Change(s.Now), s.Change)
	require.Greater(t, s.Change, ProbeTolerance)
	require.Contains(t, s.String(), "cpu/1 ran the reference kernels")
	require.Contains(t, s.String(), "medians of 3 probes")
	require.Contains(t, s.String(), "may run low for the machine's sake")

	none, err := SpeedChecks(nil, devs)
	require.NoError(t, err)
	require.Empty(t, none)

	// The CPU kind calibrated without a probe is named, once, for a note:
	// its speed goes unchecked.
	unprobed, err := Unprobed(cal, append(devs, plans.Device{Name: "d", Type: "cpu", Workers: 2}))
	require.NoError(t, err)
	require.Equal(t, []string{"cpu/2"}, unprobed)
	unprobed, err = Unprobed(nil, devs)
	require.NoError(t, err)
	require.Empty(t, unprobed)
}
