//go:build unix

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/runtime"
)

// Interrupted, a run with --save finishes its step, writes the checkpoint,
// says so and how to go on, and exits non-zero.
func TestTrainInterrupt(t *testing.T) {
	ckpt := filepath.Join(t.TempDir(), "c.safetensors")
	out, step := interruptTrain(t, ckpt, func(cmd *exec.Cmd) error { return cmd.Process.Signal(os.Interrupt) },
		"--model", "mlp", "--epochs", "20", "--save-every", "5", "--workers", "1")
	require.Contains(t, out, "interrupt: stopping after the step in flight to write "+ckpt)
	// The interrupt may land before step 6 begins: the run then stops at
	// step 5, its checkpoint already written.
	require.GreaterOrEqual(t, step, 5)
}

// Interrupted as a terminal interrupts (SIGINT to its whole process
// group), a training run over two processes has both finish the same
// steps, writes the checkpoint and exits non-zero naming it: the worker
// it started, in a group of its own, never sees the interrupt. The run
// stops within the Run call of --save-every steps in flight, well before
// its end.
func TestTrainProcsInterrupt(t *testing.T) {
	for _, every := range []int{5, 100} {
		t.Run(strconv.Itoa(every), func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "c.safetensors")
			out, step := interruptTrain(t, ckpt, func(cmd *exec.Cmd) error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) },
				"--model", "mlp", "--strategy", "dp=2", "--procs", "2", "--epochs", "20", "--save-every", strconv.Itoa(every), "--workers", "1")
			require.Contains(t, out, "interrupt: stopping every process after the steps in flight to write "+ckpt)
			require.NotContains(t, out, "[rank 1] flowrun: interrupt", "the worker is out of the terminal's reach")
			require.Greater(t, step, every, "stopped in the Run call after the first checkpoint's")
			if every > 5 {
				require.Less(t, step, 2*every, "stopped within the Run call, not at its end")
			}
		})
	}
}

// interruptTrain runs 'flowrun train --save ckpt args…' (the test binary
// serving as flowrun) in a process group of its own, as a terminal's
// foreground job, interrupts it once it has written a checkpoint, and
// checks that it exits 1 naming the checkpoint, which holds every weight
// of the steps it names. It returns its stderr and that step.
func interruptTrain(t *testing.T, ckpt string, interrupt func(*exec.Cmd) error, args ...string) (out string, step int) {
	t.Helper()
	cmd := asFlowrun(append([]string{"train", "--save", ckpt}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var said bytes.Buffer
	lines := bufio.NewScanner(io.TeeReader(stderr, &said))
	lines.Split(scanCRLF)
	for lines.Scan() {
		if strings.HasPrefix(lines.Text(), "wrote checkpoint") { // training is under way
			require.NoError(t, interrupt(cmd))
			break
		}
	}
	_, _ = io.Copy(io.Discard, io.TeeReader(stderr, &said))
	out = said.String()
	requireExit1(t, cmd.Wait(), out)
	m := regexp.MustCompile(`training stopped after (\d+) of 18740 steps\n` + regexp.QuoteMeta(ckpt) + ` holds the weights after step (\d+): go on with --resume ` + regexp.QuoteMeta(ckpt)).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	require.Equal(t, m[1], m[2])
	c, err := runtime.ReadCheckpoint(ckpt)
	require.NoError(t, err)
	require.Equal(t, m[1], strconv.Itoa(c.Step))
	require.NoError(t, runtime.CheckWeights("mlp", c.Weights))
	return out, c.Step
}

// Interrupted (SIGTERM), flowrun sample stops between two bytes, ends
// its line and exits 1 saying how far it got, however many bytes it was
// asked for.
func TestSampleInterrupt(t *testing.T) {
	const model = "gpt:layers=1,hidden=32,heads=2,seq=16,vocab=256"
	w, err := runtime.InitWeights(model, 7)
	require.NoError(t, err)
	lm := filepath.Join(t.TempDir(), "lm.safetensors")
	require.NoError(t, runtime.WriteCheckpoint(lm, runtime.Checkpoint{Model: model, Optimizer: "sgd", Seed: 7, Weights: w}))
	cmd := asFlowrun("sample", lm, "--prompt", "x", "--bytes", "99999999999", "--workers", "1")
	stdout, stderr := startPiped(t, cmd, true)
	first := make([]byte, 10) // the prompt and some text: sampling is under way
	_, err = io.ReadFull(stdout, first)
	require.NoError(t, err)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	rest, err := io.ReadAll(stdout)
	require.NoError(t, err)
	requireExit1(t, cmd.Wait(), stderr.String())
	m := regexp.MustCompile(`flowrun: interrupted after (\d+) of 99999999999 bytes\n$`).FindStringSubmatch(stderr.String())
	require.NotNil(t, m, stderr.String())
	text := append(first, rest...)
	require.Equal(t, m[1], strconv.Itoa(len(text)-len("x")-len("\n")), "the prompt, the bytes drawn and a newline")
	require.Equal(t, byte('\n'), text[len(text)-1])
}

// Interrupted, flowrun exec reports the median of the runs it finished
// and exits 1 saying so (it printed only "context canceled").
func TestExecInterrupt(t *testing.T) {
	plan := writeCPUPlan(t, "mlp", "single", 8, 1)
	cmd := asFlowrun("exec", plan, "--iters", "3", "--warmup", "1", "--runs", "100000")
	stderr, stdout := startPiped(t, cmd, false)
	var said bytes.Buffer
	lines := bufio.NewScanner(io.TeeReader(stderr, &said))
	for lines.Scan() {
		if strings.HasPrefix(lines.Text(), "run 3:") {
			require.NoError(t, cmd.Process.Signal(os.Interrupt))
			break
		}
	}
	_, _ = io.Copy(io.Discard, io.TeeReader(stderr, &said))
	requireExit1(t, cmd.Wait(), said.String())
	m := regexp.MustCompile(`flowrun: interrupted after (\d+) of 100000 runs: their median reported`).FindStringSubmatch(said.String())
	require.NotNil(t, m, said.String())
	require.Regexp(t, `^mlp single batch 8 on 1 device\(s\): step [0-9.]+ ms \(median of `+m[1]+`\)`, stdout.String())
}

// asFlowrun is a command running this test binary as flowrun with args.
func asFlowrun(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "FLOWRUN_TEST_AS_MAIN=1")
	return cmd
}

// requireExit1 checks that a flowrun process ended (err, from Wait) with
// status 1, as a command stopped by an interrupt does; out is what it
// said.
func requireExit1(t *testing.T, err error, out string) {
	t.Helper()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "stderr:\n%s", out)
	require.Equal(t, 1, exit.ExitCode(), out)
}

