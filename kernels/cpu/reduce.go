package cpu

// The reductions view x as [outer, r, inner] and reduce over the middle
// axis into y [outer, inner]: any axis of a row-major tensor is a middle axis
// once the axes before it are folded into outer and those after into inner.

// ReduceSum sets y[o,i] = Σ_j x[o,j,i].
func ReduceSum(p *Pool, x, y []float32, outer, r, inner int) {
	checkLen("ReduceSum", "x", len(x), outer*r*inner)
	checkLen("ReduceSum", "y", len(y), outer*inner)
	if inner == 1 {
		p.For(outer, rowGrain(r), func(lo, hi int) {
			for o := lo; o < hi; o++ {
				y[o] = float32(sum64(x[o*r : (o+1)*r]))
			}
		})
		return
	}
	p.For(outer*inner, rowGrain(r), func(lo, hi int) {
		eachSegment(lo, hi, inner, func(o, i0, i1 int) {
			dst := y[o*inner+i0 : o*inner+i1]
			clear(dst)
			for j := range r {
				src := x[(o*r+j)*inner+i0 : (o*r+j)*inner+i1]
				src = src[:len(dst)]
				for i, v := range src {
					dst[i] += v
				}
			}
		})
	})
}

// ReduceMax sets y[o,i] = max_j x[o,j,i]; a NaN in a slice makes its
// maximum NaN.
func ReduceMax(p *Pool, x, y []float32, outer, r, inner int) {
	checkLen("ReduceMax", "x", len(x), outer*r*inner)
	checkLen("ReduceMax", "y", len(y), outer*inner)
	if r < 1 {
		panic(shapeErr("ReduceMax", "r = %d, want ≥ 1", r))
	}
	if inner == 1 {
		p.For(outer, rowGrain(r), func(lo, hi int) {
			for o := lo; o < hi; o++ {
				y[o] = maxOf(x[o*r : (o+1)*r])
			}
		})
		return
	}
	p.For(outer*inner, rowGrain(r), func(lo, hi int) {
		eachSegment(lo, hi, inner, func(o, i0, i1 int) {
			dst := y[o*inner+i0 : o*inner+i1]
			copy(dst, x[o*r*inner+i0:o*r*inner+i1])
			for j := 1; j < r; j++ {
				src := x[(o*r+j)*inner+i0 : (o*r+j)*inner+i1]
				src = src[:len(dst)]
				for i, v := range src {
					dst[i] = max(dst[i], v)
				}
			}
		})
	})
}

// BroadcastAxis sets y[o,j,i] = x[o,i], copying x along the middle axis:
// the gradient of ReduceSum.
func BroadcastAxis(p *Pool, x, y []float32, outer, r, inner int) {
	checkLen("BroadcastAxis", "x", len(x), outer*inner)
	checkLen("BroadcastAxis", "y", len(y), outer*r*inner)
	if inner == 1 {
		p.For(outer, rowGrain(r), func(lo, hi int) {
			for o := lo; o < hi; o++ {
				v, row := x[o], y[o*r:(o+1)*r]
				for j := range row {
					row[j] = v
				}
			}
		})
		return
	}
	p.For(outer*r, rowGrain(inner), func(lo, hi int) {
		for row := lo; row < hi; row++ {
			o := row / r
			copy(y[row*inner:(row+1)*inner], x[o*inner:(o+1)*inner])
		}
	})
}

// eachSegment splits the range [lo, hi) of a flattened [outer, inner] index
// space into runs within one o, calling f(o, i0, i1) for each.
func eachSegment(lo, hi, inner int, f func(o, i0, i1 int)) {
	for lo < hi {
		o, i0 := lo/inner, lo%inner
		i1 := min(inner, i0+hi-lo)
		f(o, i0, i1)
		lo += i1 - i0
	}
}

// maxOf returns the maximum of a non-empty s, NaN if s holds one.
func maxOf(s []float32) float32 {
	m := s[0]
	for _, v := range s[1:] {
		m = max(m, v)
	}
	return m
}
