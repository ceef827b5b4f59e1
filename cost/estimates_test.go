package cost

import (
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
)

// A cached Estimate is the one a fresh model computes, whatever was asked
// before it: collectives drawn at random (ops, algorithms, groups in any
// order, sizes) over a cluster of several nodes, asked of
// one model again and again, each checked against a model that has priced
// nothing.
func TestCollectiveCacheIsFresh(t *testing.T) {
	c, err := topology.Preset("dgx-a100x4")
	require.NoError(t, err)
	m := NewComm(c)
	sizes := []units.Bytes{0, 1, 4096, 1 << 20, 3 << 27}
	rapid.Check(t, func(rt *rapid.T) {
		op := Op(rapid.IntRange(0, int(OpBroadcast)).Draw(rt, "op"))
		algo := Algo(rapid.IntRange(0, int(Direct)).Draw(rt, "algo"))
		n := rapid.IntRange(1, len(c.Devices)).Draw(rt, "ranks")
		perm := rapid.Permutation(ids(0, len(c.Devices))).Draw(rt, "devices")
		group := perm[:n]
		switch rapid.SampledFrom([]string{"drawn", "first of each node", "all"}).Draw(rt, "group") {
		case "first of each node": // a group spread over nodes as data parallelism's is
			group = group[:0]
			for d := 0; d < len(c.Devices); d += 8 {
				group = append(group, topology.DeviceID(d))
			}
		case "all": // one that packs many channels
			group = ids(0, len(c.Devices))
		}
		size := rapid.SampledFrom(sizes).Draw(rt, "size")
		// A caller may change MaxChannels between calls: no cache may
		// answer for another bound.
		m.MaxChannels = rapid.SampledFrom([]int{16, 1, 2, 4}).Draw(rt, "max channels")
		fresh := NewComm(c)
		fresh.MaxChannels = m.MaxChannels
		want, wantErr := fresh.collective(op, group, size, algo)
		for range 2 { // a miss or a hit, then a hit
			got, err := m.Collective(op, group, size, algo)
			if wantErr != nil {
				require.EqualError(rt, err, wantErr.Error())
				continue
			}
			require.NoError(rt, err)
			require.Equal(rt, want, got)
			if len(got.Links) > 0 {
				got.Links[0].Share = -1 // the caller's copy: the cache must not see it
			}
		}
	})
}
