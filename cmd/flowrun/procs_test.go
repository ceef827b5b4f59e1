package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/data"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/runtime"
	"github.com/flowkit/flowkit/topology"
)

// TestMain lets the test binary serve as flowrun: 'flowrun exec --procs'
// starts workers by running its own executable with "worker", and
// TestTrainInterrupt runs "train" in a process it can interrupt.
func TestMain(m *testing.M) {
	if os.Getenv("FLOWRUN_TEST_AS_MAIN") == "1" && len(os.Args) > 1 && !strings.HasPrefix(os.Args[1], "-") { // a subcommand, not the test flags
		if d, err := time.ParseDuration(os.Getenv("FLOWRUN_TEST_EXIT_AFTER")); err == nil {
			go func() {
				time.Sleep(d)
				os.Exit(3) // a worker dying mid-run
			}()
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func writeCPUPlan(t *testing.T, model, strategy string, batch, devices int) string {
	t.Helper()
	st, err := plans.ParseStrategy(strategy, batch)
	require.NoError(t, err)
	var devs []plans.Device
	for i := range devices {
		devs = append(devs, plans.Device{Name: "cpu" + strconv.Itoa(i), Type: "cpu", Workers: 1})
	}
	p, err := plans.Compile(plans.Config{Model: model, Batch: batch, Strategy: st, Seed: 3,
		Optimizer: graph.SGD{LR: 0.05, Momentum: 0.9}, Devices: devs})
	require.NoError(t, err)
	return savePlan(t, p)
}

type execResult struct {
	Pred float64   `json:"predicted_step_s"`
	Meas float64   `json:"measured_step_s"`
	Loss []float64 `json:"loss"`
}

func execJSON(t *testing.T, args ...string) (execResult, error) {
	t.Helper()
	var err error
	out := captureStdout(t, func() {
		cmd := newExecCmd()
		cmd.SetArgs(append(args, "--json"))
		cmd.SetErr(io.Discard)
		cmd.SetOut(io.Discard)
		err = cmd.Execute()
	})
	var res execResult
	if err == nil {
		require.NoError(t, json.Unmarshal(out, &res))
	}
	return res, err
}

// A plan run over several real processes, talking gRPC, trains as one
// process does (the losses of later iterations depend on every update), and
// its merged trace keeps the plan's rules (exec checks it).
func TestExecProcs(t *testing.T) {
	t.Setenv("FLOWRUN_TEST_AS_MAIN", "1")
	path := writeCPUPlan(t, "mlp", "dp=2,pp=2,mb=2", 16, 4)
	one, err := execJSON(t, path, "--iters", "4", "--warmup", "1")
	require.NoError(t, err)
	for _, args := range [][]string{
		{"--procs", "2"},                       // replicas on ranks: all-reduces cross
		{"--procs", "2", "--ranks", "0,1,0,1"}, // stages on ranks: transfers cross
		{"--procs", "3", "--ranks", "0,1,2,0", "--compare"},
	} {
		t.Run(filepath.Join(args...), func(t *testing.T) {
			got, err := execJSON(t, append([]string{path, "--iters", "4", "--warmup", "1"}, args...)...)
			require.NoError(t, err)
			require.InDeltaSlice(t, one.Loss, got.Loss, 1e-9)
			require.Greater(t, got.Meas, 0.0)
		})
	}
}

// A tensor-parallel language model runs from its plan file, in one
// process or over two (its sums crossing), with the same losses; its
// predicted step comes with it.
func TestExecLanguageModelTensorParallel(t *testing.T) {
	t.Setenv("FLOWRUN_TEST_AS_MAIN", "1")
	path := writeCPUPlan(t, "gpt:layers=2,hidden=32,heads=4,seq=8,vocab=64", "tp=2", 4, 2)
	one, err := execJSON(t, path, "--iters", "3", "--warmup", "1", "--compare")
	require.NoError(t, err)
	require.Greater(t, one.Pred, 0.0)
	var two execResult
	said := captureStderr(t, func() { two, err = execJSON(t, path, "--iters", "3", "--warmup", "1", "--procs", "2") })
	require.NoError(t, err)
	require.InDeltaSlice(t, one.Loss, two.Loss, 1e-9)
	require.NotContains(t, string(said), "joining the coordinator", "--procs says where its workers are: they do not")
	for _, l := range one.Loss {
		require.InDelta(t, math.Log(64), l, 1, "next-token loss near log(vocab) at the start")
	}
}

// A worker dying mid-run stops the run with an error naming it, not a hang.
// A comparison of a multi-process run whose plan's cluster puts two
// ranks' devices on one host says that the prediction prices what passes
// between them as copies within a process, and how to price the transport.
func TestSharedHostNote(t *testing.T) {
	p := &plans.Plan{Cluster: "local", Devices: []plans.Device{
		{Name: "local/cpu:0", Host: "local"}, {Name: "local/cpu:1", Host: "local"},
		{Name: "local/cpu:2", Host: "local"}, {Name: "other/cpu:0", Host: "other"}}}
	note := sharedHostNote(p, []int{0, 0, 1, 2})
	require.Contains(t, note, `devices local/cpu:0 (rank 0) and local/cpu:2 (rank 1) share host local in the plan's cluster "local"`)
	require.Contains(t, note, "'flowrun calibrate link --procs 3 -o procs.yaml'")
	require.Empty(t, sharedHostNote(p, []int{0, 0, 0, 1}), "each host on one rank")
	p.Devices[1].Host, p.Devices[2].Host = "b", "c"
	require.Empty(t, sharedHostNote(p, []int{0, 1, 2, 3}), "a host per rank")
}

func TestExecProcsWorkerDies(t *testing.T) {
	t.Setenv("FLOWRUN_TEST_AS_MAIN", "1")
	t.Setenv("FLOWRUN_TEST_EXIT_AFTER", "1500ms")
	path := writeCPUPlan(t, "mlp", "dp=2", 16, 2)
	start := time.Now()
	_, err := execJSON(t, path, "--iters", "100000", "--warmup", "1", "--procs", "2")
	require.Error(t, err)
	t.Log(err)
	require.Contains(t, err.Error(), "rank 1")
	require.Less(t, time.Since(start), 30*time.Second)
}

// Placement and launch errors are clear.
func TestExecProcsBadInput(t *testing.T) {
	path := writeCPUPlan(t, "mlp", "dp=2", 8, 2)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--procs", "3"}, "3 processes for a plan of 2 devices"},
		{[]string{"--procs", "1", "--ranks", "0,1"}, `--ranks "0,1": a run of one process has no ranks`},
		{[]string{"--procs", "0"}, "--procs must be ≥ 1, got 0"},
		{[]string{"--procs", "2", "--token-file", "secret"}, "--token-file secret: --procs 2 makes the run's secret"},
		{[]string{"--procs", "2", "--ranks", "0"}, "1 ranks for the plan's 2 devices"},
		{[]string{"--procs", "2", "--ranks", "0,2"}, `device cpu1: rank "2", want 0…1`},
		{[]string{"--procs", "2", "--ranks", "1,1"}, `--ranks "1,1": rank 0 has none of the plan's 2 devices`},
	} {
		_, err := execJSON(t, append([]string{path}, tt.args...)...)
		require.ErrorContains(t, err, tt.want, "%v", tt.args)
	}
}

// trainJSON runs flowrun train with args and --json and returns its
// result.
func trainJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	var err error
	out := captureStdout(t, func() {
		cmd := newTrainCmd()
		cmd.SetArgs(append(args, "--json"))
		cmd.SetErr(io.Discard)
		cmd.SetOut(io.Discard)
		err = cmd.Execute()
	})
	require.NoError(t, err)
	var res map[string]any
	require.NoError(t, json.Unmarshal(out, &res))
	return res
}

// Training on MNIST over two processes (each reading MNIST itself) gives
// the weights of one process, hence its test accuracy.
func TestTrainProcs(t *testing.T) {
	t.Setenv("FLOWRUN_TEST_AS_MAIN", "1")
	one := trainJSON(t, "--strategy", "pp=2,mb=2", "--max-steps", "4")
	two := trainJSON(t, "--strategy", "pp=2,mb=2", "--max-steps", "4", "--procs", "2")
	require.Equal(t, one["train_loss"], two["train_loss"])
	require.Equal(t, one["test_accuracy"], two["test_accuracy"])
	require.Greater(t, two["test_accuracy"], 0.2, "four steps learn something")
}

// A byte-level language model trains on Go source and reports bits a byte
// beside byte frequencies'; over two processes (each reading the text) it
// trains as in one.
func TestTrainText(t *testing.T) {
	t.Setenv("FLOWRUN_TEST_AS_MAIN", "1")
	src, err := data.LocateText("")
	require.NoError(t, err)
	args := []string{"--model", "gpt:layers=1,hidden=32,heads=2,seq=16,vocab=256", "--data", filepath.Join(src, "go"),
		"--optimizer", "adam", "--lr", "0.01", "--batch", "8", "--max-steps", "6", "--eval-windows", "16", "--strategy", "dp=2"}
	one := trainJSON(t, args...)
	two := trainJSON(t, append(args, "--procs", "2")...)
	require.Equal(t, 6.0, one["steps"])
	require.Positive(t, one["train_bytes"])
	require.Positive(t, one["test_bytes"])
	require.InDelta(t, 5.5, one["unigram_bits_per_byte"], 1, "Go source's byte entropy")
	require.Less(t, one["test_bits_per_byte"], 8.5, "near ln 256 nats untrained, less after six steps")
	require.Equal(t, one["train_loss"], two["train_loss"])
	require.Equal(t, one["test_bits_per_byte"], two["test_bits_per_byte"])
}

// Tensor-parallel training computes what one device does, up to the order
// of sums; the test accuracy is that of the weights assembled from the
// parts, over one process or two.
func TestTrainTensorParallel(t *testing.T) {
	t.Setenv("FLOWRUN_TEST_AS_MAIN", "1")
	args := []string{"--model", "mlp", "--max-steps", "20"}
	one := trainJSON(t, args...)
	tp := trainJSON(t, append(args, "--strategy", "tp=2")...)
	two := trainJSON(t, append(args, "--strategy", "tp=2", "--procs", "2")...)
	require.InEpsilon(t, one["train_loss"], tp["train_loss"], 1e-5)
	require.InDelta(t, one["test_accuracy"], tp["test_accuracy"], 0.002)
	require.Greater(t, tp["test_accuracy"], 0.5, "twenty steps learn something")
	require.Equal(t, tp["train_loss"], two["train_loss"])
	require.Equal(t, tp["test_accuracy"], two["test_accuracy"])
}

// calibrate link measures the transport between two real processes and
// writes a cluster of them that loads, with the measured fabric.
func TestCalibrateLink(t *testing.T) {
	t.Setenv("FLOWRUN_TEST_AS_MAIN", "1")
	path := filepath.Join(t.TempDir(), "procs2.yaml")
	var err error
	out := captureStdout(t, func() {
		cmd := newCalibrateCmd()
		cmd.SetArgs([]string{"link", "--reps", "5", "--sizes", "4KiB,4MiB", "-o", path, "--json"}) // sizes far apart: a loaded machine delays small messages by milliseconds
		cmd.SetErr(io.Discard)
		err = cmd.Execute()
	})
	require.NoError(t, err)
	var fit linkFit
	require.NoError(t, json.Unmarshal(out, &fit))
	require.Len(t, fit.OneWay, 2)
	require.Less(t, fit.OneWay[0], fit.OneWay[1], "a larger message takes longer")
	require.Positive(t, fit.Bandwidth)
	require.Len(t, fit.Exchange, 2)
	require.Less(t, fit.Exchange[0], fit.Exchange[1], "a larger exchange takes longer")
	require.Positive(t, fit.ExchangeBandwidth)
	require.GreaterOrEqual(t, fit.Duplex, 0.0)
	require.LessOrEqual(t, fit.Duplex, 1.0)
	c, err := topology.Load(path)
	require.NoError(t, err)
	require.Len(t, c.Devices, 2)
	require.NotEqual(t, c.Nodes[c.Devices[0].Node].Name, c.Nodes[c.Devices[1].Node].Name, "a node per process")
	for _, l := range c.Links {
		if l.Kind == "ethernet" {
			require.Equal(t, fit.Duplex, l.Duplex, "the fabric's duplex is the measured one")
		}
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--reps", "2"}, "--reps must be ≥ 3"},
		{[]string{"--sizes", "6B,64KiB"}, "want a positive multiple of 4 bytes"},
		{[]string{"--sizes", "4KiB"}, "at least two different sizes"},
		{[]string{"--sizes", "4KiB,4096"}, "at least two different sizes"},
		{[]string{"--sizes", "1TiB,2TiB"}, `--sizes "1TiB": want a positive multiple of 4 bytes, up to 1.00 GiB`},
		{[]string{"--procs", "1"}, "WORLD_SIZE"},
		{[]string{"--ranks", "0,1"}, `--ranks "0,1": calibrate link measures ranks 0 and 1 and places no plan's devices`},
	} {
		cmd := newCalibrateCmd()
		cmd.SetArgs(append([]string{"link"}, tt.args...))
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		require.ErrorContains(t, cmd.Execute(), tt.want, "%v", tt.args)
	}
}

// Training in two runs, the second resumed from the first's checkpoint,
// ends where one run ends: with the default eager executor, through a
// plan, and for a language model.
func TestTrainResume(t *testing.T) {
	t.Setenv("FLOWRUN_TEST_AS_MAIN", "1")
	src, err := data.LocateText("")
	require.NoError(t, err)
	dir := t.TempDir()
	for i, args := range [][]string{
		{"--model", "mlp", "--optimizer", "adam", "--lr", "0.001"},
		{"--model", "mlp", "--strategy", "dp=2", "--seed", "4"},
		{"--model", "mlp", "--optimizer", "adamw", "--lr-schedule", "cosine:warmup=2,steps=5,min=0.1", "--lr", "0.003"}, // the resumed run goes on along the schedule
		{"--model", "gpt:layers=1,hidden=32,heads=2,seq=16,vocab=256", "--data", filepath.Join(src, "go"),
			"--optimizer", "adam", "--lr", "0.01", "--batch", "8", "--eval-windows", "16"},
	} {
		ckpt := filepath.Join(dir, fmt.Sprintf("run%d.safetensors", i))
		one := trainJSON(t, append(args, "--max-steps", "5")...)
		first := trainJSON(t, append(args, "--max-steps", "2", "--save", ckpt, "--save-every", "1")...)
		require.Equal(t, 2.0, first["steps_total"])
		second := trainJSON(t, append(args, "--max-steps", "3", "--resume", ckpt, "--save", ckpt)...)
		require.Equal(t, 5.0, second["steps_total"], "%v", args)
		require.Equal(t, one["test_loss"], second["test_loss"], "%v", args)

		// flowrun eval scores the checkpoint as training scored its weights.
		evalArgs := []string{ckpt}
		if _, ok := second["test_bits_per_byte"]; ok {
			evalArgs = append(evalArgs, "--data", filepath.Join(src, "go"), "--eval-windows", "16")
		}
		var err error
		out := captureStdout(t, func() {
			cmd := newEvalCmd()
			cmd.SetArgs(append(evalArgs, "--json"))
			cmd.SetErr(io.Discard)
			err = cmd.Execute()
		})
		require.NoError(t, err)
		var eval map[string]any
		require.NoError(t, json.Unmarshal(out, &eval))
		require.Equal(t, second["test_loss"], eval["test_loss"], "%v", args)
		require.Equal(t, 5.0, eval["steps_total"])
	}
	// Over two processes (each rank loading its parts), from a checkpoint
	// of one process: as one process goes on.
	args := []string{"--model", "mlp", "--strategy", "dp=2", "--seed", "4"}
	ckpt := filepath.Join(dir, "procs.safetensors")
	one := trainJSON(t, append(args, "--max-steps", "5")...)
	trainJSON(t, append(args, "--max-steps", "2", "--save", ckpt)...)
	two := trainJSON(t, append(args, "--max-steps", "3", "--resume", ckpt, "--procs", "2")...)
	require.Equal(t, 5.0, two["steps_total"])
	require.Equal(t, one["test_loss"], two["test_loss"])

	ckpt = filepath.Join(dir, "run0.safetensors")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--resume", filepath.Join(dir, "none.safetensors")}, "--resume: runtime: checkpoint: open"},
		{[]string{"--resume", ckpt, "--model", "mnist-cnn"}, "--resume " + ckpt + ": the checkpoint is of model mlp, not mnist-cnn (--model): drop --model"},
		{[]string{"--resume", ckpt, "--model", "mlp", "--seed", "9"}, "the checkpoint's run has seed 1 (its data order and dropout), --seed says 9"},
		{[]string{"--resume", ckpt, "--model", "mlp", "--batch", "32"}, "the checkpoint's run took batches of 64 (where its data order is), --batch says 32: drop --batch"},
		{[]string{"--resume", ckpt, "--model", "mlp", "--strategy", "single"}, "have no tensor fc1.weight.momentum (the checkpoint of mlp, saved with adam("},
	} {
		cmd := newTrainCmd()
		cmd.SetArgs(append(tt.args, "--max-steps", "1"))
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		cmd.SilenceUsage = true
		require.ErrorContains(t, cmd.Execute(), tt.want, "%v", tt.args)
	}
	// Without --model, --seed or --batch, a resumed run takes the
	// checkpoint's.
	res := trainJSON(t, "--resume", ckpt, "--optimizer", "adam", "--lr", "0.001", "--max-steps", "1")
	require.Equal(t, "mlp", res["model"])
	require.Equal(t, 6.0, res["steps_total"])
}

