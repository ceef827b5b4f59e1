package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// idxImages returns an IDX image file with the given header and pixels.
func idxImages(n, rows, cols uint32, pix []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, magicImages)
	b = binary.BigEndian.AppendUint32(b, n)
	b = binary.BigEndian.AppendUint32(b, rows)
	b = binary.BigEndian.AppendUint32(b, cols)
	return append(b, pix...)
}

// idxLabels returns an IDX label file with a header for n labels.
func idxLabels(n uint32, labels []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, magicLabels)
	b = binary.BigEndian.AppendUint32(b, n)
	return append(b, labels...)
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	z := gzip.NewWriter(&buf)
	if _, err := z.Write(b); err != nil {
		panic(err)
	}
	if err := z.Close(); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

func writeFile(t testing.TB, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, b, 0o644))
	return p
}

// pixels returns n deterministic bytes.
func pixels(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	return b
}

func TestReadValid(t *testing.T) {
	pix := pixels(3 * 4 * 5)
	labels := []byte{9, 0, 3}
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		images []byte
		labels []byte
	}{
		{"plain", idxImages(3, 4, 5, pix), idxLabels(3, labels)},
		{"gzip", gzipped(idxImages(3, 4, 5, pix)), gzipped(idxLabels(3, labels))},
		// Compression is detected by content, not by name.
		{"plain.gz", idxImages(3, 4, 5, pix), idxLabels(3, labels)},
		{"gzip-no-suffix", gzipped(idxImages(3, 4, 5, pix)), gzipped(idxLabels(3, labels))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img, err := ReadImages(writeFile(t, dir, tc.name+"-images", tc.images))
			require.NoError(t, err)
			require.Equal(t, &Images{N: 3, Rows: 4, Cols: 5, Pix: pix}, img)

			got, err := ReadLabels(writeFile(t, dir, tc.name+"-labels", tc.labels))
			require.NoError(t, err)
			require.Equal(t, labels, got)

			img, err = DecodeImages(bytes.NewReader(tc.images))
			require.NoError(t, err)
			require.Equal(t, pix, img.Pix)
			got, err = DecodeLabels(bytes.NewReader(tc.labels))
			require.NoError(t, err)
			require.Equal(t, labels, got)
		})
	}
}

func TestReadEmptySet(t *testing.T) {
	img, err := DecodeImages(bytes.NewReader(idxImages(0, 28, 28, nil)))
	require.NoError(t, err)
	require.Equal(t, 0, img.N)
	require.Empty(t, img.Pix)
	labels, err := DecodeLabels(bytes.NewReader(gzipped(idxLabels(0, nil))))
	require.NoError(t, err)
	require.Empty(t, labels)
}

func TestReadErrors(t *testing.T) {
	valid := idxImages(3, 2, 2, pixels(12))
	corrupt := gzipped(valid)
	corrupt[len(corrupt)-6] ^= 0xff // in the CRC-32 trailer
	for _, tc := range []struct {
		name    string
		labels  bool // read with ReadLabels, not ReadImages
		content []byte
		kind    error
		want    string
	}{
		{"empty", false, nil, ErrTruncated, "empty file"},
		{"empty labels", true, nil, ErrTruncated, "empty file"},
		{"short magic", false, valid[:3], ErrTruncated, "truncated header: got 3 of 4 bytes"},
		{"truncated header", false, valid[:10], ErrTruncated, "truncated header: got 10 of 16 bytes"},
		{"truncated label header", true, idxLabels(3, nil)[:6], ErrTruncated, "truncated header: got 6 of 8 bytes"},
		{"truncated data", false, valid[:16+5], ErrTruncated,
			"truncated: header says 3 images of 2×2 (12 bytes), got 5"},
		{"truncated gzipped data", false, gzipped(valid[:16+5]), ErrTruncated,
			"truncated: header says 3 images of 2×2 (12 bytes), got 5"},
		{"truncated labels", true, idxLabels(60000, []byte{1, 2}), ErrTruncated,
			"truncated: header says 60000 labels (60000 bytes), got 2"},
		{"labels as images", false, idxLabels(3, []byte{1, 2, 3}), ErrBadMagic,
			"bad magic 0x00000801, want 0x00000803 (this is a label file, not an image file)"},
		{"images as labels", true, valid, ErrBadMagic,
			"bad magic 0x00000803, want 0x00000801 (this is an image file, not a label file)"},
		{"bad magic", false, append([]byte{0xde, 0xad, 0xbe, 0xef}, valid[4:]...), ErrBadMagic,
			"bad magic 0xdeadbeef, want 0x00000803 for an image file"},
		{"zero rows", false, idxImages(3, 0, 28, nil), ErrCorrupt, "zero-sized images (0×28)"},
		{"absurd dimensions", false, idxImages(0xffffffff, 0xffff, 0xffff, nil), ErrTooLarge,
			"absurd dimensions: 4294967295 images of 65535×65535"},
		{"absurd image", false, idxImages(1, 0xffffffff, 0xffffffff, nil), ErrTooLarge,
			"absurd dimensions: 1 images of 4294967295×4294967295"},
		{"absurd labels", true, idxLabels(0xffffffff, nil), ErrTooLarge, "absurd dimensions: 4294967295 labels"},
		{"trailing data", false, append(valid, 0), ErrCorrupt, "unexpected data after 3 images of 2×2"},
		{"trailing gzipped data", false, gzipped(append(valid, 0)), ErrCorrupt, "unexpected data after 3 images"},
		{"gzip checksum", false, corrupt, ErrCorrupt, "corrupt gzip: gzip: invalid checksum"},
		{"cut gzip stream", false, gzipped(valid)[:20], ErrCorrupt, "corrupt gzip: unexpected EOF"},
		{"gzip header", false, []byte{0x1f, 0x8b, 0x08}, ErrCorrupt, "corrupt gzip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "idx-file", tc.content)
			var err error
			if tc.labels {
				_, err = ReadLabels(path)
			} else {
				_, err = ReadImages(path)
			}
			require.ErrorIs(t, err, tc.kind)
			require.ErrorContains(t, err, "data: file "+path+": ")
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestReadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "train-images-idx3-ubyte")
	_, err := ReadImages(path)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorContains(t, err, path)
	_, err = ReadLabels(path)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorContains(t, err, path)
}

// A corrupt header must not make the reader allocate what it claims before the data is there.
func TestCorruptHeaderAllocation(t *testing.T) {
	huge := idxImages(1<<20, 32, 32, pixels(100)) // claims 1 GiB
	dir := t.TempDir()
	plain := writeFile(t, dir, "plain", huge)
	gz := writeFile(t, dir, "gz", gzipped(huge))
	for _, tc := range []struct {
		name string
		read func() error
	}{
		{"file", func() error { _, err := ReadImages(plain); return err }},
		{"gzip file", func() error { _, err := ReadImages(gz); return err }},
		{"reader", func() error { _, err := DecodeImages(bytes.NewReader(huge)); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			alloc := allocated(func() { err = tc.read() })
			require.ErrorIs(t, err, ErrTruncated)
			require.ErrorContains(t, err, "header says 1048576 images of 32×32 (1073741824 bytes), got 100")
			require.Less(t, alloc, uint64(1<<20), "bytes allocated")
		})
	}
}

// allocated returns the bytes allocated while running f.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func fuzzSeeds(f *testing.F) {
	images := idxImages(2, 3, 3, pixels(18))
	labels := idxLabels(4, []byte{1, 2, 3, 9})
	for _, b := range [][]byte{
		images, gzipped(images), labels, gzipped(labels),
		images[:16], images[:20], idxImages(0xffffffff, 28, 28, nil), nil,
	} {
		f.Add(b)
	}
}

