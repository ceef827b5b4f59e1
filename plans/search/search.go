// Package search chooses among plans by simulating them.
//
// It resolves the parts of a strategy left to it: mb=auto, how the batch's
// micro-batches (all of one size) are split over data-parallel replicas,
// and layers=auto, where a pipeline is cut. On unequal devices (a GPU and
// the host's CPU, or two GPU types) an even split leaves the fast devices
// waiting for the slow ones at every all-reduce, and a cut that balances
// FLOPs gives the slow device as much arithmetic as the fast one; the
// split that balances them depends on the model, the batch and the cost
// model (launches, transfers and all-reduces as much as arithmetic), which
// is why it is searched rather than derived from peak FLOP rates.
//
// Sweep ranks whole strategies (Strategies enumerates them: data and
// pipeline parallelism, micro-batching, schedules, recompute, and the
// searched splits) by simulated step time and memory, in shards that merge
// into the ranking of the whole (Rank).
package search

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/sim"
)

// MaxExhaustive is the number of candidates up to which a search simulates
// every one; above it, it searches locally from an even split.
const MaxExhaustive = 128

// Iterations simulated per candidate, and the first ones left out of its
// step time (the pipeline filling).
const (
	simIters  = 4
	simWarmup = 1
)

// Group is a set of replicas on the same device types (stage by stage):
// replicas that run equally fast, and so get equal shares.
type Group struct {
	Devices  string `json:"devices"` // the device types of a replica's stages, "+"-separated
	Replicas []int  `json:"replicas"`
}

// Candidate is one point of a search and what it was found to cost.
type Candidate struct {
	// Counts is the point: micro-batches per group of replicas (mb=auto)
	// or layers per stage (layers=auto).
	Counts   []int
	Strategy plans.Strategy // resolved: with Shares or Layers set
	Step     time.Duration  // simulated step time; 0 if Err
	Err      error          // why the candidate was rejected (e.g. a device's memory)
}

// Result is a resolved strategy.
type Result struct {
	Key    string      // what was searched: "mb" or "layers"
	Plan   *plans.Plan // the best candidate's plan
	Groups []Group     // for mb=auto: the groups Counts are per
	// Candidates are those simulated: the feasible ones fastest first
	// (ties in the order they were tried), then the rejected ones.
	Candidates []Candidate
	Exhaustive bool // every candidate was simulated, not a local search's path
}

// Best is the chosen candidate.
func (r *Result) Best() Candidate { return r.Candidates[0] }

// Options tune a search.
type Options struct {
	// Progress, if set, is called after each candidate is simulated (for
	// a Sweep, each strategy; one call at a time) with the number done and
	// the number to do (−1 for a local search, whose
	// length is not known ahead).
	Progress func(done, total int)
	// Shard and Shards split a Sweep: it takes every Shards-th strategy
	// from the Shard-th (Shards ≤ 1: all).
	Shard, Shards int
	// Workers is how many strategies a Sweep compiles and simulates at
	// once (≤ 1: one at a time). The entries are the same for any number.
	Workers int
	// ranking says the caller reads only the result's step and memory
	// (a Sweep's entry): its Plan may be the shared one simulated, which
	// has the whole plan's memory, rather than compiled again whole.
	ranking bool
}

// Resolve runs the search cfg's strategy asks for: Shares for mb=auto,
// Layers for layers=auto.
func Resolve(cfg plans.Config, d sim.Durations, opts Options) (*Result, error) {
	switch st := cfg.Strategy; {
	case st.AutoShares && st.AutoLayers:
		return nil, fmt.Errorf("search: strategy %s: mb=auto and layers=auto are searched one at a time", st)
	case st.AutoShares:
		return Shares(cfg, d, opts)
	case st.AutoLayers:
		return Layers(cfg, d, opts)
	}
	return nil, fmt.Errorf("search: strategy %s has no mb=auto or layers=auto to resolve", cfg.Strategy)
}

