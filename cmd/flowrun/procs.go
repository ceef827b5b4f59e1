package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/flowkit/flowkit/data"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/runtime"
	"github.com/flowkit/flowkit/runtime/remote"
)

// A multi-process run: rank 0 (flowrun exec) coordinates, ranks 1… are
// 'flowrun worker' processes, started by this process (--procs) or by a
// launcher that sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT as
// torchrun, Slurm or Kubernetes do.

// procFlags are the flags of a multi-process run.
type procFlags struct {
	procs     int
	ranks     string
	tokenFile string
}

// register adds the flags, --procs defaulting to procs.
func (f *procFlags) register(fl *pflag.FlagSet, procs int) {
	fl.IntVar(&f.procs, "procs", procs, "processes to run the plan in, on this host: this one and procs−1 'flowrun worker' processes it starts (over gRPC on loopback); 1 with WORLD_SIZE set: join a run started by a launcher as its rank 0")
	fl.StringVar(&f.ranks, "ranks", "", "in a multi-process run, the rank of each plan device, in plan order (e.g. 0,0,1,1); default: by host when the plan's devices span as many hosts as there are ranks, else in contiguous blocks")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding the run's shared secret (default: $FLOWRUN_TOKEN; --procs makes one)")
}

// check validates the flags: --ranks places devices on the ranks of a
// multi-process run, and means nothing to one process; --token-file is the
// secret of a launcher's run, where --procs makes its own.
func (f *procFlags) check() error {
	if f.procs < 1 {
		return fmt.Errorf("--procs must be ≥ 1, got %d", f.procs)
	}
	if f.ranks != "" && !f.multi() {
		return fmt.Errorf("--ranks %q: a run of one process has no ranks to place devices on (give --procs N, or WORLD_SIZE under a launcher)", f.ranks)
	}
	if f.procs > 1 && f.tokenFile != "" {
		return fmt.Errorf("--token-file %s: --procs %d makes the run's secret and gives it to the workers it starts; the file is for a run under a launcher (--procs 1, WORLD_SIZE set)", f.tokenFile, f.procs)
	}
	return nil
}

// multi says whether the flags and environment ask for several processes.
func (f *procFlags) multi() bool {
	return f.procs > 1 || (f.procs == 1 && os.Getenv("WORLD_SIZE") != "" && os.Getenv("WORLD_SIZE") != "1")
}

