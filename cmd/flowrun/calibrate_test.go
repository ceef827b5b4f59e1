package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/topology"
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
		Dispatch     map[string]int64              `json:"dispatch_ns"`
		OpContention map[string]map[string]float64 `json:"op_contention"`
		Probe        map[string]cost.Probe         `json:"probe"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	cal, err := cost.LoadCalibration(path)
	require.NoError(t, err)
	dc := cal.Devices["cpu/1"]
	require.NotNil(t, dc)
	require.Equal(t, int64(dc.Dispatch), rep.Dispatch["cpu/1"])
	require.GreaterOrEqual(t, dc.Dispatch, time.Duration(0))
	require.Equal(t, dc.OpContention, rep.OpContention["cpu/1"])
	require.NotNil(t, dc.Probe, "the reference kernels' speed, which exec --compare checks")
	require.Equal(t, *dc.Probe, rep.Probe["cpu/1"])
	require.Positive(t, dc.Probe.GEMM)
	require.Positive(t, dc.Probe.Stream)
	for kind, k := range dc.OpContention {
		require.GreaterOrEqual(t, k, 0.0, kind)
		require.Contains(t, dc.Ops, kind, "a kind measured beside a neighbour was measured alone")
	}
	ar := dc.Ops["allreduce"]
	require.NotNil(t, ar)
	require.True(t, ar.Traffic)
	for _, e := range ar.Exact {
		require.Positive(t, e.Traffic, "%v", e.Shape)
	}
	// A gradient bucket's copies, measured at the first batch.
	for _, kind := range []string{"pack", "unpack"} {
		require.NotNil(t, dc.Ops[kind], kind)
		require.Len(t, dc.Ops[kind].Exact, 1, kind)
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
		{[]string{"--models", "mlp", "--workers", "1,100000"}, fmt.Sprintf("--workers: 100000 workers, this machine has %d cores", goruntime.NumCPU())},
		{[]string{"--models", "mlp", "--workers", "0"}, "--workers: 0 is not a positive count"},
		{[]string{"--models", "mlp:layers=2"}, "--models: zoo: mlp:layers=2: model mlp has no size options"},
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

// Contention is the median slowdown of the kernels that ran beside a busy
// neighbour against the same shapes alone, over all kernels and by op
// kind; kernels of 100 µs or less, and shapes never run alone, say
// nothing; a kind that ran faster beside a neighbour gets 0.
func TestContend(t *testing.T) {
	sample := func(kind string, n int, d time.Duration) cost.Sample {
		return cost.Sample{Work: cost.Work{Kind: kind, Shape: []int{n}}, Time: d}
	}
	ms := time.Millisecond
	m := &measured{alone: []cost.Sample{
		sample("pool", 1, 2*ms), sample("pool", 2, 4*ms), sample("pool", 3, 8*ms),
		sample("conv", 1, 10*ms), sample("conv", 2, 20*ms),
		sample("relu", 1, 10*ms),
		sample("tiny", 1, 50*time.Microsecond),
	}}
	m.contend([]cost.Sample{
		sample("pool", 1, 3*ms), sample("pool", 2, 5*ms), sample("pool", 3, 12*ms), // +50%, +25%, +50%
		sample("conv", 1, 11*ms), sample("conv", 2, 22*ms), sample("conv", 3, 99*ms), // +10%, +10%, never alone
		sample("relu", 1, 9*ms), // −10%
		sample("tiny", 1, time.Millisecond),
	})
	require.Len(t, m.slowdowns, 6)
	require.InDelta(t, 0.25, m.contention, 1e-12, "the median of −10%, 10%, 10%, 25%, 50%, 50% (the upper one)")
	require.Len(t, m.opContention, 3)
	require.InDelta(t, 0.5, m.opContention["pool"], 1e-12)
	require.InDelta(t, 0.1, m.opContention["conv"], 1e-12)
	require.Zero(t, m.opContention["relu"])
	require.InDelta(t, 0.5, m.slowdownOf("pool"), 1e-12)
	require.InDelta(t, 0.25, m.slowdownOf("matmul"), 1e-12, "a kind not measured: the median")
}

// Interrupted, calibrate says how far it got and writes nothing; a model
// this machine cannot hold is refused before anything is measured.
func TestCalibrateStops(t *testing.T) {
	out := filepath.Join(t.TempDir(), "calib.json")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	cmd := newCalibrateCmd()
	cmd.SetArgs([]string{"--models", "mlp", "--batches", "4,8", "--workers", "1", "--rounds", "2", "--iters", "3", "-o", out})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	err := cmd.ExecuteContext(ctx)
	require.Error(t, err)
	require.Regexp(t, `^interrupted after measuring 0 of \d+ plans \(2 rounds of \d+\): a calibration fits them all, so nothing is written$`, err.Error())
	require.NoFileExists(t, out)

	if _, ok := topology.HostMemory(); !ok {
		t.Skip("no /proc/meminfo")
	}
	cmd = newCalibrateCmd()
	cmd.SetArgs([]string{"--models", "mlp,gpt:layers=1,hidden=8,heads=2,seq=300000,vocab=256", "--batches", "64", "--workers", "1", "--rounds", "1", "--iters", "3", "-o", out})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	printed := captureStdout(t, func() { err = cmd.Execute() })
	require.ErrorContains(t, err, "gpt:layers=1,hidden=8,heads=2,seq=300000,vocab=256 at batch 64 (single): runtime: the plan's CPU devices need ")
	require.Empty(t, printed, "nothing measured")
	require.NoFileExists(t, out)
}

// fitLink fits latency + size/bandwidth; sizes that cannot give a slope
// (all alike, or times that do not grow) are an error, never a NaN.
func TestFitLink(t *testing.T) {
	lat, bw, fitted, err := fitLink([]int64{1000, 2000, 4000}, []float64{11e-6, 12e-6, 14e-6})
	require.NoError(t, err)
	require.InDelta(t, 10e-6, lat.Seconds(), 1e-9)
	require.InDelta(t, 1e9, bw, 1e3)
	require.InDeltaSlice(t, []float64{11e-6, 12e-6, 14e-6}, fitted, 1e-12)
	for _, tt := range []struct {
		sizes []int64
		times []float64
	}{
		{[]int64{4096, 4096}, []float64{1e-5, 1.1e-5}},
		{[]int64{1000, 2000}, []float64{2e-5, 1e-5}},
	} {
		_, _, _, err := fitLink(tt.sizes, tt.times)
		require.ErrorContains(t, err, "no bandwidth to fit", "%v %v", tt.sizes, tt.times)
	}
}
