package data

import "testing"

func BenchmarkLoadMNIST(b *testing.B) {
	dir, err := LocateMNIST("")
	if err != nil {
		b.Skipf("real MNIST not available: %v", err)
	}
	for b.Loop() {
		if _, _, err := LoadMNIST(dir); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoaderNext_28x28_64 fills batches of 64 MNIST-sized images.
func BenchmarkLoaderNext_28x28_64(b *testing.B) {
	const n, batch, size = 4096, 64, 28 * 28
	ds := &Dataset{Images: pixels(n * size), Labels: make([]uint8, n), N: n, Rows: 28, Cols: 28}
	l := NewLoader(ds, batch, true, 1)
	l.DropLast = true
	x := make([]float32, batch*size)
	y := make([]int32, batch)
	b.SetBytes(batch * size)
	for b.Loop() {
		if _, ok := l.Next(x, y); !ok {
			l.Reset(l.Epoch() + 1)
		}
	}
}
