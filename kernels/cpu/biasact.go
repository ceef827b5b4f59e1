package cpu

import "fmt"

// Activation is the nonlinearity a fused kernel applies.
type Activation uint8

const (
	ActReLU Activation = iota + 1 // max(x, 0), as ReLU computes it
	ActGELU                       // x·Φ(x), as GELU computes it
)

// ParseActivation returns the activation named s: "relu" or "gelu".
func ParseActivation(s string) (Activation, error) {
	switch s {
	case "relu":
		return ActReLU, nil
	case "gelu":
		return ActGELU, nil
	}
	return 0, fmt.Errorf("cpu: unknown activation %q (want relu or gelu)", s)
}

func (a Activation) String() string {
	switch a {
	case ActReLU:
		return "relu"
	case ActGELU:
		return "gelu"
	}
	return fmt.Sprintf("Activation(%d)", uint8(a))
}

// grain is the fewest elements of a loop applying a to hand to one worker;
// it panics if a is not an activation.
func (a Activation) grain(kernel string) int {
	switch a {
	case ActReLU:
		return grainElems
	case ActGELU:
		return grainElems / 8 // erf and exp cost as much as eight adds
	}
	panic(fmt.Errorf("cpu: %s: unknown activation %v", kernel, a))
}

// BiasAct sets y = act(x + b), b broadcast over a middle axis as BiasAdd
// broadcasts it: with x and y viewed as [outer, c, inner], y[o,j,i] =
// act(x[o,j,i] + b[j]). x + b is rounded to float32 first, so y is bit for
// bit what BiasAdd followed by ReLU or GELU computes. y may alias x.
func BiasAct(p *Pool, act Activation, x, b, y []float32, outer, c, inner int) {
	checkLen("BiasAct", "x", len(x), outer*c*inner)
	checkLen("BiasAct", "b", len(b), c)
	checkLen("BiasAct", "y", len(y), len(x))
	grain := act.grain("BiasAct")
	if inner == 1 {
		p.For(outer, max(1, grain/max(1, c)), func(lo, hi int) {
			for o := lo; o < hi; o++ {
				xr, yr := x[o*c:(o+1)*c], y[o*c:(o+1)*c]
				xr, b := xr[:len(yr)], b[:len(yr)]
				if act == ActReLU {
					reluRowsDefault.fwdVec(xr, b, yr)
				} else {
					for j := range yr {
						yr[j] = xr[j] + b[j]
					}
					geluInto(yr, yr)
				}
			}
		})
		return
	}
	p.For(outer*c, max(1, grain/max(1, inner)), func(lo, hi int) {
		for row := lo; row < hi; row++ {
			bj := b[row%c]
			xr, yr := x[row*inner:(row+1)*inner], y[row*inner:(row+1)*inner]
			xr = xr[:len(yr)]
			if act == ActReLU {
				reluRowsDefault.fwd(xr, bj, yr)
			} else {
				for i := range yr {
					yr[i] = xr[i] + bj
				}
				geluInto(yr, yr)
			}
		}
	})
}

// BiasActBackward sets dx = dy ⊙ act′(x + b), the gradient of BiasAct with
// respect to x; BiasGrad of dx is the gradient of b. It recomputes x + b,
// rounded as BiasAct rounds it, and applies ReLUBackward's or
// GELUBackward's rule to it, bit for bit. dx may alias dy.
func BiasActBackward(p *Pool, act Activation, x, b, dy, dx []float32, outer, c, inner int) {
	checkLen("BiasActBackward", "x", len(x), outer*c*inner)
	checkLen("BiasActBackward", "b", len(b), c)
	checkLen("BiasActBackward", "dy", len(dy), len(x))
	checkLen("BiasActBackward", "dx", len(dx), len(x))
	grain := act.grain("BiasActBackward")
	if inner == 1 {
		p.For(outer, max(1, grain/max(1, c)), func(lo, hi int) {
			for o := lo; o < hi; o++ {
				xr, dyr, dxr := x[o*c:(o+1)*c], dy[o*c:(o+1)*c], dx[o*c:(o+1)*c]
				xr, dyr, b := xr[:len(dxr)], dyr[:len(dxr)], b[:len(dxr)]
				if act == ActReLU {
					reluRowsDefault.bwdVec(xr, b, dyr, dxr)
				} else {
					geluGradBias(xr, b, dyr, dxr)
				}
			}
		})
		return
	}
	p.For(outer*c, max(1, grain/max(1, inner)), func(lo, hi int) {
		for row := lo; row < hi; row++ {
			bj := b[row%c]
			xr, dyr, dxr := x[row*inner:(row+1)*inner], dy[row*inner:(row+1)*inner], dx[row*inner:(row+1)*inner]
			xr, dyr = xr[:len(dxr)], dyr[:len(dxr)]
			if act == ActReLU {
				reluRowsDefault.bwd(xr, bj, dyr, dxr)
			} else {
				geluGradBias(xr, []float32{bj}, dyr, dxr)
			}
		}
	})
}

// geluGradBias sets dx = geluGrad(x + b, dy), with b as long as x or of one
// element for all, x + b rounded to float32 as BiasAct rounds it; dx may
// alias dy.
func geluGradBias(x, b, dy, dx []float32) {
	var z [geluBlock]float64
	for lo := 0; lo < len(x); lo += geluBlock {
		n := min(geluBlock, len(x)-lo)
		zc := z[:n]
		if len(b) == 1 {
			for k, v := range x[lo : lo+n] {
				zc[k] = float64(v + b[0])
			}
		} else {
			for k, v := range x[lo : lo+n] {
				zc[k] = float64(v + b[lo+k])
			}
		}
		geluGrad64(zc, dy[lo:lo+n], dx[lo:lo+n])
	}
}
