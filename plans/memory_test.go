package plans

import (
	"fmt"
	"sort"
	"testing"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/units"

	"github.com/stretchr/testify/require"
)

// packFirstFit is pack as first written: for each register, largest
// first, the intervals of every placed register it may be live with,
// sorted by offset, and the first gap that holds it. pack must place every
// register where this does.
func packFirstFit(p *Plan, lives *lifetimes, d int, regs []int) Memory {
	var persistent, shared []int
	var unshared units.Bytes
	for _, r := range regs {
		reg := &p.Registers[r]
		unshared += roundUp(reg.Bytes())
		if reg.Persistent {
			persistent = append(persistent, r)
		} else {
			shared = append(shared, r)
		}
	}
	var off units.Bytes
	for _, r := range persistent {
		p.Registers[r].Offset = off
		off += roundUp(p.Registers[r].Bytes())
	}
	base := off
	sort.SliceStable(shared, func(i, j int) bool {
		return p.Registers[shared[i]].Bytes() > p.Registers[shared[j]].Bytes()
	})
	var placed []int
	peak := base
	for _, r := range shared {
		size := roundUp(p.Registers[r].Bytes())
		var busy [][2]units.Bytes
		for _, q := range placed {
			if !lives.disjoint(r, q) {
				o := p.Registers[q].Offset
				busy = append(busy, [2]units.Bytes{o, o + roundUp(p.Registers[q].Bytes())})
			}
		}
		sort.Slice(busy, func(i, j int) bool { return busy[i][0] < busy[j][0] })
		at := base
		for _, b := range busy {
			if at+size <= b[0] {
				break
			}
			at = max(at, b[1])
		}
		p.Registers[r].Offset = at
		placed = append(placed, r)
		peak = max(peak, at+size)
	}
	return Memory{Device: d, Peak: peak, Persistent: base, Unshared: unshared}
}

// pack, which scans the placed registers by offset and asks about
// lifetimes only where bytes overlap, gives every register the offset and
// every device the peak that the first-fit over all live registers gives,
// over plans with pipelines, replicas, tensor parallelism, ZeRO, recompute
// and both schedules.
func TestPackMatchesFirstFit(t *testing.T) {
	for _, c := range []struct {
		model, strategy string
		batch, devices  int
	}{
		{"mnist-cnn", "single", 8, 1},
		{"mnist-cnn", "dp=2,pp=2,mb=4", 16, 4},
		{"mnist-cnn", "pp=2,mb=3,sched=gpipe", 6, 2},
		{"mlp", "dp=2,mb=2:1", 6, 2},
		{"mlp3x4096:width=64", "tp=2,pp=2,mb=3", 6, 4},
		{"gpt:layers=4,hidden=32,heads=2,seq=8,vocab=64", "pp=2,mb=4,recompute=full", 8, 2},
		{"gpt:layers=4,hidden=32,heads=2,seq=8,vocab=64", "pp=4,mb=8", 8, 4},
		{"gpt:layers=4,hidden=32,heads=2,seq=8,vocab=64", "pp=2,mb=4,vpp=2", 8, 2},
		{"gpt:layers=2,hidden=32,heads=2,seq=8,vocab=64", "tp=2,mb=3,recompute=selective", 6, 2},
		{"gpt:layers=2,hidden=32,heads=2,seq=8,vocab=64", "dp=2,tp=2,sp=on,mb=2,zero=3,prefetch=1", 8, 4},
		{"gpt2s-blocks:layers=4,hidden=32,heads=2,seq=8", "pp=2,mb=4,sched=gpipe,recompute=full", 8, 2},
		{"gpt2s-blocks:layers=4,hidden=32,heads=2,seq=8", "dp=4,mb=2,zero=2", 16, 4},
	} {
		t.Run(fmt.Sprintf("%s/%s", c.model, c.strategy), func(t *testing.T) {
			st, err := ParseStrategy(c.strategy, c.batch)
			require.NoError(t, err)
			p, err := Compile(Config{Model: c.model, Batch: c.batch, Strategy: st,
				Optimizer: graph.SGD{LR: 0.01, Momentum: 0.9}, Devices: devs(c.devices, 0)})
			require.NoError(t, err)
			edges, err := p.Deps()
			require.NoError(t, err)
			lives := newLifetimes(p, edges, p.registerTouches(), p.versionTouches())
			byDevice := make([][]int, len(p.Devices))
			for r := range p.Registers {
				byDevice[p.Registers[r].Device] = append(byDevice[p.Registers[r].Device], r)
			}
			sharing := false
			for d := range p.Devices {
				got := pack(p, lives, d, byDevice[d])
				gotOff := make([]units.Bytes, len(byDevice[d]))
				for i, r := range byDevice[d] {
					gotOff[i] = p.Registers[r].Offset
				}
				want := packFirstFit(p, lives, d, byDevice[d])
				require.Equal(t, want, got, "device %d's memory", d)
				for i, r := range byDevice[d] {
					require.Equal(t, p.Registers[r].Offset, gotOff[i], "register %d (%s): got offset %v, want %v",
						r, p.Registers[r].Name, gotOff[i], p.Registers[r].Offset)
				}
				sharing = sharing || got.Peak < got.Unshared
			}
			require.True(t, sharing, "no device shares memory: the case tests nothing")
		})
	}
}
