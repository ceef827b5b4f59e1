package cpu

import "math"

// The kernels of a vocabulary split over a tensor-parallel group
// (Megatron-LM's vocab-parallel embedding and cross-entropy): each device
// holds rows [lo, lo+v) of the embedding table, and columns [lo, lo+v) of
// the logits.

// EmbeddingPart sets row i of y [n, d] to row ids[i]−lo of table [v, d],
// the part of a larger table a device holds, or to zeros for an id outside
// [lo, lo+v): the group's sum of the parts' outputs is the whole lookup.
func EmbeddingPart(p *Pool, table []float32, ids []int32, y []float32, lo, v, d int) {
	checkLen("EmbeddingPart", "table", len(table), v*d)
	checkLen("EmbeddingPart", "y", len(y), len(ids)*d)
	p.For(len(ids), rowGrain(d), func(a, b int) {
		for i := a; i < b; i++ {
			row := y[i*d : (i+1)*d]
			if id := int(ids[i]) - lo; id >= 0 && id < v {
				copy(row, table[id*d:(id+1)*d])
			} else {
				clear(row)
			}
		}
	})
}

// EmbeddingPartBackward sets dtable [v, d] to the gradient of
// EmbeddingPart: zero, plus row i of dy for every position whose id is the
// row's, added in order of i.
func EmbeddingPartBackward(p *Pool, ids []int32, dy, dtable []float32, lo, v, d int) {
	checkLen("EmbeddingPartBackward", "dy", len(dy), len(ids)*d)
	checkLen("EmbeddingPartBackward", "dtable", len(dtable), v*d)
	Fill(p, 0, dtable)
	p.For(d, rowGrain(len(ids)), func(a, b int) {
		for i, id := range ids {
			r := int(id) - lo
			if r < 0 || r >= v {
				continue
			}
			src := dy[i*d+a : i*d+b]
			dst := dtable[r*d+a : r*d+b]
			for j, g := range src {
				dst[j] += g
			}
		}
	})
}

// VocabStats writes, for every row t of a device's logits [rows, v]
// (columns lo … lo+v−1 of a vocabulary of parts·v), the row's maximum m,
// its sum of exp(x − m), and its label's logit z (0 when the label is
// another device's), into stats [parts, rows, 3] at [part, t]; the other
// parts' entries are zero, so that the group's sum holds every part's. A
// row labelled IgnoreLabel keeps zeros, which VocabLoss reads as not
// scored (a scored row's sum of exponentials is at least 1 on the part
// that holds its maximum). A label outside the vocabulary, but
// IgnoreLabel, is an error wrapping ErrIndex.
func VocabStats(p *Pool, logits []float32, labels []int32, stats []float32, rows, v, lo, part, parts int) error {
	checkLen("VocabStats", "logits", len(logits), rows*v)
	checkLen("VocabStats", "labels", len(labels), rows)
	checkLen("VocabStats", "stats", len(stats), parts*rows*3)
	if _, err := checkLabels("VocabStats", labels, parts*v); err != nil {
		return err
	}
	Fill(p, 0, stats)
	out := stats[part*rows*3 : (part+1)*rows*3]
	p.For(rows, rowGrain(v), func(a, b int) {
		for t := a; t < b; t++ {
			if labels[t] == IgnoreLabel {
				continue
			}
			x := logits[t*v : (t+1)*v]
			m := maxOf(x)
			s := sumExp(x, m)
			var z float32
			if j := int(labels[t]) - lo; j >= 0 && j < v {
				z = x[j]
			}
			out[t*3], out[t*3+1], out[t*3+2] = m, float32(s), z
		}
	})
	return nil
}