// readToken returns the run's shared secret: the file's first line, else
// $FLOWRUN_TOKEN.
func readToken(path string) (string, error) {
	if path == "" {
		if t := os.Getenv("FLOWRUN_TOKEN"); t != "" {
			return t, nil
		}
		return "", errors.New("no token: set FLOWRUN_TOKEN or give --token-file (every rank needs the same secret)")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	t, _, _ := strings.Cut(string(b), "\n")
	if t = strings.TrimSpace(t); t == "" {
		return "", fmt.Errorf("--token-file %s: empty", path)
	}
	return t, nil
}

// placeRanks returns the rank of each of p's devices: from spec (one rank
// per device), else by host when the devices span world hosts, else in
// contiguous blocks of devices.
func placeRanks(p *plans.Plan, spec string, world int) ([]int, error) {
	n := len(p.Devices)
	if world > n {
		return nil, fmt.Errorf("%d processes for a plan of %d devices: each process needs a device", world, n)
	}
	ranks := make([]int, n)
	if spec != "" {
		fields := strings.Split(spec, ",")
		if len(fields) != n {
			return nil, fmt.Errorf("--ranks %q: %d ranks for the plan's %d devices", spec, len(fields), n)
		}
		for d, s := range fields {
			k, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || k < 0 || k >= world {
				return nil, fmt.Errorf("--ranks %q: device %s: rank %q, want 0…%d", spec, p.Devices[d].Name, s, world-1)
			}
			ranks[d] = k
		}
		for k := range world {
			if !slices.Contains(ranks, k) {
				return nil, fmt.Errorf("--ranks %q: rank %d has none of the plan's %d devices", spec, k, n)
			}
		}
		return ranks, nil
	}
	var hosts []string
	for _, d := range p.Devices {
		if !slices.Contains(hosts, d.Host) {
			hosts = append(hosts, d.Host)
		}
	}
	for d, dev := range p.Devices {
		if len(hosts) == world {
			ranks[d] = slices.Index(hosts, dev.Host)
		} else {
			ranks[d] = d * world / n
		}
	}
	return ranks, nil
}

// The coordinator's commands to the workers, and their replies.
const (
	cmdSetup  = "setup"
	cmdRun    = "run"
	cmdStore  = "store"  // replica 0's weights on the worker's devices
	cmdResume = "resume" // a checkpoint to go on from (workerResume)
)

// workerSetup is what a worker needs to run its part: the plan, the ranks
// of its devices, and how to make inputs.
type workerSetup struct {
	Plan  []byte // plans.Encode
	Ranks []int
	Stall time.Duration
	Feed  feedSpec
}

// feedSpec says how every rank makes the same inputs: from MNIST's training
// set in MNIST (rank 0's folder; where a rank lacks it, its own copy as
// data.LocateMNIST finds one) if set, shuffled by the plan's seed as
// runtime.TrainOn does; from the training text of the files named *Ext
// under Text if set, as runtime.TrainTextOn does (every rank must read the
// same text: TextSum is rank 0's checksum of it); else synthetic samples
// (runtime.NewSyntheticFeeder(p.Images, Classes, Pool, p.Seed)).
type feedSpec struct {
	MNIST         string
	Text, Ext     string
	TextSum       uint64
	Classes, Pool int
}

// feeder makes the inputs of the spec for p.
func (s feedSpec) feeder(p *plans.Plan) (runtime.Feeder, error) {
	if s.Text != "" {
		train, _, err := data.LoadText(s.Text, s.Ext, textMaxFile)
		if err != nil {
			return nil, err
		}
		if sum := train.Sum(); sum != s.TextSum {
			return nil, fmt.Errorf("the training text of %s*%s here (%d bytes, checksum %016x) is not rank 0's (checksum %016x): every rank needs the same files", s.Text, s.Ext, len(train.Bytes), sum, s.TextSum)
		}
		return runtime.NewTextFeederFor(p.Model, train, p.Batch, p.Seed)
	}
	if s.MNIST == "" {
		return runtime.NewSyntheticFeeder(p.Images, s.Classes, s.Pool, p.Seed), nil
	}
	dir, err := data.LocateMNIST(s.MNIST)
	if err != nil {
		// Another host: its own copy ($FLOWKIT_MNIST, the module cache).
		var err2 error
		if dir, err2 = data.LocateMNIST(""); err2 != nil {
			return nil, err
		}
	}
	train, _, err := data.LoadMNIST(dir)
	if err != nil {
		return nil, err
	}
	return runtime.NewMNISTFeeder(train, p.Batch, p.Seed)
}

type workerRun struct{ Iters int }

// workerResume is a checkpoint, for every rank to load its parts of.
type workerResume struct {
	Model   string
	Seed    uint64
	Step    int
	Tensors []runtime.Tensor // whole
}

type workerReply struct {
	Err     string
	Part    *runtime.RankResult
	Tensors []runtime.Tensor // cmdStore
}

func encodeGob(v any) ([]byte, error) {
	var b bytes.Buffer
	err := gob.NewEncoder(&b).Encode(v)
	return b.Bytes(), err
}

func decodeGob(b []byte, v any) error { return gob.NewDecoder(bytes.NewReader(b)).Decode(v) }

// procGroup is rank 0's view of the processes of a run: the group, and the
// workers it started itself.
type procGroup struct {
	g        *remote.Group
	children []*child
	childErr chan error // a worker that exited early
}

// procRunner runs a plan over several processes from rank 0.
type procRunner struct {
	*runtime.PlanRunner // rank 0's devices
	*procGroup
	p     *plans.Plan
	ranks []int // by plan device
}

// child is a worker process this process started.
type child struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once it has exited
}

// newProcRunner starts (or, under a launcher, joins) the processes of a
// multi-process run of p and hands every worker its part. Close stops them.
func newProcRunner(ctx context.Context, p *plans.Plan, f procFlags, stall time.Duration, feed feedSpec) (_ *procRunner, err error) {
	var ranks []int
	pg, err := startGroup(ctx, f, func(world int) error {
		if ranks, err = placeRanks(p, f.ranks, world); err != nil {
			return err
		}
		return runtime.CheckRanks(p, ranks, world)
	})
	if err != nil {
		return nil, err
	}
	pr := &procRunner{procGroup: pg, p: p, ranks: ranks}
	defer func() {
		if err != nil {
			pr.Close()
		}
	}()
	if pr.PlanRunner, err = runtime.NewRankRunner(p, ranks, pr.g.Link()); err != nil {
		return nil, err
	}
	pr.Stall = stall
	pr.StopAsked = func(k int) { interrupts.Ask(fmt.Sprintf("rank %d was interrupted", k)) }
	var plan bytes.Buffer
	if err := plans.Encode(&plan, p); err != nil {
		return nil, err
	}
	setup, err := encodeGob(workerSetup{Plan: plan.Bytes(), Ranks: ranks, Stall: stall, Feed: feed})
	if err != nil {
		return nil, err
	}
	if _, err := pr.ask(ctx, cmdSetup, setup); err != nil {
		return nil, err
	}
	return pr, nil
}

