package main

import (
	"context"
	"fmt"
	"os"
	goruntime "runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"gonum.org/v1/gonum/stat"

	"github.com/flowkit/flowkit/internal/cliargs"
	"github.com/flowkit/flowkit/runtime"
	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
)

// cmdEcho asks a worker to send back the next Count messages of run Run.
const cmdEcho = "echo"

type workerEcho struct{ Run, Count int }

type linkFlags struct {
	procs procFlags
	sizes []string
	reps  int
	out   string
	json  bool
}

func newCalibrateLinkCmd() *cobra.Command {
	var f linkFlags
	cmd := &cobra.Command{
		Use:   "link",
		Short: "Measure the transport between processes and write a cluster file of them",
		Long: `Measure how long a message takes from one process of a multi-process run to
another, over the run's own transport (gRPC streams): rank 0 sends messages
of each --sizes to rank 1, which sends each back, and half the median round
trip is the one-way time. A line through the sizes, fitted by least relative
squares, gives the latency (its intercept) and the bandwidth (one over its
slope), which -o
writes as the fabric of a cluster file whose nodes are the processes, each a
CPU device with an equal share of this machine's cores. Plans compiled for
that cluster ('flowsim plan --cluster FILE') are predicted with the
transport's cost ('flowrun exec --procs N --compare --cluster FILE').

With --procs N (default 2) the workers are started here, on loopback; under
a launcher (WORLD_SIZE set, --procs 1) ranks 0 and 1 are measured wherever
they run.`,
		Example: `  flowrun calibrate link -o procs2.yaml
  flowsim plan --model mnist-cnn --cluster procs2.yaml --strategy dp=2 -o plan.json
  flowrun exec plan.json --procs 2 --compare --cluster procs2.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runCalibrateLink(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	f.procs.register(fl, 2)
	_ = fl.MarkHidden("ranks") // there is no plan to place: refused if given
	fl.StringSliceVar(&f.sizes, "sizes", []string{"4KiB", "64KiB", "256KiB", "1MiB", "4MiB", "16MiB"}, "message sizes measured (multiples of 4 bytes)")
	fl.IntVar(&f.reps, "reps", 20, "round trips per size (after 2 untimed; at least 3)")
	fl.StringVarP(&f.out, "output", "o", "", "write a cluster file of the processes, with the measured fabric, here")
	fl.BoolVar(&f.json, "json", false, "print the measurements as JSON")
	return cmd
}

// linkFit is a measured transport: one-way time = Latency + bytes/Bandwidth.
type linkFit struct {
	Latency   time.Duration `json:"latency_ns"`
	Bandwidth float64       `json:"bandwidth_bytes_per_s"`
	Sizes     []int64       `json:"sizes_bytes"`
	OneWay    []float64     `json:"one_way_s"` // median, by size
	Fitted    []float64     `json:"fitted_s"`
}

// maxLinkMessage is the largest message calibrate link sends: each rank
// holds it (and rank 0 its echo) in memory, and gRPC caps a message at
// 2 GiB.
const maxLinkMessage = 1 << 30

func runCalibrateLink(ctx context.Context, f linkFlags) error {
	if err := cliargs.Output("-o", f.out); err != nil {
		return err
	}
	if f.reps < 3 {
		return fmt.Errorf("--reps must be ≥ 3, got %d", f.reps)
	}
	if f.procs.ranks != "" {
		return fmt.Errorf("--ranks %q: calibrate link measures ranks 0 and 1 and places no plan's devices", f.procs.ranks)
	}
	if err := f.procs.check(); err != nil {
		return err
	}
	var sizes []int64
	for _, s := range f.sizes {
		b, err := topology.ParseBytes(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("--sizes %q: %w", s, err)
		}
		if b < 4 || b%4 != 0 || b > maxLinkMessage {
			return fmt.Errorf("--sizes %q: want a positive multiple of 4 bytes, up to %v", s, units.Bytes(maxLinkMessage))
		}
		sizes = append(sizes, int64(b))
	}
	if len(sizes) < 2 {
		return fmt.Errorf("--sizes: give at least two sizes to fit a line through")
	}
	pg, err := startGroup(ctx, f.procs, func(world int) error {
		if world < 2 {
			return fmt.Errorf("measuring a link needs 2 processes or more, got %d", world)
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer pg.Close()
	fit, err := pg.measureLink(ctx, sizes, f.reps)
	if err != nil {
		return pg.why(err)
	}
	if f.out != "" {
		if err := writeProcsCluster(f.out, pg.g.World(), fit); err != nil {
			return err
		}
	}
	if f.json {
		return printJSON(fit)
	}
	fmt.Printf("rank 0 → rank 1 over gRPC: latency %v, bandwidth %.0f MB/s\n", fit.Latency.Round(100*time.Nanosecond), fit.Bandwidth/1e6)
	fmt.Printf("%10s %14s %14s %8s\n", "size", "one way", "fitted", "error")
	for i, s := range fit.Sizes {
		fmt.Printf("%10d %12.1fµs %12.1fµs %+7.1f%%\n", s, 1e6*fit.OneWay[i], 1e6*fit.Fitted[i], 100*(fit.Fitted[i]-fit.OneWay[i])/fit.OneWay[i])
	}
	if f.out != "" {
		fmt.Printf("wrote %s\n", f.out)
	}
	return nil
}

// measureLink times round trips of each size between ranks 0 and 1 and
// fits one-way time = latency + bytes/bandwidth.
func (pg *procGroup) measureLink(ctx context.Context, sizes []int64, reps int) (*linkFit, error) {
	link := pg.g.Link()
	fit := &linkFit{Sizes: sizes}
	for run, size := range sizes {
		n := reps + 2
		b, err := encodeGob(workerEcho{Run: run, Count: n})
		if err != nil {
			return nil, err
		}
		if err := pg.g.Broadcast(cmdEcho, b); err != nil { // rank 1 echoes, others just reply
			return nil, err
		}
		inbox := link.Inbox(run)
		m := &runtime.Message{Run: run, Kind: runtime.MsgData, F: make([]float32, size/4)}
		var rtt []float64
		for i := range n {
			start := time.Now()
			if err := link.Send(1, m); err != nil {
				return nil, err
			}
			select {
			case _, ok := <-inbox:
				if !ok {
					return nil, fmt.Errorf("rank 1: %w", link.Err())
				}
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if i >= 2 {
				rtt = append(rtt, time.Since(start).Seconds())
			}
		}
		link.Forget(run)
		if _, err := pg.gather(ctx, cmdEcho); err != nil {
			return nil, err
		}
		slices.Sort(rtt)
		fit.OneWay = append(fit.OneWay, stat.Quantile(0.5, stat.Empirical, rtt, nil)/2)
	}
	x := make([]float64, len(sizes))
	for i, s := range sizes {
		x[i] = float64(s)
	}
	// Weighted by 1/t², the fit minimizes relative errors: the latency is
	// not lost in the large messages' milliseconds.
	w := make([]float64, len(sizes))
	for i, t := range fit.OneWay {
		w[i] = 1 / (t * t)
	}
	alpha, beta := stat.LinearRegression(x, fit.OneWay, w, false)
	if beta <= 0 {
		return nil, fmt.Errorf("the one-way times %v do not grow with the size: no bandwidth to fit (try larger --sizes)", fit.OneWay)
	}
	fit.Latency = time.Duration(max(alpha, 0) * 1e9)
	fit.Bandwidth = 1 / beta
	for _, v := range x {
		fit.Fitted = append(fit.Fitted, fit.Latency.Seconds()+v/fit.Bandwidth)
	}
	return fit, nil
}

// writeProcsCluster writes a cluster of world nodes, each a CPU device with
// an equal share of this machine's cores, joined by the measured fabric,
// and checks that it loads.
func writeProcsCluster(path string, world int, fit *linkFit) error {
	cores := max(goruntime.NumCPU()/world, 1)
	host, _ := os.Hostname()
	var b strings.Builder
	fmt.Fprintf(&b, "name: procs%d\n", world)
	fmt.Fprintf(&b, "description: \"%s as %d processes of %d core(s) each (flowrun exec --procs %d), talking gRPC\"\n", host, world, cores, world)
	fmt.Fprintf(&b, "source: \"the fabric: flowrun calibrate link, %s: %.1f µs latency, %.0f MB/s\"\n",
		time.Now().UTC().Format("2006-01-02"), float64(fit.Latency)/1e3, fit.Bandwidth/1e6)
	fmt.Fprintf(&b, `nodes:
  - name: proc
    count: %d
    devices:
      - {name: cpu, type: cpu, cores: %d, memory: auto}
    switches:
      - {name: nic, kind: nic}
    links:
      - {from: cpu, to: nic, kind: membus}
`, world, cores)
	// The fabric's two hops (node to switch, switch to node) each carry
	// half the latency.
	fmt.Fprintf(&b, "fabric: {kind: ethernet, ports: nic, bandwidth: %.0fB/s, latency: %dns, efficiency: 1}\n",
		fit.Bandwidth, (fit.Latency / 2).Nanoseconds())
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return err
	}
	if _, err := topology.Load(path); err != nil {
		return fmt.Errorf("the cluster file written: %w", err)
	}
	return nil
}