// VocabLoss returns the mean over the scored rows of the cross-entropy
// the group's summed stats [parts, rows, 3] give: M + log Σ s_i·exp(m_i −
// M) − Σ z_i, with M the largest m_i, summed in float64. A row whose sums
// of exponentials are all zero is not scored (its label was IgnoreLabel:
// see VocabStats); no scored rows give 0.
func VocabLoss(stats []float32, rows, parts int) float32 {
	checkLen("VocabLoss", "stats", len(stats), parts*rows*3)
	var total float64
	scored := 0
	for t := range rows {
		big, sum, z := vocabRow(stats, t, rows, parts)
		if sum == 0 {
			continue
		}
		total += float64(big) + math.Log(sum) - z
		scored++
	}
	if scored == 0 {
		return 0
	}
	return float32(total / float64(scored))
}

// vocabScored counts the rows of the summed stats that VocabLoss scores.
func vocabScored(stats []float32, rows, parts int) int {
	scored := 0
	for t := range rows {
		for i := range parts {
			if stats[(i*rows+t)*3+1] != 0 {
				scored++
				break
			}
		}
	}
	return scored
}

// vocabRow combines row t of the parts' stats: the largest maximum, the
// sum of the parts' exponentials scaled to it, and the label's logit.
func vocabRow(stats []float32, t, rows, parts int) (big float32, sum, z float64) {
	big = float32(math.Inf(-1))
	for i := range parts {
		big = max(big, stats[(i*rows+t)*3])
	}
	for i := range parts {
		e := stats[(i*rows+t)*3:]
		sum += float64(e[1]) * math.Exp(float64(e[0]-big))
		z += float64(e[2])
	}
	return big, sum, z
}

// VocabLossBackward sets dstats [parts, rows, 3] to the gradient of
// VocabLoss scaled by dloss, taking each part's maximum as a constant (the
// loss does not depend on it): ∂/∂s_i = exp(m_i − M)/(n·S),
// ∂/∂z_i = −1/n over the n scored rows; zero for the others.
func VocabLossBackward(stats []float32, dloss float32, dstats []float32, rows, parts int) {
	checkLen("VocabLossBackward", "stats", len(stats), parts*rows*3)
	checkLen("VocabLossBackward", "dstats", len(dstats), parts*rows*3)
	scale := float64(dloss) / float64(max(vocabScored(stats, rows, parts), 1))
	for t := range rows {
		big, sum, _ := vocabRow(stats, t, rows, parts)
		for i := range parts {
			k := (i*rows + t) * 3
			dstats[k] = 0
			if sum == 0 { // not scored
				dstats[k+1], dstats[k+2] = 0, 0
				continue
			}
			dstats[k+1] = float32(scale * math.Exp(float64(stats[k]-big)) / sum)
			dstats[k+2] = float32(-scale)
		}
	}
}

// VocabStatsBackward sets dlogits [rows, v] to the gradient of VocabStats
// given dstats [parts, rows, 3] (this part's entries): for column j of row
// t, ds·exp(x_j − m) plus dz at the label's column, with m the row's
// maximum as VocabStats took it.
func VocabStatsBackward(p *Pool, logits []float32, labels []int32, dstats, dlogits []float32, rows, v, lo, part, parts int) error {
	checkLen("VocabStatsBackward", "logits", len(logits), rows*v)
	checkLen("VocabStatsBackward", "dlogits", len(dlogits), rows*v)
	checkLen("VocabStatsBackward", "dstats", len(dstats), parts*rows*3)
	if _, err := checkLabels("VocabStatsBackward", labels, parts*v); err != nil {
		return err
	}
	in := dstats[part*rows*3 : (part+1)*rows*3]
	p.For(rows, rowGrain(v), func(a, b int) {
		for t := a; t < b; t++ {
			x, dx := logits[t*v:(t+1)*v], dlogits[t*v:(t+1)*v]
			expInto(x, dx, maxOf(x))
			ds := in[t*3+1]
			for j := range dx {
				dx[j] *= ds
			}
			if j := int(labels[t]) - lo; j >= 0 && j < v {
				dx[j] += in[t*3+2]
			}
		}
	})
	return nil
}
