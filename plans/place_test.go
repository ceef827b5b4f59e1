package plans

import (
	"bytes"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/topology"
)

// mixedPool is the devices of the mixed-a100-v100 preset: 16 A100s on
// two machines, then 16 V100s on two.
func mixedPool(t *testing.T) []Device {
	t.Helper()
	c, err := topology.Resolve("mixed-a100-v100")
	require.NoError(t, err)
	pool, err := DevicesFromCluster(c, len(c.Devices), false)
	require.NoError(t, err)
	return pool
}

func TestParsePlace(t *testing.T) {
	st, err := ParseStrategy("dp=2,pp=2,place=v100:A100-SXM4-40GB,mb=2", 64)
	require.NoError(t, err)
	require.Equal(t, []string{"v100", "A100-SXM4-40GB"}, st.Place)
	again, err := ParseStrategy(st.String(), 64)
	require.NoError(t, err)
	require.Equal(t, st, again, "String round-trips")

	st, err = ParseStrategy("pp=5,place=v100*2:a100*3", 64)
	require.NoError(t, err)
	require.Equal(t, []string{"v100", "v100", "a100", "a100", "a100"}, st.Place)
	require.Equal(t, "pp=5,place=v100*2:a100*3,sched=1f1b", st.String(), "runs are written as runs")
	st, err = ParseStrategy("pp=3,place=a:a:b", 64)
	require.NoError(t, err)
	require.Equal(t, "pp=3,place=a*2:b,sched=1f1b", st.String())

	st, err = ParseStrategy("place=cpu", 64)
	require.NoError(t, err)
	require.Equal(t, "place=cpu", st.String(), "a placed single stage is not \"single\"")

	for in, want := range map[string]string{
		"pp=2,place=a100":          "place gives 1 device types for pp=2 stages",
		"place=a100:v100":          "place gives 2 device types for pp=1 stages",
		"pp=2,place=a100::":        "want a device type per stage",
		"pp=2,place=a100: ":        "want a device type per stage",
		"pp=2,place=a,place=b":     "place given twice",
		"pp=2,place=a100:v100,x":   "not key=value",
		"pp=2,place=a100*0:v100":   `"a100*0": want TYPE*N`,
		"pp=2,place=a100*x":        `"a100*x": want TYPE*N`,
		"pp=2,place=*2":            "want a device type per stage",
		"pp=2,place=a**2":          `"a**2": want TYPE*N`,
		"pp=2,place=a*1048576:b*1": "want TYPE*N, N stages in all up to 1048576",
		"pp=3,place=a*2":           "place gives 2 device types for pp=3 stages",
	} {
		_, err := ParseStrategy(in, 64)
		require.ErrorContains(t, err, want, in)
	}
}

