package plans

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/flowkit/flowkit/graph"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// tb is what the helpers need of a test: a *testing.T or a *rapid.T.
type tb interface {
	require.TestingT
	Helper()
}

// adam is the optimizer of the ZeRO tests: two moments per weight.
var adam = graph.Adam{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}

// compileZeroTP compiles model with Adam on the devices strategy needs.
func compileZeroTP(t tb, model, strategy string, batch int) *Plan {
	t.Helper()
	st, err := ParseStrategy(strategy, batch)
	require.NoError(t, err)
	p, err := Compile(Config{Model: model, Batch: batch, Strategy: st, Optimizer: adam, Devices: devs(st.Devices(), 0)})
	require.NoError(t, err, strategy)
	return p
}

// zeroPart returns the shard of a register that is a replica's ZeRO part
// (of a whole tensor, or of a tensor-parallel rank's part), nil for any
// other.
func zeroPart(p *Plan, r *Register) *graph.Shard {
	if sh := r.Init.Shard; sh != nil && r.Name == fmt.Sprintf("%s [zero %d/%d]", sh.Of, p.Replica(r.Device), p.DP) {
		return sh
	}
	return nil
}

// requireZeroGroups checks that every ZeRO collective (an all-gather or
// reduce-scatter over the replicas) has one member per replica, all of
// one stage and tensor-parallel rank, and moves parts of a first axis
// split over the replicas; it returns their number.
func requireZeroGroups(t tb, p *Plan) int {
	t.Helper()
	n := 0
	for _, task := range p.Tasks {
		if !task.Kind.Collective() || task.Kind == AllReduce || task.Sum {
			continue
		}
		n++
		require.Len(t, task.Writes, p.DP, task.Name)
		d0 := p.Registers[task.Writes[0]].Device
		var replicas []int
		for j, w := range task.Writes {
			d := p.Registers[w].Device
			require.Equal(t, p.Stage(d0), p.Stage(d), "%s: member %d's stage", task.Name, j)
			require.Equal(t, p.TPRank(d0), p.TPRank(d), "%s: member %d's tensor-parallel rank", task.Name, j)
			require.Equal(t, d, p.Registers[task.Reads[j].Reg].Device, "%s: member %d reads on its device", task.Name, j)
			replicas = append(replicas, p.Replica(d))
		}
		require.Equal(t, upTo(p.DP), replicas, "%s: member j is replica j", task.Name)
		part, whole := p.Registers[task.Reads[0].Reg].Spec.Shape, p.Registers[task.Writes[0]].Spec.Shape
		if task.Kind == ReduceScatter {
			part, whole = whole, part
		}
		want := part.Clone()
		want[0] *= p.DP
		require.Equal(t, want, whole, "%s: a part is the first axis over the replicas", task.Name)
	}
	return n
}

// requirePartsTile checks that, on every device, the replicas' ZeRO parts
// of a tensor tile exactly what the plan without ZeRO (plain) holds of
// it: the whole, or the rank's part under tensor parallelism.
func requirePartsTile(t tb, p, plain *Plan) {
	t.Helper()
	type key struct {
		of          string
		stage, rank int
	}
	held := map[key][]int{} // parts held by the replicas
	for i := range p.Registers {
		r := &p.Registers[i]
		sh := zeroPart(p, r)
		if sh == nil {
			continue
		}
		if sh.Within != nil {
			require.Equal(t, p.TPDegree(), sh.Within.Parts, r.Name)
			require.Equal(t, p.TPRank(r.Device), sh.Within.Part, "%s: a part of its rank's part", r.Name)
		}
		// The plain plan holds, on the same device, the tensor the part is of.
		j := slices.IndexFunc(plain.Registers, func(w Register) bool { return w.Device == r.Device && w.Persistent && w.Name == sh.Of })
		require.GreaterOrEqual(t, j, 0, "%s: %s on device %d without ZeRO", r.Name, sh.Of, r.Device)
		require.Equal(t, plain.Registers[j].Spec, graph.Spec{Shape: sh.Full, DType: r.Spec.DType}, r.Name)
		require.Equal(t, plain.Registers[j].Init.Shard, sh.Within, "%s: the rank's part as without ZeRO", r.Name)
		k := key{sh.Of, p.Stage(r.Device), p.TPRank(r.Device)}
		held[k] = append(held[k], sh.Part)
	}
	require.NotEmpty(t, held)
	for k, parts := range held {
		slices.Sort(parts)
		require.Equal(t, upTo(p.DP), parts, "%v: one part per replica", k)
	}
}

