package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/topology"
)

// devices lists the CPU, and the GPUs or why there are none.
func TestDevicesJSON(t *testing.T) {
	out := captureStdout(t, func() { require.NoError(t, runDevices(true)) })
	var got struct {
		Cores int `json:"cpu_cores"`
		GPUs  []struct {
			Name    string `json:"name"`
			Catalog string `json:"catalog_type"`
		} `json:"gpus"`
		Why string `json:"gpus_unavailable"`
	}
	require.NoError(t, json.Unmarshal(out, &got), "%s", out)
	require.Positive(t, got.Cores)
	if err := cu.Init(); err != nil {
		require.Empty(t, got.GPUs)
		require.Contains(t, got.Why, "not available")
		return
	}
	require.NotEmpty(t, got.GPUs)
	require.NotEmpty(t, got.GPUs[0].Name)
}

// writePlan compiles mlp for devs and writes it to a file.
func writePlan(t *testing.T, devs []plans.Device) string {
	t.Helper()
	st, err := plans.ParseStrategy("single", 8)
	require.NoError(t, err)
	p, err := plans.Compile(plans.Config{Model: "mlp", Batch: 8, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: devs})
	require.NoError(t, err)
	return savePlan(t, p)
}

// savePlan writes p to a file and returns its path.
func savePlan(t *testing.T, p *plans.Plan) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "plan.json")
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, plans.Encode(f, p))
	require.NoError(t, f.Close())
	return path
}

// The GPU commands refuse what they cannot do, in one line.
func TestGPUCommandsBadInput(t *testing.T) {
	c, err := topology.Preset("h200-host")
	require.NoError(t, err)
	devs, err := plans.DevicesFromCluster(c, 1, false)
	require.NoError(t, err)
	gpuPlan := writePlan(t, devs)
	cpuPlan := writePlan(t, []plans.Device{{Name: "cpu", Type: "cpu", Workers: 1}})
	for _, tt := range []struct {
		cmd  func() *cobra.Command
		args []string
		want string
	}{
		{newExecCmd, []string{gpuPlan, "--device", "cpu"}, "--device cpu: the plan places work on 1 GPU(s)"},
		{newExecCmd, []string{cpuPlan, "--device", "cuda"}, "--device cuda: the plan has no GPU device"},
		{newExecCmd, []string{cpuPlan, "--device", "tpu"}, `--device "tpu": want cpu or cuda`},
		{newCalibrateCmd, []string{"--device", "cuda"}, "--device cuda needs --plans"},
		{newCalibrateCmd, []string{"--device", "cuda:1", "--plans", gpuPlan}, "other ordinals are not supported yet"},
		{newCalibrateCmd, []string{"--device", "cuda", "--plans", filepath.Join(t.TempDir(), "none-*.json")}, "no such file"},
		{newCalibrateCmd, []string{"--device", "cpu", "--plans", gpuPlan}, "--plans is for --device cuda"},
		{newCalibrateCmd, []string{"--device", "rocm"}, `--device "rocm": want cpu or cuda[:N]`},
		{newTrainCmd, []string{"--device", "tpu"}, `--device "tpu": want cpu or cuda`},
		// The cluster decides where a plan runs: one that contradicts --device
		// is refused, not trained on the CPU as if on the GPU.
		{newTrainCmd, []string{"--model", "mlp", "--max-steps", "1", "--device", "cuda", "--cluster", "local"}, "--cluster local: --device cuda: the plan has no GPU device"},
		{newTrainCmd, []string{"--model", "mlp", "--max-steps", "1", "--strategy", "single", "--cluster", "dgx-a100"}, "--cluster dgx-a100: --device cpu: the plan places work on 1 GPU(s)"},
	} {
		cmd := tt.cmd()
		cmd.SetArgs(tt.args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		require.ErrorContains(t, cmd.Execute(), tt.want, "%v", tt.args)
	}
	if cu.Init() != nil {
		// Without a GPU, running a GPU plan says why.
		cmd := newExecCmd()
		cmd.SetArgs([]string{gpuPlan})
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		require.ErrorContains(t, cmd.Execute(), "not available")
	}
}