// checkAllocation fails if decoding data allocated more than the data could justify: a gzip
// stream inflates at most about 1032 times, and growing buffers cost a small factor.
func checkAllocation(t *testing.T, data []byte, alloc uint64) {
	if limit := uint64(1<<20 + 4*1032*len(data)); alloc > limit {
		t.Fatalf("decoding %d bytes allocated %d bytes, want at most %d", len(data), alloc, limit)
	}
}

// checkDecodeError fails unless err wraps one of the package's errors.
func checkDecodeError(t *testing.T, err error) {
	for _, kind := range []error{ErrBadMagic, ErrTruncated, ErrTooLarge, ErrCorrupt} {
		if errors.Is(err, kind) {
			return
		}
	}
	t.Fatalf("error %q wraps none of the package's errors", err)
}

// The fuzzers decode each input as a stream of unknown size, as DecodeImages does, and as a file
// of known size, as ReadImages does, and expect the same outcome.
func FuzzDecodeImages(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var (
			img, sized   *Images
			err, sizeErr error
		)
		checkAllocation(t, data, allocated(func() { img, err = DecodeImages(bytes.NewReader(data)) }))
		checkAllocation(t, data, allocated(func() { sized, sizeErr = decodeImages(bytes.NewReader(data), int64(len(data))) }))
		if err != nil {
			checkDecodeError(t, err)
			if sizeErr == nil || "data: "+sizeErr.Error() != err.Error() {
				t.Fatalf("stream error %q, sized error %v", err, sizeErr)
			}
			return
		}
		if sizeErr != nil || !reflect.DeepEqual(img, sized) {
			t.Fatalf("stream and sized decoding differ: error %v", sizeErr)
		}
		if len(img.Pix) != img.N*img.Rows*img.Cols {
			t.Fatalf("got %d pixels, want %d×%d×%d", len(img.Pix), img.N, img.Rows, img.Cols)
		}
		if data[0] != 0x1f && !bytes.Equal(img.Pix, data[16:]) {
			t.Fatalf("pixels differ from the input after the header")
		}
	})
}

func FuzzDecodeLabels(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var (
			labels, sized []uint8
			err, sizeErr  error
		)
		checkAllocation(t, data, allocated(func() { labels, err = DecodeLabels(bytes.NewReader(data)) }))
		checkAllocation(t, data, allocated(func() { sized, sizeErr = decodeLabels(bytes.NewReader(data), int64(len(data))) }))
		if err != nil {
			checkDecodeError(t, err)
			if sizeErr == nil || "data: "+sizeErr.Error() != err.Error() {
				t.Fatalf("stream error %q, sized error %v", err, sizeErr)
			}
			return
		}
		if sizeErr != nil || !bytes.Equal(labels, sized) {
			t.Fatalf("stream and sized decoding differ: error %v", sizeErr)
		}
		if data[0] != 0x1f && !bytes.Equal(labels, data[8:]) {
			t.Fatalf("labels differ from the input after the header")
		}
	})
}
