package cpu

import "math"

// Softmax sets each row of y [rows, cols] to the softmax of the same row of
// x, computed as exp(x − max) over its sum so that no logit overflows. y may
// alias x.
func Softmax(p *Pool, x, y []float32, rows, cols int) {
	checkLen("Softmax", "x", len(x), rows*cols)
	checkLen("Softmax", "y", len(y), rows*cols)
	if cols == 0 {
		return
	}
	p.For(rows, rowGrain(cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, yr := x[r*cols:(r+1)*cols], y[r*cols:(r+1)*cols]
			yr = yr[:len(xr)]
			inv := float32(1 / expInto(xr, yr, maxOf(xr)))
			for i := range yr {
				yr[i] *= inv
			}
		}
	})
}

// SoftmaxBackward sets dx to the gradient with respect to Softmax's input,
// given its output y: dx = y ⊙ (dy − Σ_j y_j·dy_j), row by row.
func SoftmaxBackward(p *Pool, y, dy, dx []float32, rows, cols int) {
	checkLen("SoftmaxBackward", "y", len(y), rows*cols)
	checkLen("SoftmaxBackward", "dy", len(dy), rows*cols)
	checkLen("SoftmaxBackward", "dx", len(dx), rows*cols)
	p.For(rows, rowGrain(cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			yr, dyr, dxr := y[r*cols:(r+1)*cols], dy[r*cols:(r+1)*cols], dx[r*cols:(r+1)*cols]
			dyr, dxr = dyr[:len(yr)], dxr[:len(yr)]
			var dot float64
			for i, v := range yr {
				dot += float64(v) * float64(dyr[i])
			}
			d := float32(dot)
			for i, v := range yr {
				dxr[i] = v * (dyr[i] - d)
			}
		}
	})
}

// SoftmaxCrossEntropy returns the mean over the scored rows of the
// cross-entropy between softmax(logits) and the one-hot labels:
// −(1/n)·Σ_r log softmax(logits)[r, labels[r]] over the n rows whose label
// is not IgnoreLabel, each term computed as a log-sum-exp in float64 so
// that logits of any finite size are safe. A label outside [0, cols), but
// IgnoreLabel, is an error wrapping ErrIndex that names its row; no scored
// rows give a loss of 0. The rows are summed in blocks fixed by the shape,
// so the loss does not depend on the number of workers.
func SoftmaxCrossEntropy(p *Pool, logits []float32, labels []int32, rows, cols int) (loss float32, err error) {
	checkLen("SoftmaxCrossEntropy", "logits", len(logits), rows*cols)
	checkLen("SoftmaxCrossEntropy", "labels", len(labels), rows)
	scored, err := checkLabels("SoftmaxCrossEntropy", labels, cols)
	if err != nil || scored == 0 {
		return 0, err
	}
	block := rowGrain(cols)
	partial := make([]float64, (rows+block-1)/block)
	p.For(len(partial), 1, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			var s float64
			for r := b * block; r < min((b+1)*block, rows); r++ {
				if labels[r] == IgnoreLabel {
					continue
				}
				row := logits[r*cols : (r+1)*cols]
				m := maxOf(row)
				s += float64(m) + math.Log(sumExp(row, m)) - float64(row[labels[r]])
			}
			partial[b] = s
		}
	})
	var total float64
	for _, s := range partial {
		total += s
	}
	return float32(total / float64(scored)), nil
}

// SoftmaxCrossEntropyBackward sets dlogits to the gradient of
// SoftmaxCrossEntropy scaled by dloss: dloss·(softmax(logits) −
// onehot(labels))/n over the n scored rows, and zero on the rows labelled
// IgnoreLabel. It checks the labels as SoftmaxCrossEntropy does, before
// writing anything.
func SoftmaxCrossEntropyBackward(p *Pool, logits []float32, labels []int32, dloss float32, dlogits []float32, rows, cols int) error {
	checkLen("SoftmaxCrossEntropyBackward", "logits", len(logits), rows*cols)
	checkLen("SoftmaxCrossEntropyBackward", "labels", len(labels), rows)
	checkLen("SoftmaxCrossEntropyBackward", "dlogits", len(dlogits), rows*cols)
	scored, err := checkLabels("SoftmaxCrossEntropyBackward", labels, cols)
	if err != nil {
		return err
	}
	scale := float64(dloss) / float64(max(scored, 1))
	p.For(rows, rowGrain(cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row, dr := logits[r*cols:(r+1)*cols], dlogits[r*cols:(r+1)*cols]
			dr = dr[:len(row)]
			if labels[r] == IgnoreLabel {
				clear(dr)
				continue
			}
			k := scale / expInto(row, dr, maxOf(row))
			l := labels[r]
			pl := float64(dr[l]) * k
			for i, e := range dr {
				dr[i] = float32(float64(e) * k)
			}
			dr[l] = float32(pl - scale)
		}
	})
	return nil
}
