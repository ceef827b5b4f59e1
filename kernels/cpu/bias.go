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
		// Rows of dy run along j: add them up a row at a time, four rows
		// a pass over db (each db[j] still adds its rows in order).
		p.For(c, rowGrain(outer), func(lo, hi int) {
			db := db[lo:hi]
			clear(db)
			o := 0
			for ; o+4 <= outer; o += 4 {
				r0 := dy[o*c+lo : o*c+hi]
				r0 = r0[:len(db)]
				r1 := dy[(o+1)*c+lo : (o+1)*c+hi]
				r1 = r1[:len(db)]
				r2 := dy[(o+2)*c+lo : (o+2)*c+hi]
				r2 = r2[:len(db)]
				r3 := dy[(o+3)*c+lo : (o+3)*c+hi]
				r3 = r3[:len(db)]
				for j, v := range r0 {
					db[j] = db[j] + v + r1[j] + r2[j] + r3[j]
				}
			}
			for ; o < outer; o++ {
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
