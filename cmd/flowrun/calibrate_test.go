package main

import (
	"encoding/json"
	"io"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/plans"
)

// A small calibration writes the dispatch latency of the devices that ran
// two-device plans, and all-reduces measured by their traffic.
func TestCalibrateDispatchAndTraffic(t *testing.T) {
	if goruntime.NumCPU() < 2 {
		t.Skip("two-device plans need two cores")
	}
	path := filepath.Join(t.TempDir(), "calib.json")
	out := captureStdout(t, func() {
		cmd := newCalibrateCmd()
		cmd.SetArgs([]string{"--models", "mlp", "--batches", "8,16,32,64", "--workers", "1", "--rounds", "1", "--iters", "4", "--json", "-o", path})
		cmd.SetErr(io.Discard)
		require.NoError(t, cmd.Execute())
	})
	var rep struct {
		Dispatch map[string]int64 `json:"dispatch_ns"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	cal, err := cost.LoadCalibration(path)
	require.NoError(t, err)
	dc := cal.Devices["cpu/1"]
	require.NotNil(t, dc)
	require.Equal(t, int64(dc.Dispatch), rep.Dispatch["cpu/1"])
	require.GreaterOrEqual(t, dc.Dispatch, time.Duration(0))
	ar := dc.Ops["allreduce"]
	require.NotNil(t, ar)
	require.True(t, ar.Traffic)
	for _, e := range ar.Exact {
		require.Positive(t, e.Traffic, "%v", e.Shape)
	}
}

// --device cuda measures plans on the GPU: a plan with no GPU device is an
// error naming its file, before anything runs, not a calibration of the
// CPU written as if of the GPU.
func TestCalibrateCUDABadPlans(t *testing.T) {
	dir := t.TempDir()
	cpu := writePlan(t, []plans.Device{{Name: "cpu0", Type: "cpu", Workers: 1}})
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--device", "cuda", "--plans", cpu}, "--plans: " + cpu + ": --device cuda: the plan has no GPU device"},
		{[]string{"--device", "cuda", "--plans", filepath.Join(dir, "none*.json")}, "no such file"},
		{[]string{"--device", "cuda"}, "--device cuda needs --plans"},
		{[]string{"--device", "cuda:x", "--plans", cpu}, `--device "cuda:x": want cpu or cuda[:N]`},
		{[]string{"--device", "cuda:-1", "--plans", cpu}, `--device "cuda:-1": want cpu or cuda[:N]`},
		{[]string{"--device", "cuda:1", "--plans", cpu}, "other ordinals are not supported yet"},
		{[]string{"--plans", cpu}, "--plans is for --device cuda"},
	} {
		out := filepath.Join(dir, "calib.json")
		cmd := newCalibrateCmd()
		cmd.SetArgs(append(tt.args, "--rounds", "1", "--iters", "3", "-o", out))
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		require.ErrorContains(t, cmd.Execute(), tt.want, "%v", tt.args)
		require.NoFileExists(t, out)
	}
}

// An -o that cannot be written fails before anything is measured.
func TestCalibrateBadOutput(t *testing.T) {
	dir := t.TempDir()
	for _, out := range []string{dir, filepath.Join(dir, "none", "calib.json")} {
		cmd := newCalibrateCmd()
		cmd.SetArgs([]string{"--models", "mlp", "--batches", "4", "--workers", "1", "--rounds", "1", "--iters", "3", "-o", out})
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		var err error
		printed := captureStdout(t, func() { err = cmd.Execute() })
		require.ErrorContains(t, err, "-o "+out+": ")
		require.Empty(t, printed, "nothing measured")
	}
}

// The dispatch latency is the median of the runs' latencies.
func TestMeasuredDispatch(t *testing.T) {
	for _, tt := range []struct {
		waits []time.Duration
		want  time.Duration
	}{
		{nil, 0},
		{[]time.Duration{30, 10, 20}, 20},
		{[]time.Duration{40, 10}, 40},
	} {
		m := &measured{latencies: slices.Clone(tt.waits)}
		require.Equal(t, tt.want, m.dispatch(), "%v", tt.waits)
		require.Equal(t, tt.waits, m.latencies, "dispatch reordered the latencies")
	}
}