// A run that stops after a checkpoint says how to go on from it; one that
// diverged does not.
func TestFinishTraining(t *testing.T) {
	f := trainFlags{save: "c.safetensors", saved: new(int)}
	stopped := fmt.Errorf("runtime: %w", context.Canceled)
	require.Equal(t, stopped, finishTraining(nil, f, stopped), "no checkpoint yet")
	*f.saved = 40
	err := finishTraining(nil, f, stopped)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "c.safetensors holds the weights after step 40: go on with --resume c.safetensors")
	diverged := fmt.Errorf("%w at step 41", runtime.ErrDiverged)
	require.Equal(t, diverged, finishTraining(nil, f, diverged))
}

// writeMNIST writes n images of side×side pixels, and their labels, as
// MNIST's training and test sets in dir.
func writeMNIST(t *testing.T, dir string, side, n int) {
	t.Helper()
	images := binary.BigEndian.AppendUint32(nil, 0x803)
	for _, v := range []int{n, side, side} {
		images = binary.BigEndian.AppendUint32(images, uint32(v))
	}
	labels := binary.BigEndian.AppendUint32(nil, 0x801)
	labels = binary.BigEndian.AppendUint32(labels, uint32(n))
	for i := range n {
		for p := range side * side {
			images = append(images, byte(i*7+p))
		}
		labels = append(labels, byte(i%10))
	}
	for name, b := range map[string][]byte{data.TrainImagesFile: images, data.TrainLabelsFile: labels, data.TestImagesFile: images, data.TestLabelsFile: labels} {
		tmp := filepath.Join(dir, name+".tmp")
		require.NoError(t, os.WriteFile(tmp, b, 0o644))
		require.NoError(t, os.Rename(tmp, filepath.Join(dir, name)))
	}
}

