package data

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// indexDataset returns n images of 1×2 pixels that spell their own index, labelled index mod 10.
func indexDataset(n int) *Dataset {
	ds := &Dataset{Images: make([]uint8, 2*n), Labels: make([]uint8, n), N: n, Rows: 1, Cols: 2}
	for i := range n {
		ds.Images[2*i], ds.Images[2*i+1] = uint8(i>>8), uint8(i)
		ds.Labels[i] = uint8(i % Classes)
	}
	return ds
}

// pixel inverts the normalization.
func pixel(x float32) int {
	return int(math.Round((float64(x)*MNISTStd + MNISTMean) * 255))
}

// epochOrder runs one epoch of l and returns the indices of the images in the order seen and the
// size of each batch. It checks each label against its image.
func epochOrder(t *testing.T, l *Loader, batch int) (order, sizes []int) {
	t.Helper()
	x := make([]float32, 2*batch)
	y := make([]int32, batch)
	for {
		n, ok := l.Next(x, y)
		if !ok {
			return order, sizes
		}
		sizes = append(sizes, n)
		for k := range n {
			i := pixel(x[2*k])<<8 | pixel(x[2*k+1])
			require.Equal(t, int32(i%Classes), y[k], "label of image %d", i)
			order = append(order, i)
		}
	}
}

func TestLoaderOrder(t *testing.T) {
	const n, batch = 1000, 64
	ds := indexDataset(n)
	l := NewLoader(ds, batch, true, 42)
	epoch0, _ := epochOrder(t, l, batch)
	sorted := slices.Sorted(slices.Values(epoch0))
	require.Equal(t, identity(n), sorted, "every image exactly once per epoch")
	require.NotEqual(t, identity(n), epoch0, "shuffled")

	again, _ := epochOrder(t, NewLoader(ds, batch, true, 42), batch)
	require.Equal(t, epoch0, again, "same seed, same order")

	l.Reset(1)
	require.Equal(t, 1, l.Epoch())
	epoch1, _ := epochOrder(t, l, batch)
	require.NotEqual(t, epoch0, epoch1, "a new epoch, a new order")
	require.Equal(t, identity(n), slices.Sorted(slices.Values(epoch1)))

	l.Reset(0)
	replay, _ := epochOrder(t, l, batch)
	require.Equal(t, epoch0, replay, "an epoch's order depends on the seed and epoch only")

	other, _ := epochOrder(t, NewLoader(ds, batch, true, 43), batch)
	require.NotEqual(t, epoch0, other, "another seed, another order")

	plain, _ := epochOrder(t, NewLoader(ds, batch, false, 42), batch)
	require.Equal(t, identity(n), plain, "no shuffle")
}

func identity(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func TestLoaderBatches(t *testing.T) {
	for _, tc := range []struct {
		n, batch  int
		dropLast  bool
		wantSizes []int
	}{
		{10, 4, false, []int{4, 4, 2}},
		{10, 4, true, []int{4, 4}},
		{8, 4, false, []int{4, 4}},
		{8, 4, true, []int{4, 4}},
		{3, 4, false, []int{3}},
		{3, 4, true, nil},
		{0, 4, false, nil},
	} {
		l := NewLoader(indexDataset(tc.n), tc.batch, true, 1)
		l.DropLast = tc.dropLast
		order, sizes := epochOrder(t, l, tc.batch)
		require.Equal(t, tc.wantSizes, sizes, "n %d, batch %d, dropLast %v", tc.n, tc.batch, tc.dropLast)
		require.Equal(t, len(tc.wantSizes), l.Steps(), "Steps")
		require.Len(t, order, sum(tc.wantSizes))
		n, ok := l.Next(make([]float32, 2*tc.batch), make([]int32, tc.batch))
		require.False(t, ok, "Next after the end")
		require.Zero(t, n)
	}
}

func sum(s []int) int {
	t := 0
	for _, v := range s {
		t += v
	}
	return t
}

func TestLoaderNormalization(t *testing.T) {
	ds := &Dataset{Images: []uint8{0, 255, 51}, Labels: []uint8{3}, N: 1, Rows: 1, Cols: 3}
	x := make([]float32, 3)
	y := make([]int32, 1)
	n, ok := NewLoader(ds, 1, false, 0).Next(x, y)
	require.True(t, ok)
	require.Equal(t, 1, n)
	require.Equal(t, []int32{3}, y)
	for i, want := range []float64{-0.1307 / 0.3081, (1 - 0.1307) / 0.3081, (0.2 - 0.1307) / 0.3081} {
		require.InDelta(t, want, x[i], 1e-6, "pixel %d", i)
	}
}

func TestLoaderNoAllocation(t *testing.T) {
	const batch = 64
	l := NewLoader(indexDataset(1000), batch, true, 7)
	x := make([]float32, 2*batch)
	y := make([]int32, batch)
	allocs := testing.AllocsPerRun(100, func() {
		if _, ok := l.Next(x, y); !ok {
			l.Reset(l.Epoch() + 1)
		}
	})
	require.Zero(t, allocs, "allocations per batch")
}

func TestLoaderPanics(t *testing.T) {
	ds := indexDataset(10)
	require.Panics(t, func() { NewLoader(ds, 0, false, 0) })
	l := NewLoader(ds, 4, false, 0)
	require.Panics(t, func() { l.Next(make([]float32, 7), make([]int32, 4)) }, "x too short")
	require.Panics(t, func() { l.Next(make([]float32, 8), make([]int32, 3)) }, "y too short")
}
