package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/trace"
)

// pipelinePlan writes the plan of a two-stage pipeline of the mlp on
// local and returns its path.
func pipelinePlan(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "plan.json")
	_, err := run(t, "plan", "--model", "mlp", "--cluster", "local", "--strategy", "pp=2,mb=2", "--batch", "16", "-o", path)
	require.NoError(t, err)
	return path
}

// plan writes a file that simulate reads; the simulation is deterministic
// and reports what scripts need.
func TestPlanThenSimulate(t *testing.T) {
	path := pipelinePlan(t)
	out1, err := run(t, "simulate", "--plan", path, "--json")
	require.NoError(t, err)
	out2, err := run(t, "simulate", "--plan", path, "--json")
	require.NoError(t, err)
	require.Equal(t, out1, out2, "deterministic")
	var res struct {
		StepTime float64          `json:"step_time_s"`
		Samples  float64          `json:"samples_per_s"`
		Peak     map[string]int64 `json:"peak_mem_bytes"`
	}
	require.NoError(t, json.Unmarshal([]byte(out1), &res))
	require.Greater(t, res.StepTime, 0.0)
	require.InDelta(t, 16/res.StepTime, res.Samples, 1e-6*res.Samples)
	require.Len(t, res.Peak, 2)
}

// simulate prices communication over the plan's cluster: a plan compiled
// for a cluster file, whose name is no preset, is priced without routes,
// which simulate says; a preset of that name whose devices are not the
// plan's is refused.
func TestSimulatePlanCluster(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plan.json")
	_, err := run(t, "plan", "--model", "mlp", "--cluster", "dgx-a100", "--strategy", "dp=2", "--batch", "16", "-o", path)
	require.NoError(t, err)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(data), `"cluster": "dgx-a100"`)
	for _, tc := range []struct{ cluster, note, err string }{
		{"dgx-a100", "", ""},
		{"my-lab", "flowsim: note: the plan's cluster my-lab is not a preset (topology: unknown cluster", ""},
		{"dlperf-v100x32", "", "the plan's cluster: sim: cluster dlperf-v100x32 has no device dgx/gpu0, nor any other of the plan's 2"},
	} {
		renamed := filepath.Join(t.TempDir(), "plan.json")
		require.NoError(t, os.WriteFile(renamed, bytes.Replace(data, []byte(`"cluster": "dgx-a100"`), []byte(`"cluster": "`+tc.cluster+`"`), 1), 0o644))
		var out string
		note := stderrOf(t, func() { out, err = run(t, "simulate", "--plan", renamed, "--breakdown=false") })
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err)
			continue
		}
		require.NoError(t, err)
		require.Contains(t, out, "step")
		if tc.note == "" {
			require.Empty(t, note)
		} else {
			require.Contains(t, note, tc.note)
			require.Contains(t, note, "give --cluster FILE to price them over its routes")
		}
	}
}

// A plan whose CPU devices take more cores than its cluster's host has
// (edited, or compiled with --oversubscribe) is simulated with a note.
func TestSimulateNotesOversubscribedCores(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plan.json")
	_, err := run(t, "plan", "--model", "mlp", "--cluster", "local", "--strategy", "dp=2", "--batch", "8", "--oversubscribe", "-o", path)
	require.NoError(t, err)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	edited := filepath.Join(t.TempDir(), "plan.json")
	require.NoError(t, os.WriteFile(edited, regexp.MustCompile(`"workers": \d+`).ReplaceAll(data, []byte(`"workers": 5000`)), 0o644))
	note := stderrOf(t, func() {
		_, err = run(t, "simulate", edited, "--breakdown=false")
		require.NoError(t, err)
	})
	require.Regexp(t, `flowsim: note: the plan's CPU devices on local take 10000 cores, cluster local's have \d+: each is priced with its cores`, note)
}

