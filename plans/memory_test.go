package plans

import (
	"fmt"
	"sort"
	"testing"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/units"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
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

// pack gives every register the offset and every device the peak that the
// first fit over all live registers gives, over plans with pipelines,
// replicas, tensor parallelism, ZeRO, recompute and both schedules, and
// deep ones: with its index where it chooses, everywhere it can, and
// nowhere (the scan of the placed registers by offset).
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
		// Deep enough that pack indexes by itself.
		{"gpt:layers=48,hidden=32,heads=2,seq=8,vocab=64", "single", 8, 1},
		{"gpt:layers=48,hidden=32,heads=2,seq=8,vocab=64", "recompute=selective", 8, 1},
		{"gpt:layers=32,hidden=32,heads=2,seq=8,vocab=64", "pp=2,mb=2,recompute=full", 4, 2},
		{"gpt2s-blocks:layers=32,hidden=32,heads=2,seq=8", "dp=2,mb=2,zero=2", 8, 2},
	} {
		t.Run(fmt.Sprintf("%s/%s", c.model, c.strategy), func(t *testing.T) {
			st, err := ParseStrategy(c.strategy, c.batch)
			require.NoError(t, err)
			p, err := Compile(Config{Model: c.model, Batch: c.batch, Strategy: st,
				Optimizer: graph.SGD{LR: 0.01, Momentum: 0.9}, Devices: devs(c.devices, 0)})
			require.NoError(t, err)
			sharing, indexed := requirePackFirstFit(t, p)
			require.True(t, sharing, "no device shares memory: the case tests nothing")
			require.Positive(t, indexed, "no register is indexed: the case tests the scan only")
		})
	}
}

// The same over plans drawn at random: GPTs of a few layers, with or
// without pipelines, replicas, micro-batches, recompute, under either
// schedule.
func TestPackMatchesFirstFitRandomPlans(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		pp := rapid.IntRange(1, 3).Draw(rt, "pp")
		dp := rapid.IntRange(1, 2).Draw(rt, "dp")
		mb := rapid.IntRange(1, 5).Draw(rt, "mb")
		layers := rapid.IntRange(pp, 6).Draw(rt, "layers")
		strategy := fmt.Sprintf("dp=%d,pp=%d,mb=%d,sched=%s%s", dp, pp, mb,
			rapid.SampledFrom([]string{"1f1b", "gpipe"}).Draw(rt, "sched"),
			rapid.SampledFrom([]string{"", ",recompute=full", ",recompute=selective"}).Draw(rt, "recompute"))
		st, err := ParseStrategy(strategy, dp*mb)
		require.NoError(rt, err, strategy)
		p, err := Compile(Config{Model: fmt.Sprintf("gpt:layers=%d,hidden=32,heads=2,seq=8,vocab=64", layers), Batch: dp * mb,
			Strategy: st, Optimizer: graph.SGD{LR: 0.01, Momentum: 0.9}, Devices: devs(dp*pp, 0)})
		require.NoError(rt, err, strategy)
		requirePackFirstFit(rt, p)
	})
}

// requirePackFirstFit packs every device of plan p as pack does, with the
// index everywhere it can and nowhere, and requires the offsets and
// memory packFirstFit gives. It reports whether some device shares memory
// and how many registers the index took.
func requirePackFirstFit(t require.TestingT, p *Plan) (sharing bool, indexed int) {
	edges, err := p.Deps()
	require.NoError(t, err)
	lives := newLifetimes(p, edges, p.registerTouches(), p.versionTouches())
	byDevice := make([][]int, len(p.Devices))
	for r := range p.Registers {
		byDevice[p.Registers[r].Device] = append(byDevice[p.Registers[r].Device], r)
	}
	for d := range p.Devices {
		want := packFirstFit(p, lives, d, byDevice[d])
		wantOff := make([]units.Bytes, len(byDevice[d]))
		for i, r := range byDevice[d] {
			wantOff[i] = p.Registers[r].Offset
		}
		for _, use := range []indexUse{indexWorthIt, indexAll, indexNone} {
			got := packBy(p, lives, d, byDevice[d], use)
			require.Equal(t, want, got, "device %d's memory (index use %d)", d, use)
			for i, r := range byDevice[d] {
				require.Equal(t, wantOff[i], p.Registers[r].Offset, "register %d (%s), index use %d: got offset %v, want %v",
					r, p.Registers[r].Name, use, p.Registers[r].Offset, wantOff[i])
			}
		}
		sharing = sharing || want.Peak < want.Unshared
		var shared []int
		for _, r := range byDevice[d] {
			if !p.Registers[r].Persistent {
				shared = append(shared, r)
			}
		}
		indexed += len(newPackIndex(p, lives, shared, indexAll).by)
	}
	return sharing, indexed
}