// Close ends the run and releases rank 0's devices.
func (pr *procRunner) Close() error {
	err := pr.procGroup.Close()
	if pr.PlanRunner != nil {
		err = errors.Join(err, pr.PlanRunner.Close())
	}
	return err
}

// startGroup starts the workers of a run (--procs) or, under a launcher,
// waits for them, and returns once they have joined. check, called with the
// number of processes before any starts, vets what they will run.
func startGroup(ctx context.Context, f procFlags, check func(world int) error) (_ *procGroup, err error) {
	o := remote.Options{}
	var token string
	pg := &procGroup{childErr: make(chan error, max(f.procs, 1))}
	defer func() {
		if err != nil {
			pg.Close()
		}
	}()
	if f.procs > 1 {
		if token, err = newToken(); err != nil {
			return nil, err
		}
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		o = remote.Options{Rank: 0, World: f.procs, Master: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	} else {
		if o, err = remote.FromEnv(); err != nil {
			return nil, err
		}
		if o.Rank != 0 {
			return nil, fmt.Errorf("RANK=%d: this command is rank 0; start ranks 1… with 'flowrun worker'", o.Rank)
		}
		if token, err = readToken(f.tokenFile); err != nil {
			return nil, err
		}
	}
	o.Token = token
	if err := check(o.World); err != nil {
		return nil, err
	}
	if f.procs > 1 {
		if err := pg.startWorkers(o, token); err != nil {
			return nil, err
		}
	}
	if f.procs <= 1 { // ranks started by a launcher, which may take a while
		fmt.Fprintf(os.Stderr, "flowrun: rank 0 of %d: waiting at %s for the other ranks to join (for up to %v)\n", o.World, o.Master, cmp.Or(o.JoinTimeout, remote.DefaultJoinTimeout))
	}
	if pg.g, err = pg.coordinate(ctx, o); err != nil {
		return nil, err
	}
	return pg, nil
}

// coordinate waits for the workers to join, or for a started worker to
// fail first.
func (pr *procGroup) coordinate(ctx context.Context, o remote.Options) (*remote.Group, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case err := <-pr.childErr:
			cancel(err)
		case <-ctx.Done():
		}
	}()
	g, err := remote.Coordinate(ctx, o)
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
		return nil, cause
	}
	return g, err
}

// ask sends every worker a command and returns their replies (by rank;
// [0] is nil), or the first worker's error.
func (pr *procGroup) ask(ctx context.Context, kind string, payload []byte) ([]workerReply, error) {
	if err := pr.g.Broadcast(kind, payload); err != nil {
		return nil, err
	}
	return pr.gather(ctx, kind)
}

// gather returns the workers' replies to the last command, kind.
func (pr *procGroup) gather(ctx context.Context, kind string) ([]workerReply, error) {
	raw, err := pr.g.Gather(ctx)
	if err != nil {
		return nil, err
	}
	replies := make([]workerReply, len(raw))
	for k, b := range raw[1:] {
		if err := decodeGob(b, &replies[k+1]); err != nil {
			return nil, fmt.Errorf("rank %d: reply to %s: %w", k+1, kind, err)
		}
		if replies[k+1].Err != "" {
			return nil, fmt.Errorf("rank %d: %s", k+1, replies[k+1].Err)
		}
	}
	return replies, nil
}

