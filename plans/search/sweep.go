package search

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/sim"
	"github.com/flowkit/flowkit/units"
)

// Space bounds the strategies a sweep enumerates.
type Space struct {
	// Devices is the number of devices every strategy uses: dp·tp·pp.
	Devices int
	// MaxTP bounds the tensor-parallel degrees tried: the powers of two up
	// to it that divide Devices (0 or 1: none). Megatron-LM keeps a group
	// within a machine's fast links; flowsim sweep bounds it so.
	MaxTP int
	// MaxMB bounds the micro-batches per replica tried: the powers of two
	// up to it, and pp, 2·pp, 4·pp … up to it for pipelines.
	MaxMB int
	// Uneven adds, for unequal devices, each data-parallel strategy with
	// mb=auto (with Zero, at each ZeRO stage too) and each pipeline with
	// layers=auto (1F1B), resolved by their own searches.
	Uneven bool
	// Recompute adds each strategy with each of these recompute modes:
	// slower, but it may fit where the strategy does not.
	Recompute []plans.Recompute
	// SP adds each tensor-parallel strategy with sequence parallelism
	// (sp=on), for models with that layout.
	SP bool
	// Layers, when > 0, is the model's layer count (plans.Layers): each
	// 1F1B pipeline whose micro-batches are a multiple of its stages, and
	// whose model has two layers per stage or more, is also tried with the
	// interleaved schedule of two model stages per device (vpp=2).
	Layers int
	// Zero adds each data-parallel strategy (with or without tensor and
	// sequence parallelism) with each ZeRO stage (zero=1, 2, 3): the
	// optimizer state, then the gradients, then the weights split over
	// the replicas, each saving memory for communication; and stage 3
	// with its gathers a layer ahead (prefetch=1).
	Zero bool
	// Buckets adds each data-parallel strategy without ZeRO or with its
	// stage 1 (and their variants with sp=on and vpp=2) with each of these
	// gradient bucket sizes (bucket=SIZE, see plans.Strategy.Bucket): one
	// all-reduce or reduce-scatter for many gradients, which waits for the
	// last of them.
	Buckets []units.Bytes
	// Pool, when set and of several device types, is what pipelines are
	// placed over: each is also tried with each placement of its stages
	// on the pool's types (plans.Placements), which Config.Devices must
	// then hold.
	Pool []plans.Device
}

// Strategies enumerates the strategies of a sweep of a global batch, in a
// fixed order: every tp (see MaxTP), every dp × pp = Devices/tp, every
// micro-batch count that
// divides the batch, and for pipelines both schedules. A replica's
// micro-batches may be fewer than its stages (the pipeline then idles);
// the simulator prices that.
func Strategies(batch int, sp Space) ([]plans.Strategy, error) {
	if sp.Devices < 1 || sp.MaxMB < 1 || batch < 1 {
		return nil, fmt.Errorf("search: a sweep needs devices, micro-batches and a batch ≥ 1, got %d, %d and %d", sp.Devices, sp.MaxMB, batch)
	}
	var out []plans.Strategy
	for tp := 1; tp == 1 || tp <= sp.MaxTP; tp *= 2 {
		if sp.Devices%tp == 0 {
			out = append(out, strategies(batch, sp, tp)...)
		}
	}
	return out, nil
}

// strategies enumerates those of one tensor-parallel degree.
func strategies(batch int, sp Space, tp int) []plans.Strategy {
	var out []plans.Strategy
	n := sp.Devices / tp
	for dp := 1; dp <= n; dp++ {
		if n%dp != 0 {
			continue
		}
		pp := n / dp
		for _, mb := range microCounts(pp, sp.MaxMB) {
			if batch%(dp*mb) != 0 {
				continue
			}
			scheds := []plans.Schedule{plans.OneFOneB}
			if pp > 1 && mb > 1 {
				scheds = append(scheds, plans.GPipe)
			}
			for _, sched := range scheds {
				st := plans.Strategy{DP: dp, PP: pp, MB: mb, Sched: sched}
				if tp > 1 {
					st.TP = tp
				}
				variants := []plans.Strategy{st}
				if sp.SP && tp > 1 {
					seq := st
					seq.SP = true
					variants = append(variants, seq)
				}
				if sp.Layers >= 2*pp && pp > 1 && mb%pp == 0 && sched == plans.OneFOneB {
					for _, v := range slices.Clone(variants) {
						v.VPP = 2
						variants = append(variants, v)
					}
				}
				if sp.Zero && dp > 1 {
					for _, v := range slices.Clone(variants) {
						variants = append(variants, zeroVariants(v)...)
					}
				}
				if dp > 1 {
					for _, v := range slices.Clone(variants) {
						if v.Zero > 1 {
							continue // gradients reduce-scattered every micro-batch, unbucketed
						}
						for _, b := range sp.Buckets {
							v.Bucket = b
							variants = append(variants, v)
						}
					}
				}
				var places [][]string
				if pp > 1 {
					places = plans.Placements(sp.Pool, dp, tp, pp)
				}
				unplaced := len(variants)
				for _, place := range places {
					for _, v := range variants[:unplaced] {
						v.Place = place
						variants = append(variants, v)
					}
				}
				for _, v := range variants {
					out = append(out, v)
					for _, mode := range sp.Recompute {
						re := v
						re.Recompute = mode
						out = append(out, re)
					}
				}
				if sp.Uneven && dp > 1 && sched == plans.OneFOneB {
					auto := st
					auto.AutoShares = true
					out = append(out, auto)
					if sp.Zero {
						out = append(out, zeroVariants(auto)...)
					}
				}
				if sp.Uneven && pp > 1 && sched == plans.OneFOneB {
					auto := st
					auto.AutoLayers = true
					out = append(out, auto)
					for _, place := range places {
						auto.Place = place
						out = append(out, auto)
					}
				}
			}
		}
	}
	return out
}

