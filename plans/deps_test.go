package plans

import (
	"cmp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// byTarget orders edges as a stable sort by (To, From, Delta) does, so
// that the first rule asking for an edge still names it.
func TestByTargetIsStable(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		firings := rapid.IntRange(1, 8).Draw(rt, "firings")
		f := rapid.IntRange(0, firings-1)
		edges := make([]ruled, rapid.IntRange(0, 60).Draw(rt, "edges"))
		for i := range edges {
			edges[i] = ruled{int32(f.Draw(rt, "from")), int32(f.Draw(rt, "to")), int32(rapid.IntRange(0, 1).Draw(rt, "delta")), rule(rapid.IntRange(0, 4).Draw(rt, "why")), int32(i)}
		}
		want := slices.Clone(edges)
		slices.SortStableFunc(want, func(a, b ruled) int {
			return cmp.Or(cmp.Compare(a.to, b.to), cmp.Compare(a.from, b.from), cmp.Compare(a.delta, b.delta))
		})
		got := make([]ruled, 0, len(edges))
		for _, i := range byTarget(edges, firings) {
			got = append(got, edges[i])
		}
		require.Equal(rt, want, got)
	})
}