// Shares compiles cfg, whose strategy has AutoShares set, with the split
// of its micro-batches over the replicas that the simulator, pricing tasks
// with d, finds fastest. Replicas on the same device types form a group
// and share its micro-batches evenly (the first ones taking a remainder),
// so the search is over the groups' totals, each at least one micro-batch
// per replica: on equal devices there is one candidate, the even split.
// With at most MaxExhaustive candidates all are simulated; otherwise the
// search starts from the even split and moves micro-batches between pairs
// of groups (a quarter of a replica's fair share at a time, then half as
// many, down to one) while that shortens the step. Equal inputs give equal
// results.
func Shares(cfg plans.Config, d sim.Durations, opts Options) (*Result, error) {
	st := cfg.Strategy
	if !st.AutoShares {
		return nil, fmt.Errorf("search: strategy %s has no mb=auto to resolve", st)
	}
	n, dp := st.TotalMicros(), st.DP
	if n < dp {
		return nil, fmt.Errorf("search: %d micro-batches cannot give each of dp=%d replicas one", n, dp)
	}
	devs, err := st.PlaceDevices(cfg.Devices)
	if err != nil {
		return nil, fmt.Errorf("search: %w", err)
	}
	gs := groups(devs, dp, st.PP, st.TPDegree())
	least := make([]int, len(gs)) // a micro-batch per replica
	even := make([]int, len(gs))  // ParseStrategy's even split of mb=auto, by group
	for i, g := range gs {
		least[i] = len(g.Replicas)
		for _, r := range g.Replicas {
			even[i] += st.Micros(r)
		}
	}
	shares := func(totals []int) plans.Strategy {
		s := make([]int, dp)
		for i, g := range gs {
			for j, m := range plans.EvenShares(totals[i], len(g.Replicas)) {
				s[g.Replicas[j]] = m
			}
		}
		return st.WithShares(s)
	}
	res, err := search(cfg, d, opts, space{total: n, least: least, start: even, step: max(n/dp/4, 1), resolve: shares})
	if err != nil {
		return nil, fmt.Errorf("search: no split of %d micro-batches over dp=%d replicas is feasible %w", n, dp, err)
	}
	res.Key, res.Groups = "mb", gs
	return res, nil
}

// Layers compiles cfg, whose strategy has AutoLayers set, with the cut of
// the model's layers into pipeline stages (each at least one layer) that
// the simulator, pricing tasks with d, finds fastest: every cut if there
// are at most MaxExhaustive, else a local search from the even cut that
// moves layers between pairs of stages.
func Layers(cfg plans.Config, d sim.Durations, opts Options) (*Result, error) {
	st := cfg.Strategy
	if !st.AutoLayers {
		return nil, fmt.Errorf("search: strategy %s has no layers=auto to resolve", st)
	}
	n, err := plans.Layers(cfg.Model)
	if err != nil {
		return nil, err
	}
	pp := st.PP
	if n < pp {
		return nil, fmt.Errorf("search: %s has %d layers, too few for pp=%d stages", cfg.Model, n, pp)
	}
	least := make([]int, pp)
	for i := range least {
		least[i] = 1
	}
	res, err := search(cfg, d, opts, space{total: n, least: least, start: plans.EvenShares(n, pp), step: max(n/pp/4, 1),
		resolve: st.WithLayers})
	if err != nil {
		return nil, fmt.Errorf("search: no cut of %d layers into pp=%d stages is feasible %w", n, pp, err)
	}
	res.Key = "layers"
	return res, nil
}

// space is what a search ranges over: counts, each at least least[i],
// summing to total.
type space struct {
	total   int
	least   []int
	start   []int // where a local search starts
	step    int   // the local search's first move
	resolve func(counts []int) plans.Strategy
}

