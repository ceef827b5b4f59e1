package plans

import (
	"bytes"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// ZeRO stages 2 and 3 over replicas with uneven micro-batches run their
// per-micro-batch collectives once per round, as many as the most
// micro-batches of a replica: every replica's members meet in every
// round, in the same order on every device; a replica with fewer
// micro-batches joins its last rounds without computing, its member of a
// reduce-scatter reading nothing (Idle) and still accumulating its part;
// the reduce-scatters weigh every member alike, so that the mean of the
// accumulations over the rounds is the batch's mean; and the plan reads
// back. The replica with fewer is the first (mb=1:3) as well as the last.
func TestZeroUnevenRounds(t *testing.T) {
	const model = "gpt:layers=2,hidden=64,heads=2,seq=8,vocab=64"
	for _, c := range []struct {
		strategy string
		batch    int
	}{
		{"dp=2,mb=3:1,zero=2", 8}, {"dp=2,mb=1:3,zero=3", 8}, {"dp=2,mb=3:1,zero=3,prefetch=1", 8},
		{"dp=3,pp=2,mb=2:1:1,zero=3,prefetch=1", 8}, {"dp=2,tp=2,sp=on,mb=3:1,zero=3", 8},
		{"dp=2,pp=2,mb=3:1,sched=gpipe,zero=2,recompute=full", 8}, {"dp=3,mb=1:3:2,zero=2", 12},
	} {
		t.Run(c.strategy, func(t *testing.T) {
			p := compileZeroTP(t, model, c.strategy, c.batch)
			require.NotNil(t, p.Shares)
			require.Positive(t, requireZeroGroups(t, p))
			kinds := map[TaskKind]int{}
			for i := range p.Tasks {
				task := &p.Tasks[i]
				if !task.Rounds {
					continue
				}
				kinds[task.Kind]++
				require.Equal(t, p.MB, p.Fires(i), "%s fires once per round", task.Name)
				switch task.Kind {
				case ReduceScatter:
					for j, w := range p.AllReduceWeights(task) {
						require.InDelta(t, float64(p.MB)/float64(p.TotalMicros()), w, 1e-12, "%s: member %d's weight", task.Name, j)
					}
					for m := range p.MB {
						for j, u := range task.Reads {
							r := p.Replica(p.Registers[u.Reg].Device)
							require.Equal(t, m >= p.Micros(r), p.Idle(task, u, m), "%s: member %d in round %d", task.Name, j, m)
						}
					}
				case AllGather:
					require.Equal(t, ReadPrev, task.Reads[0].Mode, "%s gives its part in every round", task.Name)
				case Accumulate:
					require.Equal(t, ReduceScatter, p.Tasks[p.Registers[task.Reads[0].Reg].Writers[0]].Kind, task.Name)
					require.True(t, task.InPlace, task.Name)
				default:
					t.Fatalf("%s: a %s fires per round", task.Name, task.Kind)
				}
			}
			require.Positive(t, kinds[ReduceScatter])
			require.Positive(t, kinds[Accumulate])
			if p.Zero == 3 {
				require.Positive(t, kinds[AllGather])
			}
			// Each device lists the rounds its replica has no micro-batch
			// in: round tasks only.
			for _, s := range p.Streams {
				r := p.Replica(s.Device)
				idle := 0
				for _, f := range s.Order {
					fi := p.Firings[f]
					task := &p.Tasks[fi.Task]
					if fi.Micro >= p.Micros(r) {
						require.True(t, task.Rounds, "%s: a round without micro-batches runs %s", p.streamName(s), p.FiringName(f))
						idle++
					}
				}
				if s.Name == "compute" {
					require.Equal(t, p.Micros(r) < p.MB, idle > 0, "%s", p.streamName(s))
				}
			}
			var b bytes.Buffer
			require.NoError(t, Encode(&b, p))
			back, err := Decode(&b)
			require.NoError(t, err, "an uneven zero=%d plan reads back", p.Zero)
			require.Equal(t, p.Tasks, back.Tasks)
			requireFileRejects(t, p, func(f *file) {
				i := slices.IndexFunc(f.Tasks, func(t Task) bool { return t.Rounds })
				f.Tasks[i].PerMicro = false
			}, "fires once per round: it needs per_micro")
		})
	}
}

// A replica's schedule over the rounds, its idle steps left out, is its
// own schedule over its micro-batches: joining the rounds it has no
// micro-batch in does not reorder its compute.
func TestRoundScheduleKeepsOwnOrder(t *testing.T) {
	for _, sched := range []Schedule{GPipe, OneFOneB} {
		for pp := 1; pp <= 4; pp++ {
			for most := 1; most <= 6; most++ {
				for mine := 1; mine <= most; mine++ {
					st := Strategy{DP: 2, PP: pp, Sched: sched, Zero: 2}.WithShares([]int{most, mine})
					rounds := &compiler{st: st}
					st.Zero = 0
					own := &compiler{st: st}
					for stage := range pp {
						var kept []step
						for _, s := range rounds.schedule(1, stage) {
							if s.micro < mine {
								kept = append(kept, s)
							}
						}
						require.Len(t, rounds.schedule(1, stage), 2*most, "%s pp=%d stage %d: every round", sched, pp, stage)
						require.Equal(t, own.schedule(1, stage), kept, "%s pp=%d stage %d, %d of %d micro-batches", sched, pp, stage, mine, most)
					}
				}
			}
		}
	}
}
