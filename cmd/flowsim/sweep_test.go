package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/sim"
	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
)

var sweepArgs = []string{"sweep", "--model", "mnist-cnn", "--cluster", "mixed-t4-cpu", "--batch", "32", "--max-mb", "4"}

// A sweep ranks every strategy, writes the best one's plan, and its shards
// merge into exactly what the whole sweep prints.
func TestSweepAndMerge(t *testing.T) {
	dir := t.TempDir()
	best := filepath.Join(dir, "best.json")
	whole, err := run(t, append(sweepArgs, "--json", "-o", best)...)
	require.NoError(t, err)
	var file sweepFile
	require.NoError(t, json.Unmarshal([]byte(whole), &file))
	require.True(t, file.Uneven, "a T4 and a CPU differ: mb=auto and layers=auto are tried")
	require.True(t, file.Place, "and pipelines are placed on them both ways")
	require.True(t, slices.ContainsFunc(file.Entries, func(e sweepEntry) bool { return strings.Contains(e.Asked, "place=cpu:T4") }))
	require.Equal(t, file.Strategies, len(file.Entries))
	for i, e := range file.Entries {
		require.Empty(t, e.Error, e.Asked)
		require.Positive(t, e.StepNs)
		if i > 0 {
			require.GreaterOrEqual(t, e.StepNs, file.Entries[i-1].StepNs)
		}
	}
	p, err := plans.ReadFile(best)
	require.NoError(t, err)
	require.Equal(t, file.Entries[0].Strategy, p.Strategy)

	text, err := run(t, sweepArgs...)
	require.NoError(t, err)
	require.Contains(t, text, "strategies simulated, ")
	require.Contains(t, text, "   1  "+file.Entries[0].Strategy)

	var shards []string
	for _, s := range []string{"0/3", "1/3", "2/3"} {
		out, err := run(t, append(sweepArgs, "--json", "--shard", s)...)
		require.NoError(t, err)
		path := filepath.Join(dir, "shard"+s[:1]+".json")
		require.NoError(t, os.WriteFile(path, []byte(out), 0o644))
		shards = append(shards, path)
	}
	merged, err := run(t, append([]string{"sweep", "merge", "--json"}, shards[2], shards[0], shards[1])...)
	require.NoError(t, err)
	require.JSONEq(t, whole, merged, "three shards merge into the whole sweep")

	_, err = run(t, "sweep", "merge", shards[0], shards[2])
	require.ErrorContains(t, err, "shard 1/3 is missing")
	_, err = run(t, "sweep", "merge", shards[0], shards[0])
	require.ErrorContains(t, err, "again")
	wholePath := filepath.Join(dir, "whole.json") // shard 0/1: another division, not shard 0 again
	require.NoError(t, os.WriteFile(wholePath, []byte(whole), 0o644))
	_, err = run(t, "sweep", "merge", shards[0], shards[1], shards[2], wholePath)
	require.ErrorContains(t, err, "whole.json (shard 0/1) is a shard of another sweep than "+shards[0]+" (shard 0/3)")
	other, err := run(t, "sweep", "--model", "mlp", "--cluster", "mixed-t4-cpu", "--batch", "32", "--max-mb", "4", "--json", "--shard", "1/3")
	require.NoError(t, err)
	otherPath := filepath.Join(dir, "other.json")
	require.NoError(t, os.WriteFile(otherPath, []byte(other), 0o644))
	_, err = run(t, "sweep", "merge", shards[0], otherPath, shards[2])
	require.ErrorContains(t, err, "another sweep")
	_, err = run(t, "sweep", "merge", best)
	require.ErrorContains(t, err, "not the --json output of flowsim sweep")
}

