package cpu

// BiasAdd sets y = x + b broadcast over a middle axis: with x and y viewed
// as [outer, c, inner], y[o,j,i] = x[o,j,i] + b[j]. For NCHW activations
// that is outer = N, c = C, inner = H·W; for a fully connected layer's
// [N, features], outer = N, c = features, inner = 1. y may alias x.
func BiasAdd(p *Pool, x, b, y []float32, outer, c, inner int) {
	checkLen("BiasAdd", "x", len(x), outer*c*inner)
	checkLen("BiasAdd", "b", len(b), c)
	checkLen("BiasAdd", "y", len(y), len(x))
	if inner == 1 {
		p.For(outer, rowGrain(c), func(lo, hi int) {
			for o := lo; o < hi; o++ {
				xr, yr := x[o*c:(o+1)*c], y[o*c:(o+1)*c]
				xr, b := xr[:len(yr)], b[:len(yr)]
				for j := range yr {
					yr[j] = xr[j] + b[j]
				}
			}
		})
		return
	}
	p.For(outer*c, rowGrain(inner), func(lo, hi int) {
		for row := lo; row < hi; row++ {
			bj := b[row%c]
			xr, yr := x[row*inner:(row+1)*inner], y[row*inner:(row+1)*inner]
			xr = xr[:len(yr)]
			for i := range yr {
				yr[i] = xr[i] + bj
			}
		}
	})
}

// BiasGrad sets db[j] = Σ over o and i of dy[o,j,i], the gradient of
// BiasAdd's b. Each worker owns a range of j, so the sums do not depend on
// the number of workers.
func BiasGrad(p *Pool, dy, db []float32, outer, c, inner int) {
	checkLen("BiasGrad", "dy", len(dy), outer*c*inner)
	checkLen("BiasGrad", "db", len(db), c)
	if inner == 1 {
		// Rows of dy run along j: add them up a row at a time.
		p.For(c, rowGrain(outer), func(lo, hi int) {
			db := db[lo:hi]
			clear(db)
			for o := range outer {
				row := dy[o*c+lo : o*c+hi]
				row = row[:len(db)]
				for j, v := range row {
					db[j] += v
				}
			}
		})
		return
	}
	p.For(c, rowGrain(outer*inner), func(lo, hi int) {
		for j := lo; j < hi; j++ {
			var s float64
			for o := range outer {
				s += sum64(dy[(o*c+j)*inner : (o*c+j+1)*inner])
			}
			db[j] = float32(s)
		}
	})
}
