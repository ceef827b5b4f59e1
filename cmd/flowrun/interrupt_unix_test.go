//go:build unix

package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/runtime"
)

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
			cmd := exec.Command(os.Args[0], "train", "--model", "mlp", "--strategy", "dp=2", "--procs", "2", "--epochs", "20",
				"--save", ckpt, "--save-every", strconv.Itoa(every), "--workers", "1")
			cmd.Env = append(os.Environ(), "FLOWRUN_TEST_AS_MAIN=1")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a terminal's foreground group
			stderr, err := cmd.StderrPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			var said bytes.Buffer
			lines := bufio.NewScanner(io.TeeReader(stderr, &said))
			lines.Split(scanCRLF)
			for lines.Scan() {
				if strings.HasPrefix(lines.Text(), "wrote checkpoint") { // the first Run call has ended
					require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGINT))
					break
				}
			}
			_, _ = io.Copy(io.Discard, io.TeeReader(stderr, &said))
			err = cmd.Wait()
			out := said.String()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "stderr:\n%s", out)
			require.Equal(t, 1, exit.ExitCode(), out)
			require.Contains(t, out, "interrupt: stopping every process after the steps in flight to write "+ckpt)
			require.NotContains(t, out, "[rank 1] flowrun: interrupt", "the worker is out of the terminal's reach")
			m := regexp.MustCompile(`training stopped after (\d+) of 18740 steps\n` + regexp.QuoteMeta(ckpt) + ` holds the weights after step (\d+): go on with --resume ` + regexp.QuoteMeta(ckpt)).FindStringSubmatch(out)
			require.NotNil(t, m, out)
			require.Equal(t, m[1], m[2])
			c, err := runtime.ReadCheckpoint(ckpt)
			require.NoError(t, err)
			require.Equal(t, m[1], strconv.Itoa(c.Step))
			require.Greater(t, c.Step, every, "stopped in the Run call after the first checkpoint's")
			if every > 5 {
				require.Less(t, c.Step, 2*every, "stopped within the Run call, not at its end")
			}
			require.NoError(t, runtime.CheckWeights("mlp", c.Weights))
		})
	}
}