// upTo returns 0, 1, …, n−1.
func upTo(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// ZeRO with tensor parallelism splits each rank's part of a weight (and
// a weight every rank holds whole) over the replicas of the same stage
// and rank: the collectives are over those devices, the parts are the
// rank's parts' first axis over the replicas, the persistent memory falls
// by ZeRO's factors, and the plan reads back, a decoder refusing a part
// of another rank's part or a group across ranks.
func TestZeroWithTensorParallel(t *testing.T) {
	const model = "gpt:layers=2,hidden=64,heads=2,seq=8,vocab=64" // every part a multiple of the arena's alignment
	plain := compileZeroTP(t, model, "dp=2,tp=2,mb=2", 8)
	for _, stage := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("zero=%d", stage), func(t *testing.T) {
			p := compileZeroTP(t, model, fmt.Sprintf("dp=2,tp=2,mb=2,zero=%d", stage), 8)
			require.Positive(t, requireZeroGroups(t, p))
			requirePartsTile(t, p, plain)
			for _, task := range p.Tasks {
				require.False(t, task.Kind == AllReduce && !task.Sum, "%s: dp=2 divides every weight", task.Name)
			}
			// Adam: W + S persistent without ZeRO (S = 2W); W + (W+S)/2
			// under stages 1 and 2, (W+S)/2 under 3.
			want := (1 + 3.0/2) / 3
			if stage == 3 {
				want = 0.5
			}
			for d := range p.Devices {
				require.InDelta(t, want, float64(p.Memory[d].Persistent)/float64(plain.Memory[d].Persistent), 0.01, "device %d", d)
			}
			var b bytes.Buffer
			require.NoError(t, Encode(&b, p))
			back, err := Decode(&b)
			require.NoError(t, err, "a ZeRO plan over tensor-parallel groups reads back")
			require.Equal(t, p.Registers, back.Registers)

			nested := slices.IndexFunc(p.Registers, func(r Register) bool { return r.Init.Shard != nil && r.Init.Shard.Within != nil })
			require.GreaterOrEqual(t, nested, 0)
			// The collectives of a weight every rank holds whole, one
			// per rank, named by it: their members 1 trade places, and
			// each then spans both ranks.
			rank0 := slices.IndexFunc(p.Tasks, func(t Task) bool { return strings.HasSuffix(t.Name, " [rank 0/2]") })
			require.GreaterOrEqual(t, rank0, 0)
			rank1 := slices.IndexFunc(p.Tasks, func(t Task) bool {
				return t.Name == strings.TrimSuffix(p.Tasks[rank0].Name, " [rank 0/2]")+" [rank 1/2]"
			})
			require.GreaterOrEqual(t, rank1, 0)
			pair := []int{rank0, rank1}
			requireDecodeRejectsAll(t, p, []rejection{
				{"rank", "is not part 0 of 2", func(p *Plan) {
					sh := p.Registers[nested].Init.Shard.Within
					sh.Part = 1 - sh.Part
				}},
				{"rank's shape", "the shape of its part of", func(p *Plan) { p.Registers[nested].Init.Shard.Within.Full[0] *= 2 }},
				{"group", "ZeRO's group is the replicas' devices of one stage and rank", func(p *Plan) {
					a, b := &p.Tasks[pair[0]], &p.Tasks[pair[1]]
					a.Reads[1], b.Reads[1] = b.Reads[1], a.Reads[1]
					a.Writes[1], b.Writes[1] = b.Writes[1], a.Writes[1]
					a.Streams[1], b.Streams[1] = b.Streams[1], a.Streams[1]
				}},
			})
		})
	}
}