// scanCRLF splits at newlines and at the carriage returns a progress bar
// redraws its line with.
func scanCRLF(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// A worker started by a launcher that alone is interrupted (a scheduler
// evicting its pod) asks rank 0 to stop as at its own interrupt: every
// rank finishes the same steps, rank 0 writes the checkpoint and exits
// naming it, and the worker exits cleanly, within the Run call of
// --save-every steps in flight. (Before, the worker ignored the interrupt
// and the run went on: the hang guard kills rank 0 after a minute.)
func TestTrainLaunchedWorkerInterrupt(t *testing.T) {
	port, err := freePort()
	require.NoError(t, err)
	for k, v := range map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": strconv.Itoa(port), "FLOWRUN_TOKEN": "launched"} {
		t.Setenv(k, v)
	}
	worker := exec.Command(os.Args[0], "worker")
	worker.Env = append(os.Environ(), "FLOWRUN_TEST_AS_MAIN=1", "RANK=1")
	var said bytes.Buffer
	worker.Stdout, worker.Stderr = &said, &said
	require.NoError(t, worker.Start())
	exited := make(chan error, 1)
	go func() { exited <- worker.Wait() }()
	t.Cleanup(func() {
		worker.Process.Kill()
		<-exited
	})
	ckpt := filepath.Join(t.TempDir(), "c.safetensors")
	const every = 100
	out, step := interruptTrain(t, ckpt, func(rank0 *exec.Cmd) error {
		time.AfterFunc(time.Minute, func() { rank0.Process.Kill() })
		return worker.Process.Signal(syscall.SIGTERM)
	}, "--model", "mlp", "--strategy", "dp=2", "--epochs", "20", "--save-every", strconv.Itoa(every), "--workers", "1")
	require.Contains(t, out, "rank 1 was interrupted: stopping every process after the steps in flight to write "+ckpt)
	require.Greater(t, step, every, "stopped in the Run call after the first checkpoint's")
	require.Less(t, step, 2*every, "stopped within the Run call, not at its end")
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		require.NoError(t, err, "the worker exits cleanly:\n%s", said.String())
	case <-time.After(30 * time.Second):
		t.Fatal("the worker goes on after rank 0 ended the run")
	}
	require.Contains(t, said.String(), "terminated: asking rank 0 to stop the run on every rank")
	require.Contains(t, said.String(), fmt.Sprintf("flowrun: rank 1 of 2: joining the coordinator at 127.0.0.1:%d (for up to ", port), "a launcher's rank says where it waits")
}

// startPiped starts cmd with one of its outputs piped, to be read as it
// runs (its stdout if stdout, else its stderr), and the other gathered
// in a buffer.
func startPiped(t *testing.T, cmd *exec.Cmd, stdout bool) (io.Reader, *bytes.Buffer) {
	t.Helper()
	other := new(bytes.Buffer)
	var pipe io.Reader
	var err error
	if stdout {
		cmd.Stderr = other
		pipe, err = cmd.StdoutPipe()
	} else {
		cmd.Stdout = other
		pipe, err = cmd.StderrPipe()
	}
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	return pipe, other
}