// --buckets adds each data-parallel strategy without ZeRO or with its
// stage 1 with each bucket size, and a sweep with other sizes is another
// sweep to merge.
func TestSweepBuckets(t *testing.T) {
	args := []string{"sweep", "--model", "mnist-cnn", "--devices", "2", "--batch", "16", "--max-mb", "2", "--json"}
	out, err := run(t, append(args, "--buckets", "64KiB, 25MiB")...)
	require.NoError(t, err)
	var file sweepFile
	require.NoError(t, json.Unmarshal([]byte(out), &file))
	require.Equal(t, "65536,26214400", file.Buckets)
	asked := map[string]bool{}
	for _, e := range file.Entries {
		require.Empty(t, e.Error, e.Asked)
		asked[e.Asked] = true
	}
	for _, want := range []string{"dp=2", "dp=2,bucket=64KiB", "dp=2,bucket=25MiB", "dp=2,mb=2,sched=1f1b,bucket=25MiB", "dp=2,zero=1,bucket=64KiB"} {
		require.True(t, asked[want], want)
	}
	for a := range asked {
		require.False(t, (strings.Contains(a, "zero=2") || strings.Contains(a, "zero=3")) && strings.Contains(a, "bucket"), a)
	}
	shards := writeShards(t, append(slices.Clone(args), "--buckets", "64KiB,25MiB"), append(slices.Clone(args), "--buckets", "1MiB"))
	_, err = run(t, "sweep", "merge", shards[0], shards[1])
	require.ErrorContains(t, err, "another sweep")
}

// A sweep of a model with a tensor-parallel layout tries tp = 2, 4 … up
// to the devices of one machine, or --max-tp; a model without one never.
func TestSweepTensorParallel(t *testing.T) {
	for _, tt := range []struct {
		model string
		args  []string
		tps   []int
	}{
		{"mlp", nil, []int{2, 4}},
		{"mlp", []string{"--max-tp", "2"}, []int{2}},
		{"mnist-cnn", nil, nil},
	} {
		out, err := run(t, append([]string{"sweep", "--model", tt.model, "--cluster", "local", "--devices", "4", "--oversubscribe",
			"--batch", "8", "--max-mb", "1", "--json"}, tt.args...)...)
		require.NoError(t, err)
		var file sweepFile
		require.NoError(t, json.Unmarshal([]byte(out), &file))
		var tps []int
		for _, e := range file.Entries {
			require.Empty(t, e.Error, e.Asked)
			st, err := plans.ParseStrategy(e.Asked, 8)
			require.NoError(t, err)
			if st.TP > 1 && !slices.Contains(tps, st.TP) {
				tps = append(tps, st.TP)
			}
		}
		slices.Sort(tps)
		require.Equal(t, tt.tps, tps, "%s %v", tt.model, tt.args)
	}
}

// --recompute tries full recomputation, and selective where there is
// attention to recompute; data parallelism is tried with ZeRO too.
func TestSweepRecompute(t *testing.T) {
	for _, tt := range []struct {
		model string
		modes []string
	}{
		{"mlp", []string{"recompute=full"}},
		{"gpt2s-blocks:layers=2,hidden=32,heads=2,seq=16", []string{"recompute=selective", "recompute=full"}},
	} {
		out, err := run(t, "sweep", "--model", tt.model, "--cluster", "local", "--devices", "2", "--batch", "8",
			"--max-mb", "1", "--max-tp", "1", "--recompute", "--json")
		require.NoError(t, err)
		var file sweepFile
		require.NoError(t, json.Unmarshal([]byte(out), &file))
		require.True(t, file.Recompute)
		require.Equal(t, 6*(1+len(tt.modes)), len(file.Entries), "dp=2 (without ZeRO, with each stage, and stage 3 with prefetch) and pp=2, each plain and with each mode")
		for _, mode := range tt.modes {
			n := 0
			for _, e := range file.Entries {
				if strings.HasSuffix(e.Asked, mode) {
					n++
				}
			}
			require.Equal(t, 6, n, "%s: %s", tt.model, mode)
		}
		for stage := 1; stage <= 3; stage++ {
			n := 0
			for _, e := range file.Entries {
				if strings.Contains(e.Asked, fmt.Sprintf("zero=%d", stage)) {
					n++
					require.Empty(t, e.Error, "%s: %s", tt.model, e.Asked)
				}
			}
			want := 1 + len(tt.modes)
			if stage == 3 {
				want *= 2 // with and without prefetch
			}
			require.Equal(t, want, n, "%s: zero=%d", tt.model, stage)
		}
	}
}