// simulate prints where the step goes after what it printed before, which
// --breakdown=false leaves alone; --json carries it.
func TestSimulateBreakdown(t *testing.T) {
	path := pipelinePlan(t)
	short, err := run(t, "simulate", "--plan", path, "--breakdown=false")
	require.NoError(t, err)
	require.Len(t, strings.Split(strings.TrimSpace(short), "\n"), 3, "step and two devices' memory:\n%s", short)
	long, err := run(t, "simulate", "--plan", path)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(long, short), "the breakdown comes after:\n%s", long)
	for _, want := range []string{"where a step goes (per step after 2 warm-up iterations)", "exposed comm", "local/cpu:1",
		"critical path of iterations 2-9", "on streams: local/cpu:"} {
		require.Contains(t, long, want)
	}

	out, err := run(t, "simulate", "--plan", path, "--json")
	require.NoError(t, err)
	var res struct {
		Breakdown trace.Breakdown    `json:"breakdown"`
		Path      trace.CriticalPath `json:"critical_path"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Len(t, res.Breakdown.Devices, 2)
	for _, d := range res.Breakdown.Devices {
		require.Equal(t, d.Step, d.Compute+d.ExposedComm+d.Idle, d.Device)
	}
	require.Equal(t, res.Path.Span, res.Path.Compute+res.Path.Comm+res.Path.Wait)
	require.Equal(t, res.Path.Span, 8*res.Breakdown.Step+res.Path.Span%8, "the path spans the breakdown's 8 steps")
}

// simulate prints what fills memory last, by default as it prints the
// breakdown: a row per device with its arena and live peak and the
// categories then, and the largest registers of the fullest; --json
// carries it, with the arena at least the live peak.
func TestSimulateMemory(t *testing.T) {
	path := pipelinePlan(t)
	short, err := run(t, "simulate", "--plan", path, "--breakdown=false")
	require.NoError(t, err)
	alone, err := run(t, "simulate", "--plan", path, "--breakdown=false", "--memory")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(alone, short+"\nwhat fills memory"), "memory alone:\n%s", alone)
	without, err := run(t, "simulate", "--plan", path, "--memory=false", "--top", "2")
	require.NoError(t, err)
	out, err := run(t, "simulate", "--plan", path, "--top", "2")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out, without), "memory comes last:\n%s", out)
	mem := strings.TrimPrefix(out, without)
	for _, want := range []string{"what fills memory", "arena", "live peak", "weights", "optimizer", "gradients",
		"activations", "temporaries", "local/cpu:0", "local/cpu:1", "largest registers live at local/cpu:"} {
		require.Contains(t, mem, want)
	}
	lines := strings.Split(strings.TrimSpace(mem), "\n")
	require.Len(t, lines, 1+3+1+2, "title, header, two devices, the fullest's two largest registers:\n%s", mem)

	js, err := run(t, "simulate", "--plan", path, "--json")
	require.NoError(t, err)
	var res struct {
		Memory struct {
			Devices []struct {
				Device     string           `json:"device"`
				Arena      int64            `json:"arena_bytes"`
				Peak       int64            `json:"live_peak_bytes"`
				ByCategory map[string]int64 `json:"by_category"`
				Largest    []struct {
					Name     string `json:"name"`
					Category string `json:"category"`
					Bytes    int64  `json:"bytes"`
				} `json:"largest"`
			} `json:"devices"`
		} `json:"memory"`
		Peak map[string]int64 `json:"peak_mem_bytes"`
	}
	require.NoError(t, json.Unmarshal([]byte(js), &res))
	require.Len(t, res.Memory.Devices, 2)
	for _, d := range res.Memory.Devices {
		require.Equal(t, res.Peak[d.Device], d.Arena, d.Device)
		require.LessOrEqual(t, d.Peak, d.Arena, d.Device)
		var sum int64
		for _, b := range d.ByCategory {
			sum += b
		}
		require.Equal(t, d.Peak, sum, d.Device)
		require.Len(t, d.ByCategory, 5)
		require.Len(t, d.Largest, 3, "--top's default")
	}
}

// Devices that run and hold alike, consecutive in the plan (here four
// tensor-parallel ranks of each of two replicas, all alike), are one row
// in each of plan's and simulate's tables; the JSON keeps every device.
func TestAlikeDevicesOneRow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plan.json")
	out, err := run(t, "plan", "--model", "gpt2s-blocks:layers=2,hidden=64,heads=4,seq=16", "--cluster", "dgx-a100",
		"--strategy", "dp=2,tp=4", "--batch", "4", "-o", path)
	require.NoError(t, err)
	require.Contains(t, out, "  dgx/gpu0 … dgx/gpu7 (8) A100-SXM4-40GB 1 worker(s)  peak memory")
	out, err = run(t, "simulate", "--plan", path, "--top", "1")
	require.NoError(t, err)
	require.Contains(t, out, "  dgx/gpu0 … dgx/gpu7 (8): peak memory")
	require.NotContains(t, out, "dgx/gpu1 ")
	for _, table := range []string{"where a step goes", "what fills memory"} {
		i := strings.Index(out, table)
		require.GreaterOrEqual(t, i, 0, table)
		rows := strings.Split(out[i:], "\n")[2:3]
		require.Contains(t, rows[0], "dgx/gpu0 … dgx/gpu7 (8)  ", "%s's one row:\n%s", table, out)
	}
	js, err := run(t, "simulate", "--plan", path, "--json")
	require.NoError(t, err)
	var res struct {
		Breakdown trace.Breakdown `json:"breakdown"`
	}
	require.NoError(t, json.Unmarshal([]byte(js), &res))
	require.Len(t, res.Breakdown.Devices, 8)
}

func TestPlanBadInput(t *testing.T) {
	outDir := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "--model", "gpt-9"}, `unknown model "gpt-9"`},
		{[]string{"plan", "--strategy", "tp=2"}, "mnist-cnn has no tensor-parallel layout"},
		{[]string{"plan", "--strategy", " "}, "--strategy is empty: give single, a strategy such as dp=2,pp=2, or a strategy file"},
		{[]string{"plan", "--strategy", "dp=2,zero=4"}, "zero=4: want 0, 1, 2 or 3"},
		{[]string{"plan", "--strategy", "dp=3"}, "infeasible"},
		{[]string{"plan", "--cluster", "atlantis"}, "unknown cluster"},
		{[]string{"plan", "--strategy", "pp=2,mb=4,sched=gpipe,slots=1"}, "deadlock"},
		{[]string{"plan", "--optimizer", "lion"}, "unknown optimizer"},
		{[]string{"plan", "--weight-decay", "-0.1"}, "graph: weight decay -0.1: want a number ≥ 0, finite in float32"},
		{[]string{"plan", "--lr-schedule", "cosine"}, "--lr-schedule: graph: learning-rate schedule \"cosine\": say at which step the decay ends (steps=N)"},
		{[]string{"plan", "--model", "mlp", "--lr", "NaN"}, "learning rate (lr) NaN"},
		{[]string{"plan", "--model", "mlp", "--momentum", "-1"}, "momentum -1"},
		{[]string{"plan", "--dtype", "f64"}, `--dtype: zoo: models are built in f32 or bf16, not "f64"`},
		{[]string{"plan", "--model", "gpt2s-blocks:depth=2"}, `unknown size option "depth"`},
		{[]string{"plan", "--model", "nowhere/config.json"}, "nowhere/config.json"},
		{[]string{"sweep", "--model", "nowhere/config.json"}, "nowhere/config.json"},
		{[]string{"sweep", "--model", "mlp", "--buckets", "1MiB,lots"}, `--buckets "lots": want gradient bucket sizes, as 1MiB,25MiB`},
		{[]string{"sweep", "--model", "mlp", "--buckets", "0"}, `--buckets "0": want gradient bucket sizes`},
		{[]string{"sweep", "--model", "mlp", "--buckets", "25MiB,26214400B"}, `--buckets "25MiB,26214400B": 25.00 MiB is given twice`},
		{[]string{"simulate"}, "give a plan file (from 'flowsim plan -o'): flowsim simulate PLAN"},
		{[]string{"simulate", "a.json", "--plan", "b.json"}, "give the plan once: a.json or --plan b.json"},
		{[]string{"simulate", filepath.Join(t.TempDir(), "none.json")}, "no such file"}, // the plan as an argument, as flowrun exec takes it
		{[]string{"simulate", "--plan", filepath.Join(t.TempDir(), "none.json")}, "no such file"},
		{[]string{"simulate", "--plan", filepath.Join(t.TempDir(), "none.json"), "--top", "-1"}, "--top must be ≥ 0 (0: all), got -1"},
		// Outputs that cannot be written fail before the work, not after.
		{[]string{"plan", "--model", "mlp", "-o", outDir}, "-o " + outDir + ": is a directory"},
		{[]string{"sweep", "--model", "mlp", "-o", filepath.Join(t.TempDir(), "none", "best.json")}, "none/best.json: stat "},
		{[]string{"sweep", "merge", filepath.Join(t.TempDir(), "none.json"), "-o", filepath.Join(t.TempDir(), "none", "best.json")}, "none/best.json: stat "},
		{[]string{"simulate", "--plan", filepath.Join(t.TempDir(), "none.json"), "--trace", filepath.Join(t.TempDir(), "none", "t.json")}, "--trace "},
		{[]string{"sweep", "merge", filepath.Join(t.TempDir(), "none.json"), "--top", "-1"}, "--top must be ≥ 0 (0: all), got -1"},
	} {
		_, err := run(t, tt.args...)
		require.ErrorContains(t, err, tt.want, "%v", tt.args)
	}
}

// More CPU devices than the machine has cores: the error says how to
// have them anyway, and --oversubscribe does.
func TestPlanOversubscribeHint(t *testing.T) {
	n := goruntime.NumCPU() + 1 // the local preset has the machine's cores
	args := []string{"plan", "--model", "mlp", "--strategy", fmt.Sprintf("dp=%d", n), "--batch", fmt.Sprint(2 * n), "-o", filepath.Join(t.TempDir(), "p.json")}
	_, err := run(t, args...)
	require.ErrorIs(t, err, plans.ErrInfeasible)
	require.ErrorContains(t, err, "CPU cores in all (--oversubscribe runs more devices than cores)")
	_, err = run(t, append(args, "--oversubscribe")...)
	require.NoError(t, err)
}

// A plan's updates carry the learning-rate schedule and weight decay asked
// for.
func TestPlanSchedule(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plan.json")
	_, err := run(t, "plan", "--model", "mlp", "--strategy", "dp=2", "--batch", "16", "--optimizer", "adam", "--lr", "0.001",
		"--lr-schedule", "cosine:warmup=10,steps=1000,min=0.1", "--weight-decay", "0.01", "-o", path)
	require.NoError(t, err)
	p, err := plans.ReadFile(path)
	require.NoError(t, err)
	updates := 0
	for _, task := range p.Tasks {
		if task.Op == nil || task.Op.Type != "adam_update" {
			continue
		}
		op, err := graph.DecodeOp(*task.Op)
		require.NoError(t, err)
		require.Equal(t, graph.Schedule{Decay: "cosine", Warmup: 10, Steps: 1000, MinRatio: 0.1}, graph.ScheduleOf(op), task.Name)
		require.Equal(t, float32(0.01), op.(graph.AdamUpdate).WeightDecay, task.Name)
		updates++
	}
	require.Equal(t, 2*6, updates, "the mlp's six parameters on each replica")
}

// simulate --cluster names a cluster whose routes price the plan's
// communication: one without the plan's devices is an error, not a
// silent fallback to pricing it as copies.
func TestSimulateClusterWithoutThePlansDevices(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plan.json")
	_, err := run(t, "plan", "--model", "mlp", "--cluster", "dgx-a100", "--strategy", "dp=2", "--batch", "8", "-o", path)
	require.NoError(t, err)
	_, err = run(t, "simulate", "--plan", path, "--cluster", "dgx-a100")
	require.NoError(t, err)
	_, err = run(t, "simulate", "--plan", path, "--cluster", "p3.8xlarge")
	require.ErrorContains(t, err, "--cluster p3.8xlarge: sim: cluster p3.8xlarge has no device dgx/gpu0")
}

// simulate --calib must calibrate some of the plan's devices: one of other
// devices would change nothing, silently.
func TestSimulateCalibrationOfOtherDevices(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "plan.json")
	_, err := run(t, "plan", "--model", "mlp", "--cluster", "dgx-a100", "--strategy", "dp=2", "--batch", "8", "-o", path)
	require.NoError(t, err)
	calib := writeEmptyCalib(t, dir, "cpu/2")
	_, err = run(t, "simulate", "--plan", path, "--calib", calib)
	require.ErrorContains(t, err, "--calib "+calib+": sim: the calibration holds none of the plan's devices (A100-SXM4-40GB; it holds cpu/2)")
	// The searches too: sweep, and plan's mb=auto.
	_, err = run(t, "sweep", "--model", "mlp", "--cluster", "dgx-a100", "--devices", "2", "--batch", "8", "--calib", calib)
	require.ErrorContains(t, err, "--calib "+calib+" holds none of cluster dgx-a100's device types (A100-SXM4-40GB; it holds cpu/2)")
	_, err = run(t, "plan", "--model", "mlp", "--cluster", "dgx-a100", "--strategy", "dp=2,mbs=2,mb=auto", "--batch", "8", "--calib", calib)
	require.ErrorContains(t, err, "--calib "+calib+" holds none of cluster dgx-a100's device types")
	// A calibration of the cluster's device type but not of the devices a
	// search compiles for (a CPU of 1 core, not 2) prices nothing either.
	cpu1 := writeEmptyCalib(t, dir, "cpu/1")
	_, err = run(t, "sweep", "--model", "mlp", "--cluster", "local", "--devices", "1", "--batch", "8", "--calib", cpu1)
	require.ErrorContains(t, err, "--calib "+cpu1+": sim: the calibration holds none of the sweep's devices (cpu/2; it holds cpu/1): it would price nothing")
	_, err = run(t, "plan", "--model", "mlp", "--cluster", "local", "--strategy", "dp=2,mbs=2,mb=auto", "--batch", "8", "--calib", calib)
	require.ErrorContains(t, err, "--calib "+calib+": sim: the calibration holds none of the search's devices (cpu/1; it holds cpu/2)")
	// A plan that searches nothing has nothing for --calib to price.
	_, err = run(t, "plan", "--model", "mlp", "--cluster", "dgx-a100", "--strategy", "dp=2", "--batch", "8", "--calib", calib)
	require.ErrorContains(t, err, "--calib "+calib+" prices the candidates of mb=auto or layers=auto, which strategy dp=2 does not search")
}

// writeEmptyCalib writes into dir a calibration of the device key
// ("cpu/2") that fits no kernel, and returns its path.
func writeEmptyCalib(t *testing.T, dir, key string) string {
	t.Helper()
	cal := cost.NewCalibration()
	cal.Devices[key] = &cost.DeviceCalibration{Ops: map[string]*cost.OpFit{}}
	path := filepath.Join(dir, strings.ReplaceAll(key, "/", "-")+".json")
	require.NoError(t, cal.WriteFile(path))
	return path
}

// The full-size workloads compile; bf16 halves the memory planned.
func TestPlanWorkloads(t *testing.T) {
	peak := func(model, batch, dtype string) float64 {
		out, err := run(t, "plan", "--json", "--model", model, "--batch", batch, "--dtype", dtype)
		require.NoError(t, err)
		var res struct {
			DType string           `json:"dtype"`
			Peak  map[string]int64 `json:"peak_mem_bytes"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &res))
		require.Equal(t, dtype, res.DType)
		require.Len(t, res.Peak, 1)
		for _, b := range res.Peak {
			return float64(b)
		}
		return 0
	}
	require.InDelta(t, 0.5, peak("mlp3x4096", "4096", "bf16")/peak("mlp3x4096", "4096", "f32"), 0.01)
	require.Greater(t, peak("gpt2s-blocks", "8", "bf16"), 4e9)
}