// A worker that cannot do its part while its link stays up (its copy of
// the data set, read after rank 0's, has other images) fails the run on
// rank 0 at once with its error, not with a stall after a minute; and the
// worker, having failed, exits cleanly when rank 0 ends the run.
func TestTrainLaunchedWorkerFails(t *testing.T) {
	dir := t.TempDir()
	writeMNIST(t, dir, 28, 64)
	port, err := freePort()
	require.NoError(t, err)
	env := append(os.Environ(), "FLOWRUN_TEST_AS_MAIN=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port), "FLOWRUN_TOKEN=launched")
	var said0, said1 bytes.Buffer
	rank0 := exec.Command(os.Args[0], "train", "--model", "mlp", "--strategy", "dp=2", "--batch", "16", "--max-steps", "50", "--data", dir, "--workers", "1")
	rank0.Env, rank0.Stdout, rank0.Stderr = slices.Concat(env, []string{"RANK=0"}), &said0, &said0
	worker := exec.Command(os.Args[0], "worker")
	worker.Env, worker.Stdout, worker.Stderr = slices.Concat(env, []string{"RANK=1"}), &said1, &said1
	require.NoError(t, rank0.Start())
	guard := time.AfterFunc(2*time.Minute, func() { rank0.Process.Kill() })
	defer guard.Stop()
	exited := make(chan error, 1)
	go func() { exited <- rank0.Wait() }()
	for listening := false; !listening; { // once it has read the data set
		select {
		case err := <-exited:
			t.Fatalf("rank 0 exited (%v) before the worker started:\n%s", err, said0.String())
		case <-time.After(20 * time.Millisecond):
		}
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if listening = err == nil; listening {
			c.Close()
		}
	}
	writeMNIST(t, dir, 8, 64)
	require.NoError(t, worker.Start())
	var exit *exec.ExitError
	require.ErrorAs(t, <-exited, &exit)
	out := said0.String()
	require.Equal(t, 1, exit.ExitCode(), out)
	require.Contains(t, out, "flowrun: runtime: rank 1 failed: ")
	require.Contains(t, out, "MNIST feeds 8×8 images")
	require.NotContains(t, out, "stalled")
	require.NoError(t, worker.Wait(), said1.String())
}