// search simulates the points of sp, all of them or a local search's, and
// ranks them. Its error says how many were tried and why the first few
// failed, when none is feasible.
func search(cfg plans.Config, d sim.Durations, opts Options, sp space) (*Result, error) {
	s := &searcher{cfg: cfg, d: d, sp: sp, seen: map[string]*Candidate{}, progress: opts.Progress, total: -1}
	res := &Result{}
	k := len(sp.least)
	// Counts c ≥ least, Σc = total: compositions of total − Σleast + k
	// into k parts t ≥ 1, c = t + least − 1.
	free := sp.total - sum(sp.least) + k
	if count := compositions(free, k, MaxExhaustive+1); count <= MaxExhaustive {
		res.Exhaustive = true
		s.total = count
		eachComposition(free, k, func(t []int) {
			counts := make([]int, k)
			for i := range counts {
				counts[i] = t[i] + sp.least[i] - 1
			}
			s.eval(counts)
		})
	} else {
		s.climb(sp.start, sp.step)
	}
	var ok, bad []Candidate
	for _, key := range s.order {
		if c := *s.seen[key]; c.Err != nil {
			bad = append(bad, c)
		} else {
			ok = append(ok, c)
		}
	}
	if len(ok) == 0 {
		var why []string
		var errs []error // unwrapped by errors.Is: plans.ErrOutOfMemory, say
		for _, c := range bad[:min(len(bad), 3)] {
			why = append(why, fmt.Sprintf("%s: %v", c.Strategy, c.Err))
			errs = append(errs, c.Err)
		}
		return nil, &noneFeasible{fmt.Sprintf("(%d tried):\n  %s", len(bad), strings.Join(why, "\n  ")), errs}
	}
	slices.SortStableFunc(ok, func(a, b Candidate) int { return cmp.Compare(a.Step, b.Step) })
	res.Candidates = append(ok, bad...)
	if opts.ranking {
		res.Plan = s.plan
		return res, nil
	}
	var err error
	if res.Plan, err = s.result(); err != nil {
		return nil, fmt.Errorf("recompiling %s: %w", res.Best().Strategy, err)
	}
	return res, nil
}

// A searcher compiles its candidates shared where that ranks them as whole
// plans (compile), and keeps the plan of the best candidate so far, and
// no other.
type searcher struct {
	cfg   plans.Config
	d     sim.Durations
	sp    space
	seen  map[string]*Candidate // by counts
	order []string              // keys of seen, in evaluation order
	best  *Candidate            // the fastest feasible so far (the first tried of equals)
	plan  *plans.Plan           // best's

	progress func(done, total int)
	total    int
}

// eval compiles and simulates one point, once.
func (s *searcher) eval(counts []int) *Candidate {
	k := plans.FormatCounts(counts)
	if c, ok := s.seen[k]; ok {
		return c
	}
	c := &Candidate{Counts: slices.Clone(counts), Strategy: s.sp.resolve(counts)}
	s.seen[k] = c
	s.order = append(s.order, k)
	cfg := s.cfg
	cfg.Strategy = c.Strategy
	p, err := compile(cfg, s.d)
	if err == nil {
		c.Step, err = step(p, s.d)
	}
	if s.progress != nil {
		s.progress(len(s.order), s.total)
	}
	if err != nil {
		c.Err = err
		return c
	}
	if s.best == nil || c.Step < s.best.Step {
		s.best, s.plan = c, p
	}
	return c
}

// result returns the best candidate's plan, compiled as s.cfg asks: the
// one simulated where it shares no more than s.cfg allows (where it shares
// less, its replicas could not), else again with its ranks and replicas
// listed.
func (s *searcher) result() (*plans.Plan, error) {
	if (!s.plan.SharedTP || s.cfg.SharedTP) && (!s.plan.SharedDP || s.cfg.SharedDP) {
		return s.plan, nil
	}
	cfg := s.cfg
	cfg.Strategy = s.best.Strategy
	return plans.CompileSharing(cfg)
}