// Run runs iters iterations on every rank and merges their traces.
func (pr *procRunner) Run(ctx context.Context, iters int, feed runtime.Feeder) (*runtime.RunResult, error) {
	b, err := encodeGob(workerRun{Iters: iters})
	if err != nil {
		return nil, err
	}
	var (
		wg    sync.WaitGroup
		local *runtime.RunResult
		lerr  error
	)
	wg.Go(func() { local, lerr = pr.PlanRunner.Run(ctx, iters, feed) })
	replies, err := pr.ask(ctx, cmdRun, b)
	wg.Wait()
	if lerr != nil {
		// Rank 0's own, or the error of the worker that failed (a
		// runtime.RankError), where another worker's reply would say
		// that that worker failed.
		err = lerr
	}
	if err != nil {
		return nil, pr.why(err)
	}
	parts := []*runtime.RankResult{local.Part}
	offsets := []time.Duration{0}
	for k, r := range replies[1:] {
		if r.Part == nil {
			return nil, fmt.Errorf("rank %d: no result", k+1)
		}
		off, _ := pr.g.Clock(k + 1)
		parts = append(parts, r.Part)
		offsets = append(offsets, off)
	}
	return runtime.MergeRanks(pr.p, parts, offsets)
}

// SetStop has the run stop, once stop closes, after the same whole
// iterations on every rank (rank 0's PlanRunner.Stop).
func (pr *procRunner) SetStop(stop <-chan struct{}) { pr.PlanRunner.Stop = stop }

var _ runtime.Stopper = (*procRunner)(nil)

// Resume loads checkpoint c on every rank: each its devices' parts of the
// weights and state, and the steps run.
func (pr *procRunner) Resume(c *runtime.Checkpoint) error {
	if err := pr.PlanRunner.Resume(c); err != nil {
		return err
	}
	b, err := encodeGob(workerResume{Model: c.Model, Seed: c.Seed, Step: c.Step, Tensors: c.Weights.Tensors()})
	if err != nil {
		return err
	}
	_, err = pr.ask(context.Background(), cmdResume, b)
	return pr.why(err)
}

// Store returns replica 0's weights, from every rank.
func (pr *procRunner) Store() (*runtime.Store, error) {
	s, err := pr.PlanRunner.Store()
	if err != nil {
		return nil, err
	}
	replies, err := pr.ask(context.Background(), cmdStore, nil)
	if err != nil {
		return nil, err
	}
	for _, r := range replies[1:] {
		if err := s.Put(r.Tensors...); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// why adds to a run's error the exit of a worker this process started, if
// one exited (a worker that dies is why the others lost it).
func (pr *procGroup) why(err error) error {
	if len(pr.children) == 0 {
		return err
	}
	select {
	case exit := <-pr.childErr:
		return fmt.Errorf("%w (%v)", err, exit)
	case <-time.After(time.Second):
		return err
	}
}

// Close ends the run: the workers exit, and those this process started are
// waited for.
func (pr *procGroup) Close() error {
	var err error
	if pr.g != nil {
		err = pr.g.Close()
	}
	for _, c := range pr.children {
		select {
		case <-c.exited:
		case <-time.After(5 * time.Second):
			c.cmd.Process.Kill()
			<-c.exited
		}
	}
	pr.children = nil
	return err
}

// startWorkers starts ranks 1… of o as 'flowrun worker' processes of this
// executable, their output prefixed with their rank.
func (pr *procGroup) startWorkers(o remote.Options, token string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("starting workers: %w", err)
	}
	host, port, _ := net.SplitHostPort(o.Master)
	for k := 1; k < o.World; k++ {
		c := exec.Command(exe, "worker", "--"+procsFlag)
		c.Env = append(os.Environ(), "RANK="+strconv.Itoa(k), "WORLD_SIZE="+strconv.Itoa(o.World),
			"MASTER_ADDR="+host, "MASTER_PORT="+port, "FLOWRUN_TOKEN="+token)
		w := &prefixWriter{prefix: fmt.Sprintf("[rank %d] ", k), w: os.Stderr}
		c.Stdout, c.Stderr = w, w
		ownGroup(c)
		if err := c.Start(); err != nil {
			return fmt.Errorf("starting rank %d: %w", k, err)
		}
		ch := &child{cmd: c, exited: make(chan struct{})}
		pr.children = append(pr.children, ch)
		go func() {
			defer close(ch.exited)
			if err := c.Wait(); err != nil {
				pr.childErr <- fmt.Errorf("rank %d (pid %d) exited: %w", k, c.Process.Pid, err)
			}
		}()
	}
	return nil
}

// prefixWriter writes each line with a prefix.
type prefixWriter struct {
	mu      sync.Mutex
	prefix  string
	w       io.Writer
	partial []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partial = append(p.partial, b...)
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		if _, err := fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.partial[:i]); err != nil {
			return 0, err
		}
		p.partial = p.partial[i+1:]
	}
}

func newToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// freePort returns a TCP port of loopback that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
