package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/runtime"
)

// Bad input as a new user would type it gets one clear error, not a panic.
func TestTrainBadInput(t *testing.T) {
	trunc := t.TempDir()
	// A truncated gzipped image file: the header promises 10 images.
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte{0, 0, 8, 3, 0, 0, 0, 10, 0, 0, 0, 28, 0, 0, 0, 28, 1, 2, 3})
	zw.Close()
	for _, name := range []string{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"} {
		require.NoError(t, os.WriteFile(filepath.Join(trunc, name), buf.Bytes(), 0o644))
	}
	noDir := filepath.Join(t.TempDir(), "none") // its parent a directory, for --save
	// The checkpoint of a run that diverged.
	nan := filepath.Join(t.TempDir(), "nan.safetensors")
	w, err := runtime.InitWeights("mlp", 1)
	require.NoError(t, err)
	bias, _ := w.Get("fc2.bias")
	bias[3] = float32(math.NaN())
	require.NoError(t, runtime.WriteCheckpoint(nan, runtime.Checkpoint{Model: "mlp", Optimizer: "sgd", Seed: 1, Step: 9, Batch: 64, Weights: w}))
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--model", "resnet-50"}, `--model: zoo: unknown model "resnet-50"`},
		{[]string{"--model", "gpt:layers=0,vocab=256"}, `--model: zoo: gpt:layers=0,vocab=256: layers must be a positive integer, got "0"`},
		{[]string{"--model", "cifar-cnn"}, "MNIST only"},
		{[]string{"--epochs", "0"}, "--epochs must be ≥ 1"},
		{[]string{"--batch", "-1"}, "--batch must be ≥ 1"},
		{[]string{"--lr", "0"}, "--lr must be a positive number"},
		{[]string{"--lr", "NaN"}, "--lr must be a positive number"},
		{[]string{"--momentum", "1"}, "--momentum must be in [0, 1)"},
		{[]string{"--momentum", "1", "--optimizer", "adam", "--workers", "-1"}, "--workers must be ≥ 0"}, // adam ignores --momentum: the next check speaks
		{[]string{"--optimizer", "lamb"}, `unknown optimizer "lamb"`},
		{[]string{"--weight-decay", "-1"}, "--weight-decay must be a finite number ≥ 0, got -1"},
		{[]string{"--lr-schedule", "exponential"}, `--lr-schedule: graph: learning-rate schedule "exponential": unknown decay (want constant, cosine or linear)`},
		{[]string{"--lr-schedule", "cosine:warmup=20", "--max-steps", "10"}, "--lr-schedule: graph: learning-rate schedule cosine: steps=10 must exceed warmup=20"},
		{[]string{"--lr-schedule", "linear:steps=1", "--max-steps", "3"}, "--lr-schedule linear:steps=1: the decay reaches 0 at step 1, and steps 2 to 3 of this run would train at a learning rate of 0: give steps=3"},
		{[]string{"--dtype", "f16"}, `--dtype: zoo: models are built in f32 or bf16, not "f16"`},
		{[]string{"--model", "mlp3x4096"}, "MNIST only"},
		{[]string{"--epochs", "two"}, `invalid argument "two"`},
		{[]string{"--data", filepath.Join(t.TempDir(), "missing")}, "no such directory"},
		{[]string{"--data", t.TempDir()}, "train-images-idx3-ubyte"},
		{[]string{"--data", trunc}, "truncated"},
		{[]string{"--device", "cuda", "--gemm", "fastest"}, `--gemm: unknown GEMM policy "fastest" (want one of tuned, fused, unfused)`},
		{[]string{"--device", "tpu"}, `--device "tpu": want cpu or cuda`},
		// Flags the rest of the line leaves without effect are refused.
		{[]string{"--cluster", "dgx-a100"}, "--cluster dgx-a100 places the devices of a --strategy plan: give --strategy"},
		{[]string{"--gemm", "fused"}, "--gemm is for --device cuda"},
		{[]string{"--model", "mlp", "--eval-windows", "5"}, "--eval-windows and --ext are for language models; mlp trains on MNIST"},
		{[]string{"--procs", "2"}, "a multi-process run trains through a plan: give --strategy"},
		{[]string{"--save-every", "2"}, "--save-every 2: give --save FILE"},
		{[]string{"--save-every", "-1", "--save", "x"}, "--save-every must be ≥ 0"},
		{[]string{"--save", filepath.Join(noDir, "c.safetensors")}, "--save: runtime: checkpoint " + filepath.Join(noDir, "c.safetensors") + ": open " + noDir},
		{[]string{"--save", noDir[:len(noDir)-len("/none")]}, "--save: runtime: checkpoint " + noDir[:len(noDir)-len("/none")] + ": is a directory"},
		{[]string{"--resume", "nowhere.safetensors"}, "--resume: runtime: checkpoint: open nowhere.safetensors"},
		{[]string{"--procs", "0", "--strategy", "dp=2"}, "--procs must be ≥ 1"},
		{[]string{"--model", "gpt:layers=1,hidden=32,heads=2,seq=8"}, "vocabulary of 50257: flowrun train feeds a language model text byte by byte; give it vocab=256"},
		{[]string{"--model", "gpt:layers=1,hidden=32,heads=2,seq=8,vocab=256", "--eval-windows", "0"}, "--eval-windows must be ≥ 1"},
		{[]string{"--model", "gpt:layers=1,hidden=32,heads=2,seq=8,vocab=256", "--eval-windows", "1000000000", "--max-steps", "100000"}, "runtime: evaluating on 1000000000 windows of 8 bytes"}, // before training, not after
		{[]string{"--resume", nan}, "--resume " + nan + ": runtime: tensor fc2.bias holds NaN at element 3: the run that saved the checkpoint (9 steps) had diverged"},
		{[]string{"--model", "bert:layers=1,hidden=32,heads=2,seq=8"}, "vocabulary of 30522: flowrun train feeds a language model text byte by byte; give it vocab=256"},
		{[]string{"--model", "gpt:layers=1,hidden=32,heads=2,seq=8,vocab=256", "--data", t.TempDir()}, "data: no text"},
		{[]string{"--model", "gpt:layers=1,hidden=32,heads=2,seq=8,vocab=256", "--data", filepath.Join(t.TempDir(), "missing")}, "no such directory"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			cmd := newTrainCmd()
			cmd.SetArgs(tt.args)
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			cmd.SilenceUsage = true
			err := cmd.Execute()
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
			require.NotContains(t, err.Error(), "\n", "one line")
		})
	}
}