// For any data × tensor × pipeline split, with or without sequence
// parallelism and micro-batches, every ZeRO stage groups the replicas of
// one stage and rank, its parts tile exactly what each device holds
// without ZeRO, and the plan reads back.
func TestZeroWithTensorParallelProperties(t *testing.T) {
	const model = "gpt:layers=2,hidden=24,heads=4,seq=12,vocab=24" // some weights the replicas do not divide
	// The plans without ZeRO, by strategy.
	plains := map[string]*Plan{}
	rapid.Check(t, func(rt *rapid.T) {
		dp := rapid.IntRange(2, 4).Draw(rt, "dp")
		tp := rapid.SampledFrom([]int{1, 2, 4}[:1+8/(2*dp)]).Draw(rt, "tp") // up to 8 devices
		pp := rapid.IntRange(1, min(2, 8/(dp*tp))).Draw(rt, "pp")
		mb := rapid.IntRange(1, 2).Draw(rt, "mb")
		base := fmt.Sprintf("dp=%d,tp=%d,pp=%d,mb=%d", dp, tp, pp, mb)
		if tp > 1 && rapid.Bool().Draw(rt, "sp") {
			base += ",sp=on"
		}
		stage := rapid.IntRange(1, 3).Draw(rt, "zero")
		p := compileZeroTP(rt, model, fmt.Sprintf("%s,zero=%d", base, stage), 24)
		plain, ok := plains[base]
		if !ok {
			plain = compileZeroTP(rt, model, base, 24)
			plains[base] = plain
		}
		require.Positive(rt, requireZeroGroups(rt, p))
		requirePartsTile(rt, p, plain)
		for d := range p.Devices {
			require.Less(rt, p.Memory[d].Persistent, plain.Memory[d].Persistent, "device %d", d)
		}
		var b bytes.Buffer
		require.NoError(rt, Encode(&b, p))
		_, err := Decode(&b)
		require.NoError(rt, err)
	})
}

// Task names are unique within a plan, under every combination of
// parallelism: traces, profiles and comparisons name tasks by them. (Each
// tensor-parallel rank's data-parallel collective of a weight every rank
// holds whole, a layer norm's, says its rank.)
func TestTaskNamesUnique(t *testing.T) {
	compiled := 0
	for _, model := range []string{"mlp", "mnist-cnn", "gpt2s-blocks:layers=2,hidden=64,heads=4,seq=16", "gpt:layers=2,hidden=64,heads=4,seq=16,vocab=96"} {
		for _, s := range []string{"single", "dp=2", "tp=2", "dp=2,tp=2", "dp=2,tp=2,sp=on", "pp=2,mb=2", "dp=2,tp=2,pp=2,mb=2",
			"dp=2,zero=1", "dp=2,tp=2,zero=1", "dp=2,tp=2,sp=on,zero=3", "dp=2,pp=2,vpp=2,mb=2", "mb=2,recompute=full", "dp=2,mb=3:1"} {
			st, err := ParseStrategy(s, 8)
			require.NoError(t, err)
			p, err := Compile(Config{Model: model, Batch: 8, Strategy: st, Optimizer: adam, Devices: devs(st.Devices(), 0)})
			if errors.Is(err, ErrInfeasible) || err != nil && strings.Contains(err.Error(), "layout") {
				continue // e.g. tp for the CNN, which has no tensor-parallel layout
			}
			require.NoError(t, err, "%s %s", model, s)
			compiled++
			seen := map[string]bool{}
			for _, task := range p.Tasks {
				require.False(t, seen[task.Name], "%s %s: two tasks named %q", model, s, task.Name)
				seen[task.Name] = true
			}
		}
	}
	require.GreaterOrEqual(t, compiled, 39)
}
