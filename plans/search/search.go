// Package search chooses among plans by simulating them.
//
// Shares resolves the uneven data parallelism of a strategy with mb=auto:
// the batch's micro-batches (all of one size) are split over the replicas
// so that the simulated step time is least. On unequal devices (a GPU and
// the host's CPU, or two GPU types) an even split leaves the fast replicas
// waiting for the slow ones at every all-reduce; the split that balances
// them depends on the model, the batch and the cost model, which is why it
// is searched rather than derived from peak FLOP rates.
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

// MaxExhaustive is the number of splits up to which Shares simulates every
// one; above it, it searches locally from the even split.
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
	Devices  string // the device types of a replica's stages, "+"-separated
	Replicas []int
}

// Candidate is one split of the micro-batches and what it was found to
// cost.
type Candidate struct {
	Totals []int         // micro-batches per group
	Shares []int         // micro-batches per replica
	Step   time.Duration // simulated step time; 0 if Err
	Err    error         // why the split was rejected (e.g. a device's memory)
}

// Result is a resolved mb=auto strategy.
type Result struct {
	Plan   *plans.Plan // the best split's plan
	Groups []Group
	// Candidates are the splits simulated: the feasible ones fastest first
	// (ties in the order they were tried), then the rejected ones.
	Candidates []Candidate
	Exhaustive bool // every split was simulated, not a local search's path
}

// Options tune a search.
type Options struct {
	// Progress, if set, is called after each split is simulated with the
	// number done and the number to do (−1 for a local search, whose
	// length is not known ahead).
	Progress func(done, total int)
}

// Best is the chosen candidate.
func (r *Result) Best() Candidate { return r.Candidates[0] }

// Shares compiles cfg, whose strategy has Auto set, with the split of its
// micro-batches over the replicas that the simulator, pricing tasks with
// d, finds fastest. Replicas on the same device types form a group and
// share its micro-batches evenly (the first ones taking a remainder), so
// the search is over the groups' totals, each at least one micro-batch per
// replica: on equal devices there is one candidate, the even split. With
// at most MaxExhaustive candidates all are simulated; otherwise the search
// starts from the even split and moves micro-batches between pairs of
// groups (a quarter of the fair share of a replica at a time, then half as
// many, down to one) while that shortens the step. Equal inputs give equal
// results.
func Shares(cfg plans.Config, d sim.Durations, opts Options) (*Result, error) {
	st := cfg.Strategy
	if !st.Auto {
		return nil, fmt.Errorf("search: strategy %s has no mb=auto to resolve", st)
	}
	n, dp := st.TotalMicros(), st.DP
	if n < dp {
		return nil, fmt.Errorf("search: %d micro-batches cannot give each of dp=%d replicas one", n, dp)
	}
	if len(cfg.Devices) < st.Devices() {
		return nil, fmt.Errorf("search: %s needs %d devices, %d given", st, st.Devices(), len(cfg.Devices))
	}
	s := &searcher{cfg: cfg, d: d, seen: map[string]*Candidate{}, groups: groups(cfg.Devices, dp, st.PP), progress: opts.Progress, total: -1}
	res := &Result{Groups: s.groups}
	g := len(s.groups)
	// Group totals T ≥ the group's replicas, ΣT = n: compositions of
	// n − dp + g into g parts t ≥ 1, T = t + replicas − 1.
	if count := compositions(n-dp+g, g, MaxExhaustive+1); count <= MaxExhaustive {
		res.Exhaustive = true
		s.total = count
		eachComposition(n-dp+g, g, func(t []int) {
			totals := make([]int, g)
			for i := range totals {
				totals[i] = t[i] + len(s.groups[i].Replicas) - 1
			}
			s.eval(totals)
		})
	} else {
		even := make([]int, g) // ParseStrategy's even split of mb=auto, by group
		for i, grp := range s.groups {
			for _, r := range grp.Replicas {
				even[i] += st.Micros(r)
			}
		}
		s.climb(even, n/dp)
	}
	var ok, bad []Candidate
	for _, key := range s.order {
		c := *s.seen[key]
		if c.Err != nil {
			bad = append(bad, c)
		} else {
			ok = append(ok, c)
		}
	}
	if len(ok) == 0 {
		var why []string
		for _, c := range bad[:min(len(bad), 3)] {
			why = append(why, fmt.Sprintf("mb=%s: %v", plans.FormatShares(c.Shares), c.Err))
		}
		return nil, fmt.Errorf("search: no split of %d micro-batches over dp=%d replicas is feasible (%d tried):\n  %s",
			n, dp, len(bad), strings.Join(why, "\n  "))
	}
	slices.SortStableFunc(ok, func(a, b Candidate) int { return cmp.Compare(a.Step, b.Step) })
	res.Candidates = append(ok, bad...)
	res.Plan = s.plans[plans.FormatShares(res.Best().Totals)]
	return res, nil
}

// groups groups the replicas by their stages' device types, in order of
// their first replica.
func groups(devs []plans.Device, dp, pp int) []Group {
	var gs []Group
	for r := range dp {
		types := make([]string, pp)
		for s := range pp {
			types[s] = devs[r*pp+s].Type
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

type searcher struct {
	cfg    plans.Config
	d      sim.Durations
	groups []Group
	seen   map[string]*Candidate  // by group totals
	order  []string               // keys of seen, in evaluation order
	plans  map[string]*plans.Plan // of the feasible candidates

	progress func(done, total int)
	total    int
}

// eval compiles and simulates the split of the groups' totals, once.
func (s *searcher) eval(totals []int) *Candidate {
	k := plans.FormatShares(totals)
	if c, ok := s.seen[k]; ok {
		return c
	}
	shares := make([]int, s.cfg.Strategy.DP)
	for i, g := range s.groups {
		for j, m := range plans.EvenShares(totals[i], len(g.Replicas)) {
			shares[g.Replicas[j]] = m
		}
	}
	c := &Candidate{Totals: slices.Clone(totals), Shares: shares}
	s.seen[k] = c
	s.order = append(s.order, k)
	cfg := s.cfg
	cfg.Strategy = cfg.Strategy.WithShares(shares)
	p, err := plans.Compile(cfg)
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
	if s.plans == nil {
		s.plans = map[string]*plans.Plan{}
	}
	s.plans[k] = p
	return c
}

// climb is the local search over the groups' totals: from cur, move m
// micro-batches from one group to another while some move shortens the
// step (the best move of a round is taken), m starting at a quarter of a
// replica's fair share and halving when no move helps.
func (s *searcher) climb(cur []int, fair int) {
	g := len(cur)
	s.eval(cur)
	for m := max(fair/4, 1); m >= 1; m /= 2 {
		for {
			best := s.seen[plans.FormatShares(cur)]
			var next []int
			for from := range g {
				for to := range g {
					if from == to || cur[from]-m < len(s.groups[from].Replicas) {
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

// step simulates p and returns its steady-state step time.
func step(p *plans.Plan, d sim.Durations) (time.Duration, error) {
	tr, err := sim.Simulate(p, d, simIters)
	if err != nil {
		return 0, err
	}
	return tr.StepTime(simWarmup)
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

