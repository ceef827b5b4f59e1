package main

import (
	"context"
	"fmt"
	"math"
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

// cmdEcho asks rank 1 to send back the next Count messages of run Run, or
// with Exchange to send rank 0 a message of Size bytes as it sends one, Count
// times, each after it has received rank 0's.
const cmdEcho = "echo"

type workerEcho struct {
	Run, Count int
	Exchange   bool
	Size       int64
}

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
slope). Then both ranks send each other messages of each size at once, as a
ring of two does at every step; the pace of these exchanges gives a second
line, and its bandwidth beside the one-way one how much of a second
direction the transport carries beside a first (its duplex: 1 where both
directions go as fast as one, 0 where they share one direction's bandwidth,
as when the processes' CPUs, which encrypt and copy what they send and what
they receive, are the transport's bottleneck). -o writes them as the fabric
of a cluster file whose nodes are the processes, each a CPU device with an
equal share of this machine's cores. Plans compiled for
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

// linkFit is a measured transport: one-way time = Latency + bytes/Bandwidth,
// and the time of an exchange, both ranks sending a message of the same
// size to each other at once, ExchangeLatency + bytes/ExchangeBandwidth.
type linkFit struct {
	Latency   time.Duration `json:"latency_ns"`
	Bandwidth float64       `json:"bandwidth_bytes_per_s"`
	Sizes     []int64       `json:"sizes_bytes"`
	OneWay    []float64     `json:"one_way_s"` // median, by size
	Fitted    []float64     `json:"fitted_s"`
	// A two-member ring's steps are exchanges: where the transport's cost
	// is the endpoints' CPUs, which carry both directions, an exchange
	// takes longer than one way.
	ExchangeLatency   time.Duration `json:"exchange_latency_ns"`
	ExchangeBandwidth float64       `json:"exchange_bandwidth_bytes_per_s"`
	Exchange          []float64     `json:"exchange_s"` // median, by size
	ExchangeFitted    []float64     `json:"exchange_fitted_s"`
	// Duplex is the share of a second direction the transport carries
	// beside a first (topology.Link.Duplex), from the bandwidths: an
	// exchange moves 2·ExchangeBandwidth, (1 + Duplex)·Bandwidth.
	Duplex float64 `json:"duplex"`
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
	if slices.Sort(sizes); len(slices.Compact(slices.Clone(sizes))) < 2 {
		return fmt.Errorf("--sizes: give at least two different sizes to fit a line through")
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
	fmt.Printf("an exchange (both ways at once): latency %v, bandwidth %.0f MB/s each way: duplex %.2f\n", fit.ExchangeLatency.Round(100*time.Nanosecond), fit.ExchangeBandwidth/1e6, fit.Duplex)
	fmt.Printf("%10s %14s %14s %8s %14s %14s %8s\n", "size", "one way", "fitted", "error", "exchange", "fitted", "error")
	for i, s := range fit.Sizes {
		fmt.Printf("%10d %12.1fµs %12.1fµs %+7.1f%% %12.1fµs %12.1fµs %+7.1f%%\n", s,
			1e6*fit.OneWay[i], 1e6*fit.Fitted[i], 100*(fit.Fitted[i]-fit.OneWay[i])/fit.OneWay[i],
			1e6*fit.Exchange[i], 1e6*fit.ExchangeFitted[i], 100*(fit.ExchangeFitted[i]-fit.Exchange[i])/fit.Exchange[i])
	}
	if f.out != "" {
		fmt.Printf("wrote %s\n", f.out)
	}
	return nil
}

// measureLink times round trips and exchanges of each size between ranks
// 0 and 1 and fits a line through each.
func (pg *procGroup) measureLink(ctx context.Context, sizes []int64, reps int) (*linkFit, error) {
	fit := &linkFit{Sizes: sizes}
	for i, size := range sizes {
		rtt, err := pg.linkRuns(ctx, 2*i, size, reps, false)
		if err != nil {
			return nil, err
		}
		fit.OneWay = append(fit.OneWay, rtt/2)
		x, err := pg.linkRuns(ctx, 2*i+1, size, reps, true)
		if err != nil {
			return nil, err
		}
		fit.Exchange = append(fit.Exchange, x)
	}
	var err error
	if fit.Latency, fit.Bandwidth, fit.Fitted, err = fitLink(sizes, fit.OneWay); err != nil {
		return nil, fmt.Errorf("the one-way times %v %w", fit.OneWay, err)
	}
	if fit.ExchangeLatency, fit.ExchangeBandwidth, fit.ExchangeFitted, err = fitLink(sizes, fit.Exchange); err != nil {
		return nil, fmt.Errorf("the exchange times %v %w", fit.Exchange, err)
	}
	fit.Duplex = math.Round(100*min(max(2*fit.ExchangeBandwidth/fit.Bandwidth-1, 0), 1)) / 100
	return fit, nil
}

// linkRuns returns the median time, in seconds, of reps round trips of a
// message of size bytes from rank 0 to rank 1 and back (after 2 untimed),
// or with exchange the mean time of reps exchanges: rank 0 and rank 1 each
// sending the other such a message, and receiving the other's.
func (pg *procGroup) linkRuns(ctx context.Context, run int, size int64, reps int, exchange bool) (float64, error) {
	link := pg.g.Link()
	n := reps + 2
	b, err := encodeGob(workerEcho{Run: run, Count: n, Exchange: exchange, Size: size})
	if err != nil {
		return 0, err
	}
	if err := pg.g.Broadcast(cmdEcho, b); err != nil { // rank 1 echoes, others just reply
		return 0, err
	}
	inbox := link.Inbox(run)
	m := &runtime.Message{Run: run, Kind: runtime.MsgData, F: make([]float32, size/4)}
	// A round trip is timed from the send to the echo's arrival. Rank 1
	// sends its part of an exchange before it receives rank 0's, so its
	// message may be waiting when rank 0 looks, and arrivals come unevenly:
	// the exchanges are timed together, from the arrival of the last
	// untimed one to the last, the pace at which both directions go.
	var times []float64
	var first time.Time
	for i := range n {
		start := time.Now()
		if err := link.Send(1, m); err != nil {
			return 0, err
		}
		select {
		case _, ok := <-inbox:
			if !ok {
				return 0, fmt.Errorf("rank 1: %w", link.Err())
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		switch {
		case i == 1:
			first = time.Now()
		case i >= 2 && !exchange:
			times = append(times, time.Since(start).Seconds())
		}
	}
	if exchange {
		times = []float64{time.Since(first).Seconds() / float64(reps)}
	}
	link.Forget(run)
	if _, err := pg.gather(ctx, cmdEcho); err != nil {
		return 0, err
	}
	slices.Sort(times)
	return stat.Quantile(0.5, stat.Empirical, times, nil), nil
}

// fitLink fits time = latency + bytes/bandwidth through the times by size,
// weighted by 1/t², which minimizes relative errors: the latency is not
// lost in the large messages' milliseconds.
func fitLink(sizes []int64, times []float64) (latency time.Duration, bandwidth float64, fitted []float64, err error) {
	x := make([]float64, len(sizes))
	for i, s := range sizes {
		x[i] = float64(s)
	}
	w := make([]float64, len(sizes))
	for i, t := range times {
		w[i] = 1 / (t * t)
	}
	alpha, beta := stat.LinearRegression(x, times, w, false)
	if !(beta > 0) || math.IsInf(beta, 0) || math.IsNaN(alpha) {
		return 0, 0, nil, fmt.Errorf("do not grow with the size: no bandwidth to fit (try larger --sizes)")
	}
	latency = time.Duration(max(alpha, 0) * 1e9)
	for _, v := range x {
		fitted = append(fitted, latency.Seconds()+v*beta)
	}
	return latency, 1 / beta, fitted, nil
}

// writeProcsCluster writes a cluster of world nodes, each a CPU device with
// an equal share of this machine's cores, joined by the measured fabric,
// having checked that it loads.
func writeProcsCluster(path string, world int, fit *linkFit) error {
	cores := max(goruntime.NumCPU()/world, 1)
	host, _ := os.Hostname()
	var b strings.Builder
	fmt.Fprintf(&b, "name: procs%d\n", world)
	fmt.Fprintf(&b, "description: \"%s as %d processes of %d core(s) each (flowrun exec --procs %d), talking gRPC\"\n", host, world, cores, world)
	fmt.Fprintf(&b, "source: \"the fabric: flowrun calibrate link, %s: %.1f µs latency, %.0f MB/s, %.0f MB/s each way when both are busy (duplex %.2f)\"\n",
		time.Now().UTC().Format("2006-01-02"), float64(fit.Latency)/1e3, fit.Bandwidth/1e6, fit.ExchangeBandwidth/1e6, fit.Duplex)
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
	fmt.Fprintf(&b, "fabric: {kind: ethernet, ports: nic, bandwidth: %.0fB/s, latency: %dns, efficiency: 1, duplex: %.2f}\n",
		fit.Bandwidth, (fit.Latency / 2).Nanoseconds(), fit.Duplex)
	if _, err := topology.Parse(path, []byte(b.String())); err != nil { // before it is written
		return fmt.Errorf("the cluster file to write: %w", err)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