func TestPlaceDevices(t *testing.T) {
	pool := mixedPool(t)
	place := func(s string) ([]Device, error) {
		t.Helper()
		st, err := ParseStrategy(s, 64)
		require.NoError(t, err)
		return st.PlaceDevices(pool)
	}
	names := func(ds []Device) []string {
		var out []string
		for _, d := range ds {
			out = append(out, d.Name)
		}
		return out
	}

	got, err := place("dp=2,pp=2")
	require.NoError(t, err)
	require.Equal(t, pool[:4], got, "unplaced: the pool's first devices")

	// Replica by replica, stage by stage, rank by rank: a stage's group is
	// neighbouring devices of its type, and the replicas take the next.
	got, err = place("dp=2,tp=2,pp=2,place=v100:a100")
	require.NoError(t, err)
	require.Equal(t, []string{
		"v100-0/gpu0", "v100-0/gpu1", "a100-0/gpu0", "a100-0/gpu1",
		"v100-0/gpu2", "v100-0/gpu3", "a100-0/gpu2", "a100-0/gpu3",
	}, names(got))

	got, err = place("pp=3,place=a100:a100:v100")
	require.NoError(t, err)
	require.Equal(t, []string{"a100-0/gpu0", "a100-0/gpu1", "v100-0/gpu0"}, names(got))

	_, err = place("dp=4,tp=4,pp=2,place=v100:v100")
	require.ErrorIs(t, err, ErrInfeasible)
	require.ErrorContains(t, err, "stage 0 runs on V100-SXM2-16GB, and the stages placed there need 32 such devices; 16 given (16 short)")
	_, err = place("pp=2,place=h100:a100")
	require.ErrorContains(t, err, `stage 0: no device of type "h100" (the devices are of types A100-SXM4-40GB, V100-SXM2-16GB)`)
	_, err = place("pp=2,place=a100:sxm")
	require.ErrorContains(t, err, `stage 1: "sxm" names several device types (A100-SXM4-40GB, V100-SXM2-16GB)`)
	_, err = place("dp=64")
	require.ErrorContains(t, err, "needs 64 devices, 32 given")

	// A property: over every placement of a range of strategies, the
	// devices are distinct, as many as the strategy needs, and every
	// stage's are of its type.
	for _, dp := range []int{1, 2, 4} {
		for _, tp := range []int{1, 2, 4} {
			for _, pp := range []int{1, 2, 3} {
				for _, pl := range Placements(pool, dp, tp, pp) {
					st := Strategy{DP: dp, TP: tp, PP: pp, MB: 1, Place: pl}
					got, err := st.PlaceDevices(pool)
					require.NoError(t, err, "Placements offers only feasible placements")
					require.Len(t, got, dp*tp*pp)
					seen := map[string]bool{}
					for i, d := range got {
						require.False(t, seen[d.Name], "%v: %s twice", pl, d.Name)
						seen[d.Name] = true
						stage := i / tp % pp
						require.Contains(t, d.Type, pl[stage], "%v: device %d", pl, i)
					}
				}
			}
		}
	}
}

func TestPlacements(t *testing.T) {
	pool := mixedPool(t)
	// Two stages over two types: A100s then V100s, V100s then A100s,
	// V100s alone; A100s alone is what the unplaced pipeline takes already.
	a, v := "A100", "V100"
	require.Equal(t, [][]string{{a, v}, {v, a}, {v, v}}, Placements(pool, 1, 1, 2))
	// Three stages: each order of types in blocks of at least a stage.
	require.Equal(t, [][]string{{a, v, v}, {a, a, v}, {v, a, a}, {v, v, a}, {v, v, v}}, Placements(pool, 1, 1, 3))
	// 2 replicas of 8-way groups over 2 stages want 32 devices of a type
	// placed alone: only the mixed placements fit the 16 of each.
	require.Equal(t, [][]string{{a, v}, {v, a}}, Placements(pool, 2, 8, 2))
	require.Nil(t, Placements(pool[:16], 1, 1, 2), "one type: nothing to choose")
	require.Nil(t, Placements(pool, 64, 1, 2), "nothing fits")
}

// A placed plan runs each stage on its type's devices, and the plan
// records them, so that the simulator and the runtime see the placement.
func TestCompilePlaced(t *testing.T) {
	pool := mixedPool(t)
	for _, s := range []string{"dp=2,pp=2,mb=2,place=v100:a100", "dp=2,pp=2,mb=2,place=v100:a100,layers=1:3"} {
		st, err := ParseStrategy(s, 32)
		require.NoError(t, err)
		p, err := Compile(Config{Model: "mnist-cnn", Batch: 32, Strategy: st, Optimizer: graph.SGD{LR: 0.01},
			Cluster: "mixed-a100-v100", Devices: pool})
		require.NoError(t, err)
		require.Len(t, p.Devices, 4)
		types := make([]string, len(p.Devices))
		for i, d := range p.Devices {
			types[i] = d.Type
		}
		require.Equal(t, []string{"V100-SXM2-16GB", "A100-SXM4-40GB", "V100-SXM2-16GB", "A100-SXM4-40GB"}, types)
		for _, task := range p.Tasks {
			if task.Kind == Compute {
				dev := p.Streams[task.Streams[0]].Device
				require.Equal(t, task.Stage%2 == 1, slices.Contains([]int{1, 3}, dev), task.Name)
			}
		}
		require.Equal(t, st.String(), p.Strategy)
		var buf bytes.Buffer
		require.NoError(t, Encode(&buf, p))
		back, err := Decode(&buf)
		require.NoError(t, err, "a placed plan decodes")
		require.Equal(t, p.Devices, back.Devices)
	}
}
