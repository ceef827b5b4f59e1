package main

import (
	"cmp"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// The front of a ranked sweep is exactly its undominated strategies: none
// of them is matched or beaten on both step time and memory by another,
// and every other feasible strategy is, by one of them. Fastest first,
// each leaner than the one before.
func TestSweepFront(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	dominates := func(a, b sweepEntry) bool { // a at least as good on both, better on one
		return a.StepNs <= b.StepNs && a.Peak <= b.Peak && (a.StepNs < b.StepNs || a.Peak < b.Peak)
	}
	for trial := range 500 {
		n := rng.IntN(30)
		entries := make([]sweepEntry, n)
		for i := range entries {
			entries[i] = sweepEntry{Index: i, StepNs: 1 + rng.Int64N(20), Peak: 1 + rng.Int64N(20)} // ties are common
			if rng.IntN(5) == 0 {
				entries[i] = sweepEntry{Index: i, Error: "infeasible"}
			}
		}
		slices.SortFunc(entries, func(a, b sweepEntry) int { // as search.Rank
			return cmp.Or(cmp.Compare(btoi(a.Error != ""), btoi(b.Error != "")), cmp.Compare(a.StepNs, b.StepNs),
				cmp.Compare(a.Peak, b.Peak), cmp.Compare(a.Index, b.Index))
		})
		front := sweepFront(entries)
		on := map[int]bool{}
		for i, f := range front {
			on[f.Index] = true
			require.Empty(t, f.Error)
			if i > 0 {
				require.Greater(t, f.StepNs, front[i-1].StepNs, "trial %d", trial)
				require.Less(t, f.Peak, front[i-1].Peak, "trial %d", trial)
			}
		}
		for _, e := range entries {
			if e.Error != "" {
				continue
			}
			dominated := slices.ContainsFunc(entries, func(o sweepEntry) bool { return o.Error == "" && dominates(o, e) })
			// Of entries equal on both figures, the front keeps the one ranked first.
			repeated := slices.ContainsFunc(front, func(f sweepEntry) bool { return f.Index != e.Index && f.StepNs == e.StepNs && f.Peak == e.Peak })
			require.Equal(t, !dominated && !repeated, on[e.Index], "trial %d: entry %+v", trial, e)
		}
		require.Equal(t, len(front) > 0, slices.ContainsFunc(entries, func(e sweepEntry) bool { return e.Error == "" }))
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// --plot draws the sweep, the front named in it, and the table and --json
// say the same front; a merge of the shards draws the whole sweep's. A
// path with no image format is refused before the sweep.
func TestSweepPlot(t *testing.T) {
	dir := t.TempDir()
	args := []string{"sweep", "--model", "gpt2s-blocks:layers=2,hidden=64,heads=4,seq=16", "--cluster", "dgx-a100", "--batch", "16", "--devices", "4", "--max-mb", "4"}
	out, err := run(t, append(args, "--json")...)
	require.NoError(t, err)
	var file sweepFile
	require.NoError(t, json.Unmarshal([]byte(out), &file))
	front := sweepFront(dropFoundAgain(file.Entries, file.Batch))
	require.GreaterOrEqual(t, len(front), 2, "ZeRO and micro-batches trade time for memory")
	require.Equal(t, frontIndices(front), file.Front)
	require.Equal(t, file.Entries[0].Index, file.Front[0], "the fastest strategy is on the front")

	svg := filepath.Join(dir, "sweep.svg")
	text, err := run(t, append(args, "--plot", svg)...)
	require.NoError(t, err)
	require.Contains(t, text, "memory–time front")
	require.Contains(t, text, "    1  "+front[0].Strategy)
	require.Contains(t, text, "wrote "+svg)
	img, err := os.ReadFile(svg)
	require.NoError(t, err)
	require.Contains(t, string(img), "<svg")
	require.Contains(t, string(img), "memory–time front")
	require.Contains(t, string(img), front[len(front)-1].Strategy)

	shards := writeShards(t, args, args)
	png := filepath.Join(dir, "merged.png")
	merged, err := run(t, "sweep", "merge", "--json", "--plot", png, shards[1], shards[0])
	require.NoError(t, err)
	var m sweepFile
	require.NoError(t, json.Unmarshal([]byte(merged), &m))
	require.Equal(t, file.Front, m.Front, "the shards' merge finds the whole sweep's front")
	info, err := os.Stat(png)
	require.NoError(t, err)
	require.Positive(t, info.Size())

	// Where nothing is feasible, the ranking says why, and then --plot
	// fails.
	text, err = run(t, "sweep", "--model", "llama2-7b", "--cluster", "dgx-a100", "--devices", "2", "--batch", "2", "--max-mb", "1", "--plot", svg)
	require.ErrorContains(t, err, "no strategy is feasible: nothing to draw")
	require.Contains(t, text, "infeasible")
	_, err = run(t, append(args, "--plot", filepath.Join(dir, "sweep.txt"))...)
	require.ErrorContains(t, err, "--plot "+filepath.Join(dir, "sweep.txt")+": want a file ending in .png, .svg")
	_, err = run(t, "sweep", "merge", "--plot", filepath.Join(dir, "no", "such", "dir", "x.svg"), shards[0], shards[1])
	require.ErrorContains(t, err, "--plot")
}
