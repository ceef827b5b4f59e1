package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/trace"
)

// exec runs a plan file and, with --compare, reports predicted and
// measured step time and per-task errors as JSON.
func TestExecCompareJSON(t *testing.T) {
	dir := t.TempDir()
	st, err := plans.ParseStrategy("dp=2", 8)
	require.NoError(t, err)
	devs := []plans.Device{{Name: "cpu0", Type: "cpu", Workers: 1}, {Name: "cpu1", Type: "cpu", Workers: 1}}
	p, err := plans.Compile(plans.Config{Model: "mlp", Batch: 8, Strategy: st, Optimizer: graph.SGD{LR: 0.01}, Devices: devs})
	require.NoError(t, err)
	path := filepath.Join(dir, "plan.json")
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, plans.Encode(f, p))
	require.NoError(t, f.Close())

	out := captureStdout(t, func() {
		cmd := newExecCmd()
		cmd.SetArgs([]string{path, "--compare", "--json", "--iters", "5", "--warmup", "1",
			"--trace", filepath.Join(dir, "run.json"), "--pprof", dir})
		cmd.SetErr(io.Discard)
		require.NoError(t, cmd.Execute())
	})
	var res struct {
		Pred   float64           `json:"predicted_step_s"`
		Meas   float64           `json:"measured_step_s"`
		RelErr float64           `json:"rel_error"`
		Tasks  []json.RawMessage `json:"tasks"`
		// Where the step goes, predicted and measured.
		Breakdown map[string]trace.Breakdown    `json:"breakdown"`
		Path      map[string]trace.CriticalPath `json:"critical_path"`
		// What fills memory, predicted and measured (--memory, on with
		// --breakdown and --compare).
		Memory map[string]plans.LiveMemory `json:"memory"`
	}
	require.NoError(t, json.Unmarshal(out, &res))
	require.Greater(t, res.Pred, 0.0)
	require.Greater(t, res.Meas, 0.0)
	require.InDelta(t, (res.Pred-res.Meas)/res.Meas, res.RelErr, 1e-9)
	require.Len(t, res.Tasks, len(p.Tasks))
	for _, side := range []string{"predicted", "measured"} {
		b, c := res.Breakdown[side], res.Path[side]
		require.Len(t, b.Devices, 2, side)
		for _, d := range b.Devices {
			require.Equal(t, d.Step, d.Compute+d.ExposedComm+d.Idle, "%s %s", side, d.Device)
			require.Positive(t, d.Comm, "%s %s: the all-reduce", side, d.Device)
		}
		require.Equal(t, c.Span, c.Compute+c.Comm+c.Wait, side)
		require.Equal(t, []int{1, 4}, []int{c.First, c.Last}, side)
		m := res.Memory[side]
		require.Len(t, m.Devices, 2, side)
		for i, d := range m.Devices {
			require.Equal(t, p.Memory[i].Peak, d.Arena, "%s %s", side, d.Device)
			require.Positive(t, d.Peak, "%s %s", side, d.Device)
			require.LessOrEqual(t, d.Peak, d.Arena, "%s %s: live at once within the arena", side, d.Device)
			require.Positive(t, d.ByCategory[plans.Weights], "%s %s", side, d.Device)
		}
	}
	for _, name := range []string{"run.json", "run.sim.json", "measured.pb.gz", "predicted.pb.gz"} {
		require.FileExists(t, filepath.Join(dir, name))
	}
	for _, name := range []string{"run.json", "run.sim.json"} { // with live memory tracks
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		require.Contains(t, string(b), `"name":"live memory (MiB)","ph":"C"`, name)
	}
}