// zeroVariants returns v with each ZeRO stage, and with stage 3's gathers
// a layer ahead (prefetch=1: faster, for some memory).
func zeroVariants(v plans.Strategy) []plans.Strategy {
	var out []plans.Strategy
	for stage := 1; stage <= 3; stage++ {
		v.Zero = stage
		out = append(out, v)
	}
	v.Prefetch = 1
	return append(out, v)
}

// microCounts are the micro-batch counts a sweep tries for pp stages.
func microCounts(pp, maxMB int) []int {
	var ms []int
	for m := 1; m <= maxMB; m *= 2 {
		ms = append(ms, m)
	}
	for m := pp; pp > 1 && m <= maxMB; m *= 2 {
		ms = append(ms, m)
	}
	slices.Sort(ms)
	return slices.Compact(ms)
}

// Entry is one strategy of a sweep and what the simulator made of it.
type Entry struct {
	Index    int            // the strategy's place in the enumeration
	Asked    plans.Strategy // as enumerated (maybe with mb=auto or layers=auto)
	Strategy plans.Strategy // as compiled (resolved); the zero Strategy if Err
	Step     time.Duration  // simulated step time
	Peak     units.Bytes    // the most planned memory of any device
	Err      error          // why the strategy is infeasible (memory, deadlock, too few layers)
}

// Sweep compiles and simulates the strategies for cfg (whose Strategy is
// ignored), resolving mb=auto and layers=auto by their searches, and
// returns the entries ranked (see Rank). With opts.Shards > 1 it takes only
// shard opts.Shard of them: every Shards-th strategy from the Shard-th, so
// that shards of one enumeration run apart and merge into one ranking. The
// same inputs give the same entries, with any opts.Workers (d must be safe
// for concurrent use when Workers > 1).
func Sweep(cfg plans.Config, d sim.Durations, strategies []plans.Strategy, opts Options) ([]Entry, error) {
	shards := max(opts.Shards, 1)
	if opts.Shard < 0 || opts.Shard >= shards {
		return nil, fmt.Errorf("search: shard %d of %d: want 0 ≤ shard < shards", opts.Shard, shards)
	}
	var entries []Entry
	for i := opts.Shard; i < len(strategies); i += shards {
		entries = append(entries, Entry{Index: i, Asked: strategies[i]})
	}
	// Workers take the next entry as they finish one; each entry is
	// computed from the same inputs whoever takes it, and the ranking
	// breaks ties by index, so the result does not depend on the workers.
	var next atomic.Int64
	var mu sync.Mutex
	done := 0
	var wg sync.WaitGroup
	for range min(max(opts.Workers, 1), len(entries)) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(entries); i = int(next.Add(1)) - 1 {
				sweepOne(cfg, d, &entries[i])
				if opts.Progress != nil {
					mu.Lock()
					done++
					opts.Progress(done, len(entries))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	Rank(entries)
	return entries, nil
}

// sweepOne compiles and simulates e's strategy, resolving mb=auto and
// layers=auto, and records what it found or why it is infeasible.
func sweepOne(cfg plans.Config, d sim.Durations, e *Entry) {
	st := e.Asked
	c := cfg
	c.Strategy = st
	var p *plans.Plan
	var err error
	if st.AutoShares || st.AutoLayers {
		var res *Result
		if res, err = Resolve(c, d, Options{ranking: true}); err == nil { // only the step and memory are read
			p, e.Step = res.Plan, res.Best().Step
			e.Strategy = res.Best().Strategy
		}
	} else if p, err = compile(c, d); err == nil {
		e.Strategy = st
		e.Step, err = step(p, d)
	}
	if err != nil {
		e.Err, e.Step, e.Strategy = err, 0, plans.Strategy{}
		return
	}
	for _, m := range p.Memory {
		e.Peak = max(e.Peak, m.Peak)
	}
}

// Rank orders entries: the feasible first, by step time, then peak memory,
// then place in the enumeration; the infeasible last, in enumeration
// order. Merged shards of a sweep rank as the whole sweep would.
func Rank(entries []Entry) {
	slices.SortFunc(entries, func(a, b Entry) int {
		return cmp.Or(
			cmp.Compare(btoi(a.Err != nil), btoi(b.Err != nil)),
			cmp.Compare(a.Step, b.Step),
			cmp.Compare(a.Peak, b.Peak),
			cmp.Compare(a.Index, b.Index))
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