// climb is the local search: from cur, move m units from one count to
// another while some move shortens the step (the best move of a round is
// taken), m starting at first and halving when no move helps.
func (s *searcher) climb(cur []int, first int) {
	s.eval(cur)
	for m := first; m >= 1; m /= 2 {
		for {
			best := s.seen[plans.FormatCounts(cur)]
			var next []int
			for from := range cur {
				for to := range cur {
					if from == to || cur[from]-m < s.sp.least[from] {
						continue
					}
					try := slices.Clone(cur)
					try[from] -= m
					try[to] += m
					if c := s.eval(try); c.Err == nil && (best.Err != nil || c.Step < best.Step) {
						best, next = c, try
					}
				}
			}
			if next == nil {
				break
			}
			cur = next
		}
	}
}

// compile compiles cfg for a search or a sweep, which only rank plans:
// with one rank standing for each tensor-parallel group and one replica
// for all where they run alike (plans.CompileSharing) and that simulates
// under d to the whole plan's step (sim.SharesExactly), with the same
// memory, in up to tp·dp times less work; else as cfg asks. A plan too
// large to compile as cfg asks is refused as Compile would refuse it.
func compile(cfg plans.Config, d sim.Durations) (*plans.Plan, error) {
	if cfg.SharedTP && cfg.SharedDP {
		return plans.CompileSharing(cfg)
	}
	shared := cfg
	shared.SharedTP, shared.SharedDP = true, true
	p, err := plans.CompileSharing(shared)
	if err != nil {
		return nil, err
	}
	if !sim.SharesExactly(d, p) {
		return plans.CompileSharing(cfg)
	}
	if n := p.FiringsAs(cfg.SharedTP, cfg.SharedDP); n > plans.MaxFirings {
		return nil, &plans.FiringsError{Firings: n, Max: plans.MaxFirings}
	}
	return p, nil
}

// step simulates p and returns its steady-state step time.
func step(p *plans.Plan, d sim.Durations) (time.Duration, error) {
	tr, err := sim.Simulate(p, d, simIters)
	if err != nil {
		return 0, err
	}
	return tr.StepTime(simWarmup)
}

// groups groups the replicas by their stages' device types (those of
// tensor-parallel rank 0), in order of their first replica.
func groups(devs []plans.Device, dp, pp, tp int) []Group {
	var gs []Group
	for r := range dp {
		types := make([]string, pp)
		for s := range pp {
			types[s] = devs[(r*pp+s)*tp].Type
		}
		key := strings.Join(types, "+")
		i := slices.IndexFunc(gs, func(g Group) bool { return g.Devices == key })
		if i < 0 {
			gs = append(gs, Group{Devices: key})
			i = len(gs) - 1
		}
		gs[i].Replicas = append(gs[i].Replicas, r)
	}
	return gs
}

// compositions is the number of ways to write n as an ordered sum of k
// positive parts, C(n−1, k−1), or limit if it is at least that.
func compositions(n, k, limit int) int {
	c := 1 // C(n−1, i) for i = 0 … k−1, stopped at limit
	for i := 1; i < k; i++ {
		c = c * (n - i) / i
		if c >= limit {
			return limit
		}
	}
	return c
}

// eachComposition calls f with every split of n into k positive parts, in
// lexicographic order (f must not keep the slice).
func eachComposition(n, k int, f func([]int)) {
	parts := make([]int, k)
	var rec func(i, left int)
	rec = func(i, left int) {
		if i == k-1 {
			parts[i] = left
			f(parts)
			return
		}
		for v := 1; v <= left-(k-1-i); v++ {
			parts[i] = v
			rec(i+1, left-v)
		}
	}
	rec(0, n)
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// noneFeasible is a search's error when no candidate is feasible: its
// message lists some candidates' errors, which it wraps.
type noneFeasible struct {
	msg  string
	errs []error
}

func (e *noneFeasible) Error() string   { return e.msg }
func (e *noneFeasible) Unwrap() []error { return e.errs }