// flowrun sample writes the prompt and as many bytes as asked, the same
// for the same seed; a classifier's checkpoint is refused.
func TestSampleCmd(t *testing.T) {
	const model = "gpt:layers=1,hidden=32,heads=2,seq=16,vocab=256"
	dir := t.TempDir()
	w, err := runtime.InitWeights(model, 7)
	require.NoError(t, err)
	lm := filepath.Join(dir, "lm.safetensors")
	require.NoError(t, runtime.WriteCheckpoint(lm, runtime.Checkpoint{Model: model, Optimizer: "sgd", Seed: 7, Weights: w}))
	sample := func(args ...string) (string, error) {
		var err error
		out := captureStdout(t, func() {
			cmd := newSampleCmd()
			cmd.SetArgs(args)
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			err = cmd.Execute()
		})
		return string(out), err
	}
	a, err := sample(lm, "--prompt", "func ", "--bytes", "30", "--seed", "3")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(a, "func "), a)
	require.Len(t, a, len("func ")+30+1, "the prompt, 30 bytes and a newline")
	b, err := sample(lm, "--prompt", "func ", "--bytes", "30", "--seed", "3")
	require.NoError(t, err)
	require.Equal(t, a, b)
	js, err := sample(lm, "--bytes", "5", "--json", "--temperature", "0")
	require.NoError(t, err)
	var res struct {
		Text string `json:"text"`
	}
	require.NoError(t, json.Unmarshal([]byte(js), &res))
	plain, err := sample(lm, "--bytes", "5", "--temperature", "0")
	require.NoError(t, err)
	text := strings.TrimSuffix(strings.TrimPrefix(plain, "package "), "\n") // the default prompt
	require.Len(t, text, 5)
	enc, err := json.Marshal(text) // bytes that are not UTF-8 become U+FFFD
	require.NoError(t, err)
	var want string
	require.NoError(t, json.Unmarshal(enc, &want))
	require.Equal(t, want, res.Text)

	out, err := sample(lm, "--temperature", "-1")
	require.ErrorContains(t, err, "temperature -1")
	require.Empty(t, out, "nothing written before the error")
	_, err = sample(lm, "--bytes", "-2")
	require.ErrorContains(t, err, "--bytes must be ≥ 0")
	_, err = sample(lm, "--bytes", "99999999999", "--json")
	require.ErrorContains(t, err, "--bytes 99999999999 with --json: at most 16777216")
	_, err = sample(lm, "--temperature", "0", "--top-k", "5")
	require.ErrorContains(t, err, "--top-k 5 draws among the likeliest bytes, --temperature 0 always takes the likeliest")
	_, err = sample(lm, "--workers", "-1")
	require.ErrorContains(t, err, "--workers must be ≥ 0, got -1")
	cmd := newEvalCmd()
	cmd.SetArgs([]string{lm, "--workers", "-1"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	require.ErrorContains(t, cmd.Execute(), "--workers must be ≥ 0, got -1", "eval too")
	mlp, err := runtime.InitWeights("mlp", 7)
	require.NoError(t, err)
	cls := filepath.Join(dir, "mlp.safetensors")
	require.NoError(t, runtime.WriteCheckpoint(cls, runtime.Checkpoint{Model: "mlp", Optimizer: "sgd", Seed: 7, Weights: mlp}))
	_, err = sample(cls)
	require.ErrorContains(t, err, "mlp.safetensors: runtime: model mlp is not a language model")
	_, err = sample()
	require.ErrorContains(t, err, "give a checkpoint file of a language model")
	// A checkpoint whose model is no model of the zoo says what is wrong
	// with it, in sample and in train --resume alike.
	odd := filepath.Join(dir, "odd.safetensors")
	require.NoError(t, runtime.WriteCheckpoint(odd, runtime.Checkpoint{Model: model + ",colour=2", Optimizer: "sgd", Seed: 7, Weights: w}))
	_, err = sample(odd)
	require.ErrorContains(t, err, `odd.safetensors: zoo: `+model+`,colour=2: unknown size option "colour"`)
	cmd = newTrainCmd()
	cmd.SetArgs([]string{"--resume", odd})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	require.ErrorContains(t, cmd.Execute(), "--resume "+odd+": the checkpoint's model: zoo: "+model+`,colour=2: unknown size option "colour"`)
}

// Another process's request (Ask) takes the first step of an interrupt,
// once: with a graceful stop, the process's own first interrupt then
// takes no step and its second cancels; without, the request cancels.
func TestInterruptAsked(t *testing.T) {
	within := func(c <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s", what)
		}
	}
	for _, graceful := range []bool{true, false} {
		t.Run(fmt.Sprint(graceful), func(t *testing.T) {
			h := &interruptHandler{stop: make(chan struct{}), asked: make(chan string, 1)}
			if graceful {
				h.Graceful("stopping after the step in flight")
			}
			signals := make(chan os.Signal)
			cancelled := make(chan struct{})
			go h.handle(signals, func() { close(cancelled) })
			h.Ask("rank 1 was interrupted")
			if !graceful {
				within(cancelled, "cancel")
				return
			}
			within(h.stop, "graceful stop")
			h.Ask("rank 2 was interrupted")
			signals <- os.Interrupt
			select {
			case <-cancelled:
				t.Fatal("the first interrupt of its own cancelled, a request having begun the graceful stop")
			case <-time.After(100 * time.Millisecond):
			}
			signals <- os.Interrupt
			within(cancelled, "cancel at the second interrupt")
		})
	}
}