// pack gives the offsets packFirstFit gives over lifetimes drawn at
// random, beyond what plans make: lives on one stream or several, spans
// empty or not, versions chained or not, writes before positions below −1,
// lives that are never written or not before the next iteration's writes,
// so that both the registers the index takes and those it leaves to the
// scan, and the checks that tell them apart, are tried.
func TestPackMatchesFirstFitRandomLives(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 60).Draw(rt, "registers")
		w := rapid.IntRange(1, 3).Draw(rt, "columns")
		pos := rapid.IntRange(-1, 24)
		// A life is drawn as a span on stream 0, written before the
		// next iteration's writes (as plans make them), or, one in three,
		// with one oddity.
		drawLife := func(name string, lo int) *life {
			odd := rapid.IntRange(0, 17).Draw(rt, name+" oddity")
			c := 0
			if odd == 1 {
				c = rapid.IntRange(0, w-1).Draw(rt, name+" stream")
			}
			lf := &life{last: make(clock, w), write: make(clock, w), writeNext: make(clock, w), hasWriters: odd != 2}
			for j := range w {
				lf.last[j] = -1
				lf.write[j] = int32(rapid.IntRange(-1, 24).Draw(rt, name+" write elsewhere"))
				lf.writeNext[j] = lf.write[j] + 40
			}
			write := rapid.IntRange(lo, max(lo, 24)).Draw(rt, name+" write")
			lf.write[c] = int32(write)
			lf.last[c] = int32(write + rapid.IntRange(1, 8).Draw(rt, name+" length"))
			lf.writeNext[c] = lf.write[c] + 40
			switch odd {
			case 3: // touched on another stream too
				lf.last[rapid.IntRange(0, w-1).Draw(rt, name+" other stream")] = int32(pos.Draw(rt, name+" last elsewhere"))
			case 4: // an empty span
				lf.last[c] = lf.write[c] - int32(rapid.IntRange(0, 1).Draw(rt, name+" shortfall"))
			case 5: // written after a position below −1
				lf.write[rapid.IntRange(0, w-1).Draw(rt, name+" low stream")] = -2
			}
			if odd == 6 {
				lf.writeNext[c] = int32(pos.Draw(rt, name+" early next write"))
			}
			return lf
		}
		p := &Plan{Registers: make([]Register, n)}
		lives := &lifetimes{whole: make([]*life, n), versions: make([][]*life, n)}
		regs := make([]int, n)
		for r := range n {
			regs[r] = r
			p.Registers[r] = Register{Slots: 1, SlotBytes: units.Bytes(rapid.IntRange(1, 4).Draw(rt, "aligns")*align - rapid.IntRange(0, 1).Draw(rt, "short")),
				Persistent: rapid.IntRange(0, 9).Draw(rt, "persistent") == 0}
			lives.whole[r] = drawLife("whole", -1)
			if rapid.Bool().Draw(rt, "versioned") {
				lo := -1
				for range rapid.IntRange(1, 4).Draw(rt, "versions") {
					v := drawLife("version", lo)
					lives.versions[r] = append(lives.versions[r], v)
					lo = int(v.last[0])
					if rapid.IntRange(0, 5).Draw(rt, "unchained") == 0 {
						lo = -1
					}
				}
			}
		}
		want := packFirstFit(p, lives, 0, regs)
		wantOff := make([]units.Bytes, n)
		for r := range n {
			wantOff[r] = p.Registers[r].Offset
		}
		for _, use := range []indexUse{indexAll, indexNone, indexWorthIt} {
			require.Equal(rt, want, packBy(p, lives, 0, regs, use), "index use %d", use)
			for r := range n {
				require.Equal(rt, wantOff[r], p.Registers[r].Offset, "register %d, index use %d", r, use)
			}
		}
	})
}