// A Hugging Face config.json is a model: the plan names the zoo model it
// maps to, with the size options given after the file's name.
func TestPlanFromConfig(t *testing.T) {
	out, err := run(t, "plan", "--json", "--model", "../../graph/zoo/testdata/llama-3-8b.json:layers=2,seq=64", "--batch", "2",
		"--strategy", "tp=2", "--cluster", "dgx-a100", "--dtype", "bf16")
	require.NoError(t, err)
	var res struct {
		Model string `json:"model"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Equal(t, "llama:hidden=4096,heads=32,ffn=14336,vocab=128256,kv_heads=8,theta=500000,eps=1e-5,layers=2,seq=64", res.Model)
}

// --strategy takes a YAML file: the plan runs where the file says, and
// records the strategy as a string; a bad file is named with its line.
func TestPlanStrategyFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "two-types.yaml")
	require.NoError(t, os.WriteFile(good, []byte("dp: 2\npp: 2\nmb: [3, 1]\nstages:\n  - {layers: 3, devices: [a100-1/gpu0, a100-0/gpu0]}\n  - {layers: 1, devices: [v100-0/gpu0, v100-1/gpu0]}\n"), 0o644))
	out, err := run(t, "plan", "--model", "mnist-cnn", "--cluster", "mixed-a100-v100", "--strategy", good, "--json")
	require.NoError(t, err)
	var res struct {
		Strategy string           `json:"strategy"`
		Peak     map[string]int64 `json:"peak_mem_bytes"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Equal(t, "dp=2,pp=2,layers=3:1,devices=a100-1/gpu0+v100-0/gpu0+a100-0/gpu0+v100-1/gpu0,mb=3:1,sched=1f1b", res.Strategy)
	require.ElementsMatch(t, []string{"a100-1/gpu0", "v100-0/gpu0", "a100-0/gpu0", "v100-1/gpu0"}, slices.Collect(maps.Keys(res.Peak)))

	bad := filepath.Join(dir, "bad.yml")
	require.NoError(t, os.WriteFile(bad, []byte("dp: 2\nmb: [3, x]\n"), 0o644))
	_, err = run(t, "plan", "--strategy", bad)
	require.ErrorContains(t, err, "bad.yml:2: mb[1]: want an integer")
}

// A plan too large to compile names the flags that make it smaller, only
// those that apply and are not given.
func TestSharedHint(t *testing.T) {
	big := fmt.Errorf("compile: %w", &plans.FiringsError{Firings: 52306088, Max: 10000000})
	for _, tt := range []struct {
		cfg        plans.Config
		want, lack []string
	}{
		{plans.Config{Strategy: plans.Strategy{DP: 16, TP: 8}}, []string{"--shared-tp (one rank for each tensor-parallel group: 8× fewer) and --shared-dp (one replica for all: 16× fewer)"}, nil},
		{plans.Config{Strategy: plans.Strategy{DP: 16, TP: 8}, SharedTP: true}, []string{"--shared-dp"}, []string{"--shared-tp"}},
		{plans.Config{Strategy: plans.Strategy{DP: 2, TP: 1, Shares: []int{7, 1}}}, nil, []string{"for the simulator"}},
		{plans.Config{Strategy: plans.Strategy{DP: 1, TP: 1}}, nil, []string{"for the simulator"}},
	} {
		err := sharedHint(big, tt.cfg)
		require.ErrorIs(t, err, plans.ErrInfeasible)
		require.ErrorContains(t, err, "52306088 firings per iteration")
		for _, w := range tt.want {
			require.ErrorContains(t, err, w)
		}
		for _, l := range tt.lack {
			require.NotContains(t, err.Error(), l)
		}
	}
	other := fmt.Errorf("%w: out of memory", plans.ErrInfeasible)
	require.Equal(t, other, sharedHint(other, plans.Config{Strategy: plans.Strategy{DP: 16, TP: 8}}))
}

// --trace writes the simulated trace with each device's live memory as a
// counter track, whether or not the memory table is printed.
func TestSimulateTraceHasMemory(t *testing.T) {
	path := pipelinePlan(t)
	for _, args := range [][]string{nil, {"--breakdown=false"}} {
		out := filepath.Join(t.TempDir(), "sim.json")
		_, err := run(t, append([]string{"simulate", "--plan", path, "--trace", out}, args...)...)
		require.NoError(t, err)
		b, err := os.ReadFile(out)
		require.NoError(t, err)
		require.Contains(t, string(b), `"name":"live memory (MiB)","ph":"C","ts":0.000,"pid":1`, args)
	}
}