func TestExecBadInput(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"version": 1`), 0o644))
	// A plan of two A100s, which --compare --cluster checks before running
	// it (here, without CUDA, it could not run).
	c, err := topology.Resolve("dgx-a100")
	require.NoError(t, err)
	st, err := plans.ParseStrategy("dp=2", 8)
	require.NoError(t, err)
	devs, err := plans.DevicesFromCluster(c, 2, true)
	require.NoError(t, err)
	p, err := plans.Compile(plans.Config{Model: "mlp", Batch: 8, Strategy: st, Optimizer: graph.SGD{LR: 0.01}, Cluster: c.Name, Devices: devs})
	require.NoError(t, err)
	cal := cost.NewCalibration()
	cal.Devices["cpu/2"] = &cost.DeviceCalibration{Ops: map[string]*cost.OpFit{}}
	cpuCalib := filepath.Join(t.TempDir(), "calib.json")
	require.NoError(t, cal.WriteFile(cpuCalib))
	gpus := savePlan(t, p)
	cpus := writeCPUPlan(t, "mlp", "single", 8, 1)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{filepath.Join(t.TempDir(), "none.json")}, "no such file"},
		{[]string{bad}, "truncated"},
		{[]string{bad, "--iters", "0"}, "--iters"},
		{[]string{bad, "--warmup", "30"}, "--warmup"},
		{[]string{bad, "--top", "-1"}, "--top must be ≥ 0 (0: all), got -1"},
		// Output folders are checked before the plan is read and run.
		{[]string{bad, "--pprof", filepath.Join(bad, "prof")}, "--pprof " + filepath.Join(bad, "prof") + ": " + bad + " is not a directory"},
		{[]string{bad, "--pprof", bad}, "--pprof " + bad + ": is not a directory"},
		{[]string{bad, "--calib", "calib.json"}, "--calib calib.json prices the simulator's prediction, which only --compare makes"},
		{[]string{bad, "--cluster", "dgx-a100"}, "--cluster dgx-a100 prices the simulator's prediction, which only --compare makes"},
		{[]string{gpus, "--compare", "--cluster", "p3.8xlarge"}, "--cluster p3.8xlarge: sim: cluster p3.8xlarge has no device dgx/gpu0"},
		{[]string{gpus, "--compare", "--cluster", "atlantis"}, `--cluster: topology: unknown cluster "atlantis"`},
		{[]string{cpus, "--eager"}, "--eager and --gemm are for plans with GPU devices; " + cpus + " has none"},
		{[]string{cpus, "--gemm", "fused"}, "--eager and --gemm are for plans with GPU devices"},
		{[]string{gpus, "--compare", "--calib", cpuCalib}, "--calib " + cpuCalib + ": sim: the calibration holds none of the plan's devices (A100-SXM4-40GB; it holds cpu/2)"},
	} {
		cmd := newExecCmd()
		cmd.SetArgs(tt.args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		require.ErrorContains(t, cmd.Execute(), tt.want, "%v", tt.args)
	}
}

// captureStdout returns what f prints on os.Stdout.
func captureStdout(t *testing.T, f func()) []byte {
	t.Helper()
	return capture(t, &os.Stdout, f)
}

// captureStderr returns what f prints on os.Stderr.
func captureStderr(t *testing.T, f func()) []byte {
	t.Helper()
	return capture(t, &os.Stderr, f)
}

// capture returns what f writes to *file, which it stands in for.
func capture(t *testing.T, file **os.File, f func()) []byte {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	old := *file
	*file = w
	done := make(chan []byte)
	go func() {
		var b bytes.Buffer
		_, _ = io.Copy(&b, r)
		done <- b.Bytes()
	}()
	f()
	*file = old
	require.NoError(t, w.Close())
	return <-done
}

// exec --compare times the calibration's reference kernels again around
// its runs and says how far the machine's speed is from the calibrated
// one: here a probe a thousand times faster than any CPU, so the
// prediction is flagged as low.
func TestExecSpeedCheck(t *testing.T) {
	plan := writePlan(t, []plans.Device{{Name: "cpu0", Type: "cpu", Workers: 1}})
	cal := cost.NewCalibration()
	cal.Devices["cpu/1"] = &cost.DeviceCalibration{Probe: &cost.Probe{GEMM: time.Microsecond, Stream: time.Microsecond}, Ops: map[string]*cost.OpFit{}}
	calib := filepath.Join(t.TempDir(), "calib.json")
	require.NoError(t, cal.WriteFile(calib))
	exec := func(args ...string) []byte {
		return captureStdout(t, func() {
			cmd := newExecCmd()
			cmd.SetArgs(append([]string{plan, "--compare", "--calib", calib, "--iters", "4", "--warmup", "1", "--runs", "1", "--breakdown=false"}, args...))
			cmd.SetErr(io.Discard)
			require.NoError(t, cmd.Execute())
		})
	}
	var res struct {
		Speed []struct {
			Device          string
			Calibrated, Now cost.Probe
			Change          float64
		} `json:"speed"`
	}
	require.NoError(t, json.Unmarshal(exec("--json"), &res))
	require.Len(t, res.Speed, 1)
	s := res.Speed[0]
	require.Equal(t, "cpu/1", s.Device)
	require.Equal(t, time.Microsecond, s.Calibrated.GEMM)
	require.Greater(t, s.Now.GEMM, 10*time.Microsecond, "a 256³ GEMM on one core")
	require.Greater(t, s.Now.Stream, 10*time.Microsecond, "axpy over 8 MiB")
	require.InDelta(t, (float64(s.Now.GEMM)+float64(s.Now.Stream))/2e3-1, s.Change, 1e-9)
	text := string(exec())
	require.Contains(t, text, "speed: cpu/1 ran the reference kernels")
	require.Contains(t, text, "predicted times, priced at the calibration's speed, may run low")
}

// A plan whose CPU devices take more cores than the machine has runs,
// saying that its devices share the cores; its GPUs take none.
func TestOversubscribedNote(t *testing.T) {
	p := &plans.Plan{Devices: []plans.Device{
		{Name: "host/cpu0:2", Type: "cpu", Workers: 2},
		{Name: "host/cpu2:4", Type: "cpu", Workers: 2},
		{Name: "host/gpu0", Type: "A100-SXM4-40GB"},
	}}
	require.Empty(t, oversubscribedNote(p, 4))
	require.Equal(t, "flowrun: note: the plan's 2 CPU devices take 4 cores, this machine has 3: they share them, and each runs slower than the plan (and --compare's prediction) takes it to", oversubscribedNote(p, 3))
}

// Interrupted before any run finished, exec says so, not "context
// canceled".
func TestExecInterruptedAtOnce(t *testing.T) {
	plan := writeCPUPlan(t, "mlp", "single", 8, 1)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	cmd := newExecCmd()
	cmd.SetArgs([]string{plan, "--iters", "3", "--warmup", "1", "--runs", "3"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	require.EqualError(t, cmd.ExecuteContext(ctx), "interrupted before the first of 3 runs finished: nothing measured")
}

// A calibration that measured a kind at other shapes only prices the
// plan's by the catalog, and the note says so, with the micro-batch to
// calibrate at.
func TestLoadModelNotesOtherShapes(t *testing.T) {
	st, err := plans.ParseStrategy("dp=2,mb=3:1", 64)
	require.NoError(t, err)
	devs := []plans.Device{{Name: "cpu0", Type: "cpu", Workers: 1}, {Name: "cpu1", Type: "cpu", Workers: 1}}
	p, err := plans.Compile(plans.Config{Model: "mnist-cnn", Batch: 64, Strategy: st, Optimizer: graph.SGD{LR: 0.01}, Devices: devs})
	require.NoError(t, err)
	cpu, err := topology.Spec("cpu", 1)
	require.NoError(t, err)
	measured, err := cost.ExactOnly(cpu, []cost.Sample{{Work: cost.Work{Kind: "conv2d_grad_data", FLOPs: 1e6, Bytes: 1e4, DType: "f32", Shape: []int{1, 2, 3}}, Time: time.Millisecond}})
	require.NoError(t, err)
	cal := cost.NewCalibration()
	cal.Devices["cpu/1"] = &cost.DeviceCalibration{Ops: map[string]*cost.OpFit{"conv2d_grad_data": &measured}}
	path := filepath.Join(t.TempDir(), "calib.json")
	require.NoError(t, cal.WriteFile(path))

	r, w, err := os.Pipe()
	require.NoError(t, err)
	stderr := os.Stderr
	os.Stderr = w
	_, _, err = loadModel(path, "plan.json", p)
	os.Stderr = stderr
	require.NoError(t, w.Close())
	require.NoError(t, err)
	note, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Contains(t, string(note), "conv2d_grad_data (other shapes only)")
	require.Contains(t, string(note), "calibrate the CPU with the plan's model among others ('flowrun calibrate --models ")
	require.Contains(t, string(note), "for the kinds measured at other shapes only at the plan's micro-batch (16) among others (--batches)")
	require.NotContains(t, string(note), "--device cuda")
}

// A GPU's kernels are calibrated on the plan's own tasks, a CPU's with
// models: the advice says which.
func TestCalibrateAdvice(t *testing.T) {
	p := &plans.Plan{Model: "mnist-cnn", MicroBatch: 32}
	got := calibrateAdvice([]string{"H200: conv2d (other shapes only), relu_grad"}, "p.json", p)
	require.Equal(t, "calibrate the GPU on the plan's own tasks ('flowrun calibrate --device cuda --plans p.json')", got)
	got = calibrateAdvice([]string{"H200: conv2d", "cpu/2: relu_grad"}, "p.json", p)
	require.Contains(t, got, "calibrate the CPU with the plan's model among others ('flowrun calibrate --models ")
	require.Contains(t, got, "; calibrate the GPU on the plan's own tasks")
	require.NotContains(t, got, "--batches", "no kind measured at other shapes only")
}
