package cuda

import (
	"testing"

	"github.com/flowkit/flowkit/graph"
)

// bnShapes are [n, c, hw]: a channel of one value, one sample, one
// position, one channel, channels of fewer values than a block and of
// sizes not multiples of it, and channels cut into several segments, the
// last one short.
var bnShapes = [][3]int{{1, 3, 1}, {1, 2, 7}, {16, 3, 1}, {2, 3, 5}, {7, 1, 300}, {3, 5, 49}, {4, 2, 2100}, {1, 1, 20000}}

func TestBatchNormGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(10)
	const eps = 1e-5
	for _, dt := range dtypes {
		for i, sh := range bnShapes {
			n, c, hw := sh[0], sh[1], sh[2]
			// Values far from 0 in one shape: the variance must not come
			// from a difference of large sums.
			lo, hi := -2.0, 3.0
			if i == len(bnShapes)-2 {
				lo, hi = 20, 22
			}
			t.Run(name(dt, "/", sh), func(t *testing.T) {
				size := n * c * hw
				x, g, b, dy := randIn(rng, dt, size, lo, hi), randIn(rng, dt, c, 0.5, 1.5), randIn(rng, dt, c, -1, 1), randIn(rng, dt, size, -1, 1)
				px, pg, pb, py := e.put(t, dt, x), e.put(t, dt, g), e.put(t, dt, b), e.alloc(t, dt, size)
				fwork := e.alloc(t, graph.F32, int(BatchNormForwardWorkspace(n, c, hw)/4))
				must(t, e.k.BatchNorm(e.s, dt, px, pg, pb, py, fwork, n, c, hw, eps))
				wy, _, _ := refBatchNorm(to64(x), to64(g), to64(b), n, c, hw, eps)
				check(t, "BatchNorm y", dt, e.get(t, dt, py, size), wy, compound)

				pdy, pdx, pdg, pdb := e.put(t, dt, dy), e.alloc(t, dt, size), e.alloc(t, dt, c), e.alloc(t, dt, c)
				work := e.alloc(t, graph.F32, int(BatchNormWorkspace(n, c, hw)/4))
				must(t, e.k.BatchNormBackward(e.s, dt, px, pg, pdy, pdx, pdg, pdb, work, n, c, hw, eps))
				wdx, wdg, wdb := refBatchNormBwd(to64(x), to64(g), to64(dy), n, c, hw, eps)
				check(t, "BatchNormBackward dx", dt, e.get(t, dt, pdx, size), wdx, compound)
				check(t, "BatchNormBackward dgamma", dt, e.get(t, dt, pdg, c), wdg, compound)
				check(t, "BatchNormBackward dbeta", dt, e.get(t, dt, pdb, c), wdb, compound)
			})
		}
	}
}

// TestBatchNormSplit checks the split of channels among blocks: segments
// of whole blocks that cover each channel, about bnBlocks blocks where
// the channels are long enough, and none shorter than bnMinSeg values
// unless the channel is.
func TestBatchNormSplit(t *testing.T) {
	for _, sh := range [][2]int{{1, 1}, {3, 255}, {1, 20000}, {64, 256 * 3136}, {256, 256 * 784}, {2048, 256 * 49}, {1, 1 << 30}} {
		c, m := sh[0], sh[1]
		seg, segs := bnSplit(c, m)
		switch {
		case seg%threads != 0 || seg <= 0:
			t.Errorf("c=%d m=%d: segments of %d values, not whole blocks", c, m, seg)
		case (segs-1)*seg >= m || segs*seg < m:
			t.Errorf("c=%d m=%d: %d segments of %d do not cover the channel exactly", c, m, segs, seg)
		case segs > 1 && seg < bnMinSeg:
			t.Errorf("c=%d m=%d: %d segments of %d values, below %d", c, m, segs, seg, bnMinSeg)
		case c*segs > 2*bnBlocks && segs > 1:
			t.Errorf("c=%d m=%d: %d blocks", c, m, c*segs)
		case m >= bnMinSeg*bnBlocks && c*segs < bnBlocks:
			t.Errorf("c=%d m=%d: only %d blocks", c, m, c*segs)
		}
	}
}