func TestSweepBadInput(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--shard", "3/3"}, "want i/N with 0 ≤ i < N"},
		{[]string{"--shard", "1of3"}, "want i/N"},
		{[]string{"--uneven", "maybe"}, "want on, off or auto"},
		{[]string{"--max-mb", "0"}, "--max-mb must be ≥ 1, got 0"},
		{[]string{"--top", "-1"}, "--top must be ≥ 0 (0: all), got -1"},
		{[]string{"--devices", "-2"}, "--devices must be ≥ 0 (0: all of the cluster's), got -2"},
		{[]string{"--max-tp", "0"}, "--max-tp must be -1 (one machine's devices) or ≥ 1, got 0"},
		{[]string{"--devices", "3"}, "--devices 3: plans: infeasible strategy: the plan needs 3 devices"},
		{[]string{"--model", "gpt-9"}, `unknown model "gpt-9"`},
	} {
		_, err := run(t, append(sweepArgs, tt.args...)...)
		require.ErrorContains(t, err, tt.want, "%v", tt.args)
	}
	out, err := run(t, "sweep", "--model", "mlp", "--cluster", "local", "--devices", "2", "--batch", "16", "--uneven", "auto")
	require.NoError(t, err)
	require.NotContains(t, out, "(auto)", "equal devices: no uneven candidates")
	require.True(t, strings.HasPrefix(out, "sweep: mlp (f32), batch 16, 2 device(s) of local"))

	// Forced on equal devices, mb=auto can only find the even split: the
	// table shows each such plan once.
	out, err = run(t, "sweep", "--model", "mlp", "--cluster", "local", "--devices", "2", "--batch", "16", "--uneven", "on", "--top", "0")
	require.NoError(t, err)
	require.Contains(t, out, "(not shown: ")
	require.NotContains(t, out, "dp=2 (auto)")
	require.Equal(t, 1, strings.Count(out, "  dp=2  "), out)
}

