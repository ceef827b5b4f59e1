// Command fakecuda runs a command against flowkit's fake CUDA driver
// (internal/cudafake), on a machine without a GPU: it builds the fake
// libcuda, cuBLAS and cuBLASLt and runs the command with the environment
// that makes it load them. With -kernels emu the kernels of kernels/cuda
// run on the host's emulator (slow, but every number is computed); with
// -kernels noop they launch and compute nothing (fast: for scripts and
// control flow). For example, a dry run of the GPU check:
//
//	bash bench/gpu/build.sh
//	go run ./internal/cudafake/fakecuda -kernels noop -- env OUT=/tmp/dry bash .gpu/device.sh
//
// or a few training steps through the GPU runtime with the real kernels:
//
//	go run ./internal/cudafake/fakecuda -- go run ./cmd/flowrun train --device cuda --max-steps 20
//
// With -streams async, streams run their work only when the host waits for
// it, newest first, so that a missing event wait shows (see the fake
// driver's "Asynchronous streams").
//
// It needs cc, c++ and the CUDA headers (see cudafake.BuildDir).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/flowkit/flowkit/internal/cudafake"
)

func main() {
	kernels := flag.String("kernels", "emu", "emu: kernels/cuda's kernels on the host emulator; noop: launches that compute nothing")
	src := flag.String("src", "", "the kernel sources for -kernels emu (default: kernels/cuda of the module this runs in)")
	streams := flag.String("streams", "sync", "sync: work runs when enqueued; async: when the host waits for it, newest first; async-oldest: oldest first")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: fakecuda [-kernels emu|noop] [-streams sync|async|async-oldest] [-src DIR] -- command [args...]\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	switch *streams {
	case "sync", "async", "async-oldest":
	default:
		fmt.Fprintf(os.Stderr, "fakecuda: -streams %q: want sync, async or async-oldest\n", *streams)
		os.Exit(2)
	}
	if err := run(*kernels, *src, *streams, flag.Args()); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			os.Exit(exit.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "fakecuda:", err)
		os.Exit(1)
	}
}

func run(kernels, src, streams string, argv []string) error {
	var opt cudafake.Option
	switch kernels {
	case "noop":
		opt = cudafake.NoopKernels
	case "emu":
		if src == "" {
			root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
			if err != nil {
				return fmt.Errorf("finding kernels/cuda (run inside the flowkit module, or give -src): %v", err)
			}
			src = filepath.Join(string(root[:len(root)-1]), "kernels", "cuda")
		}
		opt = cudafake.EmulatedKernels(src)
	default:
		return fmt.Errorf("-kernels %q: want emu or noop", kernels)
	}
	dir, err := os.MkdirTemp("", "fakecuda-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	env, err := cudafake.BuildDir(dir, opt)
	if err != nil {
		return err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), env...), "FLOWKIT_FAKE_CUDA_STREAMS="+streams)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	return cmd.Run()
}
