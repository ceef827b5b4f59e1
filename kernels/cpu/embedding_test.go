package cpu

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func embeddingRef(table []float64, ids []int32, d int) []float64 {
	y := make([]float64, 0, len(ids)*d)
	for _, id := range ids {
		y = append(y, table[int(id)*d:(int(id)+1)*d]...)
	}
	return y
}

var embeddingCases = []struct{ v, d, n int }{
	{1, 1, 1}, {5, 3, 8}, {11, 7, 4}, {3, 1, 9}, {50, 4, 0}, {100, 64, 2 * grainElems / 64},
}

func TestEmbedding(t *testing.T) {
	for i, c := range embeddingCases {
		table := randSlice(newRNG(uint64(i)), c.v*c.d)
		ids := randLabels(uint64(i), c.n, c.v)
		want := embeddingRef(to64(table), ids, c.d)
		for _, tp := range testPools {
			t.Run(fmt.Sprintf("v%dd%dn%d/%s", c.v, c.d, c.n, tp.name), func(t *testing.T) {
				y := make([]float32, c.n*c.d)
				if err := Embedding(tp.p, table, ids, y, c.v, c.d); err != nil {
					t.Fatalf("got error %v, want nil", err)
				}
				checkClose(t, "y", y, want, 0)
			})
		}
	}
}

func TestEmbeddingBackward(t *testing.T) {
	for i, c := range embeddingCases {
		table := randSlice(newRNG(uint64(i)+5), c.v*c.d)
		ids := randLabels(uint64(i)+5, c.n, c.v)
		r := randSlice(newRNG(uint64(i)+6), c.n*c.d)
		var want []float64
		if c.v*c.d <= 1000 {
			want = centralDiff(projected(r, func(tab []float64) []float64 { return embeddingRef(tab, ids, c.d) }), to64(table), fdStep)
		} else { // too large for finite differences: the scatter-add it stands for
			want = make([]float64, c.v*c.d)
			for k, id := range ids {
				for j := range c.d {
					want[int(id)*c.d+j] += float64(r[k*c.d+j])
				}
			}
		}
		var serial []float32
		for _, tp := range testPools {
			t.Run(fmt.Sprintf("v%dd%dn%d/%s", c.v, c.d, c.n, tp.name), func(t *testing.T) {
				dtable := randSlice(newRNG(9), c.v*c.d)
				if err := EmbeddingBackward(tp.p, ids, r, dtable, c.v, c.d); err != nil {
					t.Fatalf("got error %v, want nil", err)
				}
				checkClose(t, "dtable", dtable, want, gradTol)
				if tp.p == nil {
					serial = dtable
				} else if fmt.Sprint(dtable) != fmt.Sprint(serial) {
					t.Errorf("dtable with %d workers differs from serial, want bitwise equal", tp.p.Workers())
				}
			})
		}
	}
}

func TestEmbeddingBadID(t *testing.T) {
	const v, d = 4, 2
	table := make([]float32, v*d)
	for _, bad := range []int32{-1, v} {
		ids := []int32{0, 3, 1, bad, 2}
		y := make([]float32, len(ids)*d)
		y[0] = 42
		err := Embedding(nil, table, ids, y, v, d)
		if !errors.Is(err, ErrIndex) || !strings.Contains(err.Error(), "position 3") {
			t.Errorf("id %d: got %v, want an ErrIndex naming position 3", bad, err)
		}
		if y[0] != 42 {
			t.Errorf("id %d: y[0] got %v, want 42 (untouched)", bad, y[0])
		}
		dtable := make([]float32, v*d)
		dtable[0] = 42
		err = EmbeddingBackward(nil, ids, y, dtable, v, d)
		if !errors.Is(err, ErrIndex) || !strings.Contains(err.Error(), "position 3") {
			t.Errorf("backward, id %d: got %v, want an ErrIndex naming position 3", bad, err)
		}
		if dtable[0] != 42 {
			t.Errorf("backward, id %d: dtable[0] got %v, want 42 (untouched)", bad, dtable[0])
		}
	}
}