// Merging never panics on a file that is not what a sweep wrote.
func FuzzMergeSweep(f *testing.F) {
	root := newRoot()
	var out strings.Builder
	root.SetOut(&out)
	root.SetArgs([]string{"sweep", "--model", "mlp", "--cluster", "local", "--devices", "2", "--batch", "8", "--max-mb", "2", "--json"})
	if err := root.Execute(); err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(out.String()))
	f.Add([]byte(`{"shards": 1, "batch": 1, "strategies": 1, "entries": [{"index": 0, "asked": "single", "strategy": "dp=9"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "s.json")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		_ = runMerge(io.Discard, mergeFlags{top: 3}, []string{path})
	})
}

// A shard file cut short, or with entries of another shard or repeated,
// is refused, naming the file: merged, it would rank a sweep with
// strategies missing as if whole.
func TestMergeRejectsBadShards(t *testing.T) {
	dir := t.TempDir()
	var files [2]sweepFile
	var paths [2]string
	for i := range files {
		out, err := run(t, "sweep", "--model", "mlp", "--cluster", "dgx-a100", "--devices", "2", "--batch", "8", "--json", "--shard", fmt.Sprintf("%d/2", i))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal([]byte(out), &files[i]))
		paths[i] = filepath.Join(dir, fmt.Sprintf("s%d.json", i))
		require.NoError(t, os.WriteFile(paths[i], []byte(out), 0o644))
	}
	_, err := run(t, "sweep", "merge", paths[0], paths[1])
	require.NoError(t, err)
	for _, tt := range []struct {
		name string
		edit func(f *sweepFile)
		want string
	}{
		{"cut short", func(f *sweepFile) { f.Entries = f.Entries[:len(f.Entries)-1] }, fmt.Sprintf("%d entries, shard 1/2 of %d strategies has %d", len(files[1].Entries)-1, files[1].Strategies, len(files[1].Entries))},
		{"repeated", func(f *sweepFile) { f.Entries[0].Index = f.Entries[1].Index }, "entries[1]"},
		{"another shard's", func(f *sweepFile) { f.Entries[0].Index = 0 }, "entries[0] (" + files[1].Entries[0].Asked + "): index 0 is not one of shard 1/2's strategies"},
		{"model", func(f *sweepFile) { f.Model = "resnet-9000" }, `model: zoo: unknown model "resnet-9000"`},
		{"strategy", func(f *sweepFile) { f.Entries[0].Strategy = "dp=banana" }, "entries[0] (" + files[1].Entries[0].Asked + "): strategy: "},
		{"step", func(f *sweepFile) { f.Entries[0].StepNs = -5 }, "step -5 ns"},
		{"zero step", func(f *sweepFile) { f.Entries[0].StepNs = 0 }, "step 0 ns"},
		{"peak", func(f *sweepFile) { f.Entries[0].Peak = -1 }, "peak -1 bytes: want"},
	} {
		f := files[1]
		f.Entries = slices.Clone(f.Entries)
		tt.edit(&f)
		b, err := json.Marshal(f)
		require.NoError(t, err)
		bad := filepath.Join(dir, "bad.json")
		require.NoError(t, os.WriteFile(bad, b, 0o644))
		_, err = run(t, "sweep", "merge", paths[0], bad)
		require.ErrorContains(t, err, bad+": ", tt.name)
		require.ErrorContains(t, err, tt.want, tt.name)
	}
	// Shards of two sweeps: the error says which settings differ.
	f := files[1]
	f.Batch, f.MaxMB = 16, 3
	b, err := json.Marshal(f)
	require.NoError(t, err)
	other := filepath.Join(dir, "other.json")
	require.NoError(t, os.WriteFile(other, b, 0o644))
	_, err = run(t, "sweep", "merge", paths[0], other)
	require.ErrorContains(t, err, fmt.Sprintf("is a shard of another sweep than %s (shard 0/2): batch 16, not 8; max_mb 3, not %d", paths[0], files[0].MaxMB))
}

// A sweep priced by a calibration that has no fit of some of the best
// plan's kernels says which, as simulate does; so does a plan whose
// strategy a search resolved.
func TestNotesUncalibratedKernels(t *testing.T) {
	cal := cost.NewCalibration()
	fit := cost.OpFit{Compute: cost.Curve{Max: 0.5, Half: 1e9, Gamma: 1}, Memory: cost.Curve{Max: 0.5, Half: 1e6, Gamma: 1}}
	cal.Devices["T4"] = &cost.DeviceCalibration{Ops: map[string]*cost.OpFit{"matmul": &fit, "dense": &fit}}
	path := filepath.Join(t.TempDir(), "calib.json")
	require.NoError(t, cal.WriteFile(path))
	for _, args := range [][]string{
		append(sweepArgs, "--calib", path, "--place", "off", "--uneven", "off"),
		{"plan", "--model", "mnist-cnn", "--cluster", "mixed-t4-cpu", "--batch", "32", "--strategy", "dp=2,mbs=8,mb=auto", "--calib", path},
	} {
		note := stderrOf(t, func() {
			_, err := run(t, args...)
			require.NoError(t, err)
		})
		require.Contains(t, note, "flowsim: note: --calib "+path+" has no fit of some of the ")
		require.Contains(t, note, "kernels (T4: bias_act, bias_act_grad, bias_grad, conv2d, ")
	}
}

// stderrOf returns what f writes to os.Stderr.
func stderrOf(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	stderr := os.Stderr
	os.Stderr = w
	defer func() { os.Stderr = stderr }()
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r)
		done <- b
	}()
	f()
	require.NoError(t, w.Close())
	return string(<-done)
}

// A sweep of shared plans (--shared-tp, --shared-dp) writes the best plan
// shared, as it simulated it, and its shards are not those of the same
// sweep unshared.
func TestSweepShared(t *testing.T) {
	dir := t.TempDir()
	args := []string{"sweep", "--model", "gpt2s-blocks:layers=2,hidden=64,heads=4,seq=16", "--cluster", "dgx-a100", "--batch", "16", "--devices", "4", "--max-mb", "2"}
	best := filepath.Join(dir, "best.json")
	_, err := run(t, append(args, "--shared-tp", "--shared-dp", "-o", best)...)
	require.NoError(t, err)
	p, err := plans.ReadFile(best)
	require.NoError(t, err)
	require.Equal(t, p.DP > 1, p.SharedDP, p.Strategy)
	require.Equal(t, p.TP > 1, p.SharedTP, p.Strategy)
	require.True(t, p.SharedDP || p.SharedTP, "the best of this sweep has replicas or a tensor-parallel group: %s", p.Strategy)

	paths := writeShards(t, append(slices.Clone(args), "--shared-dp"), args)
	_, err = run(t, "sweep", "merge", paths[0], paths[1])
	require.ErrorContains(t, err, "shared_dp")
}

// A sweep shares plans where that ranks them exactly (NVSwitch machines
// with the catalog's efficiencies), and there only: every entry is what
// the whole plan of its strategy, compiled and simulated on its own,
// gives — on an NVSwitch machine, on a DGX-1 (whose hybrid cube mesh
// prices a group's ranks unlike), on unlike devices (uneven and placed
// strategies) and under a calibration that prices dispatch latencies.
// The best plan is written whole.
func TestSweepSharesExactly(t *testing.T) {
	calib := filepath.Join(t.TempDir(), "calib.json")
	require.NoError(t, os.WriteFile(calib, []byte(`{"version":1,"devices":{"cpu":{"dispatch_ns":100000}}}`), 0o644))
	for _, args := range [][]string{
		{"sweep", "--model", "gpt2s-blocks:layers=2,hidden=64,heads=4,seq=16", "--cluster", "dgx-a100", "--batch", "16", "--devices", "4", "--max-mb", "2"},
		{"sweep", "--model", "gpt2s-blocks:layers=2,hidden=64,heads=4,seq=16", "--cluster", "dgx-v100", "--batch", "16", "--max-mb", "2"},
		{"sweep", "--model", "mnist-cnn", "--cluster", "mixed-t4-cpu", "--batch", "64", "--max-mb", "2"},
		{"sweep", "--model", "gpt2s-blocks:layers=2,hidden=64,heads=4,seq=16", "--cluster", "mixed-t4-cpu", "--batch", "16", "--max-mb", "2"}, // tp=2 over a T4 and a CPU
		{"sweep", "--model", "mlp", "--cluster", "local", "--devices", "2", "--calib", calib},
	} {
		best := filepath.Join(t.TempDir(), "best.json")
		out, err := run(t, append(slices.Clone(args), "--json", "--top", "0", "-o", best)...)
		require.NoError(t, err)
		var f sweepFile
		require.NoError(t, json.Unmarshal([]byte(out), &f))
		require.False(t, f.SharedTP || f.SharedDP, "nothing asked")
		cluster, err := topology.Resolve(f.Cluster)
		require.NoError(t, err)
		model, _, err := costModel(f.Calib, cluster)
		require.NoError(t, err)
		feasible := 0
		for _, e := range f.Entries {
			if e.Error != "" {
				continue
			}
			feasible++
			p, err := f.compile(e.Strategy)
			require.NoError(t, err, e.Strategy)
			require.False(t, p.SharedTP || p.SharedDP)
			tr, err := sim.Simulate(p, model, 4)
			require.NoError(t, err)
			step, err := tr.StepTime(1)
			require.NoError(t, err)
			var peak units.Bytes
			for _, m := range p.Memory {
				peak = max(peak, m.Peak)
			}
			require.Equal(t, int64(step), e.StepNs, "%s on %s", e.Strategy, f.Cluster)
			require.Equal(t, int64(peak), e.Peak, "%s on %s", e.Strategy, f.Cluster)
		}
		require.Greater(t, feasible, 1, "%v", args)
		p, err := plans.ReadFile(best)
		require.NoError(t, err)
		require.False(t, p.SharedDP || p.SharedTP, "the plan written lists every rank and replica: %s", p.Strategy)
	}
}

// --max-memory caps every device's memory: plan refuses what needs more,
// saying so; a sweep ranks only what fits, writes the best plan with its
// devices capped, and records the cap, so that shards under another cap
// do not merge.
func TestMaxMemory(t *testing.T) {
	dir := t.TempDir()
	planArgs := []string{"plan", "--model", "mlp", "--cluster", "dgx-a100", "--strategy", "dp=2", "--batch", "64"}
	_, err := run(t, append(planArgs, "--max-memory", "1MiB")...)
	require.ErrorContains(t, err, "out of memory")
	require.ErrorContains(t, err, "has 1.00 MiB")
	require.ErrorContains(t, err, "(each device's memory capped by --max-memory 1MiB)")
	path := filepath.Join(dir, "plan.json")
	_, err = run(t, append(planArgs, "--max-memory", "1GiB", "-o", path)...)
	require.NoError(t, err)
	p, err := plans.ReadFile(path)
	require.NoError(t, err)
	for _, d := range p.Devices {
		require.EqualValues(t, 1<<30, d.Memory, d.Name)
	}
	for _, bad := range []string{"20", "-1GiB", "lots"} {
		_, err = run(t, append(planArgs, "--max-memory", bad)...)
		require.ErrorContains(t, err, "--max-memory \""+bad+"\": want a size per device, as 70GiB")
	}

	args := []string{"sweep", "--model", "gpt2s-blocks:layers=2,hidden=64,heads=4,seq=16", "--cluster", "dgx-a100", "--batch", "16", "--devices", "4", "--max-mb", "4"}
	out, err := run(t, append(args, "--json")...)
	require.NoError(t, err)
	var whole sweepFile
	require.NoError(t, json.Unmarshal([]byte(out), &whole))
	front := sweepFront(whole.Entries)
	require.GreaterOrEqual(t, len(front), 2)
	limit := front[1].Peak // the second-fastest strategy of the front fits; the fastest does not
	best := filepath.Join(dir, "best.json")
	out, err = run(t, append(args, "--json", "--max-memory", fmt.Sprintf("%dB", limit), "-o", best)...)
	require.NoError(t, err)
	var capped sweepFile
	require.NoError(t, json.Unmarshal([]byte(out), &capped))
	require.Equal(t, limit, capped.MaxMemory)
	require.Equal(t, front[1].Index, capped.Entries[0].Index, "the fastest that fits ranks first")
	for _, e := range capped.Entries {
		if e.Error == "" {
			require.LessOrEqual(t, e.Peak, limit, e.Strategy)
		}
	}
	require.Contains(t, capped.Entries[len(capped.Entries)-1].Error, "out of memory")
	p, err = plans.ReadFile(best)
	require.NoError(t, err)
	require.Equal(t, front[1].Strategy, p.Strategy)
	for _, d := range p.Devices {
		require.EqualValues(t, limit, d.Memory, d.Name)
	}
	text, err := run(t, append(args, "--max-memory", fmt.Sprintf("%dB", limit))...)
	require.NoError(t, err)
	require.Contains(t, text, fmt.Sprintf("(their memory capped by --max-memory at %v)", units.Bytes(limit)))

	paths := writeShards(t, append(slices.Clone(args), "--max-memory", "1GiB"), append(slices.Clone(args), "--max-memory", "2GiB"))
	_, err = run(t, "sweep", "merge", paths[0], paths[1])
	require.ErrorContains(t, err, `max_memory_bytes 2147483648, not 1073741824`)

	// A search that finds nothing feasible under the cap says so too.
	_, err = run(t, "plan", "--model", "mnist-cnn", "--cluster", "dgx-a100", "--strategy", "dp=2,mb=auto:4", "--max-memory", "100KiB")
	require.ErrorContains(t, err, "no split of 4 micro-batches")
	require.ErrorContains(t, err, "(each device's memory capped by --max-memory 100KiB)")
}

// The best plan a sweep writes has the optimizer the sweep compiled:
// its weight decay (adamw's 0 too, not its default) and schedule. And the
// plan and the image are two files.
func TestSweepBestPlanOptimizer(t *testing.T) {
	dir := t.TempDir()
	best := filepath.Join(dir, "best.json")
	args := []string{"sweep", "--model", "mlp", "--cluster", "local", "--devices", "2", "--batch", "16", "--max-mb", "1", "--optimizer", "adamw",
		"--weight-decay", "0", "--lr-schedule", "cosine:steps=10"}
	_, err := run(t, append(args, "-o", best)...)
	require.NoError(t, err)
	p, err := plans.ReadFile(best)
	require.NoError(t, err)
	require.Contains(t, p.Optimizer, "weight_decay=0, schedule=cosine:steps=10")
	_, err = run(t, append(args, "-o", best, "--plot", filepath.Join(dir, ".", "best.json"))...)
	require.ErrorContains(t, err, "-o and --plot are both")
}

// writeShards runs shard i of len(args) of a sweep with args[i] (and
// --json), writes each output to a file and returns their paths.
func writeShards(t *testing.T, args ...[]string) []string {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for i, a := range args {
		out, err := run(t, append(slices.Clone(a), "--json", "--shard", fmt.Sprintf("%d/%d", i, len(args)))...)
		require.NoError(t, err)
		paths = append(paths, filepath.Join(dir, fmt.Sprintf("s%d.json", i)))
		require.NoError(t, os.WriteFile(paths[i], []byte(out), 0o644))
	}
	return paths
}
