package data

import (
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// realMNIST loads the real MNIST once for all tests, skipping them if it cannot be located.
var realMNIST = sync.OnceValues(func() (*mnistFixture, error) {
	dir, err := LocateMNIST("")
	if err != nil {
		return nil, err
	}
	start := time.Now()
	train, test, err := LoadMNIST(dir)
	return &mnistFixture{dir: dir, train: train, test: test, load: time.Since(start), err: err}, nil
})

type mnistFixture struct {
	dir         string
	train, test *Dataset
	load        time.Duration
	err         error
}

func loadRealMNIST(t testing.TB) *mnistFixture {
	t.Helper()
	m, err := realMNIST()
	if err != nil {
		t.Skipf("real MNIST not available, skipping: %v", err)
	}
	require.NoError(t, m.err)
	return m
}

func TestRealMNIST(t *testing.T) {
	m := loadRealMNIST(t)
	t.Logf("LoadMNIST(%s) took %v", m.dir, m.load)
	for _, tc := range []struct {
		name      string
		ds        *Dataset
		n         int
		label0    uint8
		pixelSum0 int
		counts    [Classes]int
	}{
		{"train", m.train, 60000, 5, 27525, [Classes]int{5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949}},
		{"test", m.test, 10000, 7, 18454, [Classes]int{980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := tc.ds
			require.Equal(t, tc.n, ds.N)
			require.Equal(t, 28, ds.Rows)
			require.Equal(t, 28, ds.Cols)
			require.Len(t, ds.Images, tc.n*28*28)
			require.Len(t, ds.Labels, tc.n)
			require.Equal(t, tc.label0, ds.Labels[0])
			sum := 0
			for _, v := range ds.Image(0) {
				sum += int(v)
			}
			require.Equal(t, tc.pixelSum0, sum, "pixel sum of image 0")
			var counts [Classes]int
			for _, l := range ds.Labels {
				counts[l]++
			}
			require.Equal(t, tc.counts, counts, "images per class")
		})
	}
}

// writeMNIST writes a tiny MNIST directory: 3 training and 2 test images of 2×2, some files
// gzipped, then applies the edits (file name → content; nil content removes the file).
func writeMNIST(t *testing.T, edits map[string][]byte) string {
	t.Helper()
	files := map[string][]byte{
		TrainImagesFile + ".gz": gzipped(idxImages(3, 2, 2, pixels(12))),
		TrainLabelsFile:         idxLabels(3, []byte{0, 9, 4}),
		TestImagesFile:          idxImages(2, 2, 2, pixels(8)),
		TestLabelsFile + ".gz":  gzipped(idxLabels(2, []byte{7, 1})),
	}
	for name, b := range edits {
		files[name] = b
	}
	dir := t.TempDir()
	for name, b := range files {
		if b != nil {
			writeFile(t, dir, name, b)
		}
	}
	return dir
}

func TestLoadMNIST(t *testing.T) {
	train, test, err := LoadMNIST(writeMNIST(t, nil))
	require.NoError(t, err)
	require.Equal(t, &Dataset{Images: pixels(12), Labels: []uint8{0, 9, 4}, N: 3, Rows: 2, Cols: 2}, train)
	require.Equal(t, &Dataset{Images: pixels(8), Labels: []uint8{7, 1}, N: 2, Rows: 2, Cols: 2}, test)
	require.Equal(t, pixels(12)[4:8], train.Image(1))
}

func TestLoadMNISTErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edits map[string][]byte
		kind  error
		want  []string // substrings of the message, with $DIR standing for the directory
	}{
		{"count mismatch", map[string][]byte{TrainLabelsFile: idxLabels(2, []byte{0, 1})}, ErrMismatch,
			[]string{"$DIR/" + TrainImagesFile + ".gz has 3 images but $DIR/" + TrainLabelsFile + " has 2 labels"}},
		{"label 10", map[string][]byte{TestLabelsFile + ".gz": gzipped(idxLabels(2, []byte{7, 10}))}, ErrBadLabel,
			[]string{"file $DIR/" + TestLabelsFile + ".gz: label 10 at index 1, want 0 to 9"}},
		{"label 255", map[string][]byte{TrainLabelsFile: idxLabels(3, []byte{0, 1, 255})}, ErrBadLabel,
			[]string{"file $DIR/" + TrainLabelsFile + ": label 255 at index 2"}},
		{"image size mismatch", map[string][]byte{TestImagesFile: idxImages(2, 1, 4, pixels(8))}, ErrMismatch,
			[]string{"$DIR/" + TrainImagesFile + ".gz has 2×2 images but $DIR/" + TestImagesFile + " has 1×4"}},
		{"missing file", map[string][]byte{TestImagesFile: nil}, fs.ErrNotExist,
			[]string{"MNIST dir $DIR: no " + TestImagesFile + " or " + TestImagesFile + ".gz"}},
		{"empty file", map[string][]byte{TrainLabelsFile: {}}, ErrTruncated,
			[]string{"file $DIR/" + TrainLabelsFile + ": empty file"}},
		{"truncated file", map[string][]byte{TestImagesFile: idxImages(2, 2, 2, pixels(7))}, ErrTruncated,
			[]string{"file $DIR/" + TestImagesFile + ": truncated: header says 2 images of 2×2 (8 bytes), got 7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeMNIST(t, tc.edits)
			_, _, err := LoadMNIST(dir)
			require.ErrorIs(t, err, tc.kind)
			for _, want := range tc.want {
				require.ErrorContains(t, err, strings.ReplaceAll(want, "$DIR", dir))
			}
		})
	}
}
