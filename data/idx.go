package data

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// IDX magic numbers: two zero bytes, the element type (0x08: unsigned byte) and the number of
// dimensions.
const (
	magicImages = 0x00000803 // uint8 [n, rows, cols]
	magicLabels = 0x00000801 // uint8 [n]
)

// MaxPayload is the largest IDX payload, in bytes, that the decoders accept. A header that asks
// for more is taken as corrupt rather than trusted with an allocation; MNIST's training images
// are 47 MB.
const MaxPayload = 1 << 30

// firstChunk bounds the first allocation when the size of the input is not known: the buffer
// then grows only as data arrives.
const firstChunk = 64 << 10

// maxDeflateRatio bounds how much a deflate stream can expand.
const maxDeflateRatio = 1032

// Errors reported by the decoders, wrapped with the file name and the details.
var (
	ErrBadMagic  = errors.New("data: bad IDX magic number")
	ErrTruncated = errors.New("data: truncated IDX data")
	ErrTooLarge  = errors.New("data: IDX dimensions too large")
	ErrCorrupt   = errors.New("data: corrupt IDX file")
)

// Images is a decoded IDX image file: N greyscale images of Rows×Cols pixels.
type Images struct {
	N, Rows, Cols int
	Pix           []uint8 // N×Rows×Cols bytes, image-major then row-major
}

// formatError is what is wrong with the input; the caller prefixes the file name.
type formatError struct {
	kind error
	msg  string
}

func (e *formatError) Error() string { return e.msg }
func (e *formatError) Unwrap() error { return e.kind }

func errorf(kind error, format string, args ...any) error {
	return &formatError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// ReadImages reads an IDX image file (magic 0x00000803), gzipped or not.
func ReadImages(path string) (*Images, error) {
	var img *Images
	err := readFile(path, func(r io.Reader, size int64) (err error) {
		img, err = decodeImages(r, size)
		return err
	})
	return img, err
}

// ReadLabels reads an IDX label file (magic 0x00000801), gzipped or not.
func ReadLabels(path string) ([]uint8, error) {
	var labels []uint8
	err := readFile(path, func(r io.Reader, size int64) (err error) {
		labels, err = decodeLabels(r, size)
		return err
	})
	return labels, err
}

// DecodeImages decodes an IDX image stream, gunzipping it if it starts with the gzip magic.
func DecodeImages(r io.Reader) (*Images, error) {
	img, err := decodeImages(r, -1)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	return img, nil
}

// DecodeLabels decodes an IDX label stream, gunzipping it if it starts with the gzip magic.
func DecodeLabels(r io.Reader) ([]uint8, error) {
	labels, err := decodeLabels(r, -1)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	return labels, nil
}

// readFile opens path and hands decode the file and its size (-1 if it is not a regular file).
func readFile(path string, decode func(r io.Reader, size int64) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("data: %w", err)
	}
	defer f.Close()
	size := int64(-1)
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		size = fi.Size()
	}
	if err := decode(f, size); err != nil {
		return fmt.Errorf("data: file %s: %w", path, err)
	}
	return nil
}

// decodeImages decodes r, whose size is given if known, else -1.
func decodeImages(r io.Reader, size int64) (*Images, error) {
	r, sz, err := uncompress(r, size)
	if err != nil {
		return nil, err
	}
	if err := readMagic(r, magicImages); err != nil {
		return nil, err
	}
	var dims [3]uint32
	if err := readDims(r, dims[:]); err != nil {
		return nil, err
	}
	n, rows, cols := uint64(dims[0]), uint64(dims[1]), uint64(dims[2])
	if rows == 0 || cols == 0 {
		return nil, errorf(ErrCorrupt, "zero-sized images (%d×%d)", rows, cols)
	}
	if rows*cols > MaxPayload || n*rows*cols > MaxPayload {
		return nil, errorf(ErrTooLarge, "absurd dimensions: %d images of %d×%d (limit %d bytes)",
			n, rows, cols, MaxPayload)
	}
	what := fmt.Sprintf("%d images of %d×%d", n, rows, cols)
	pix, err := readPayload(r, int(n*rows*cols), sz.after(16), what)
	if err != nil {
		return nil, err
	}
	return &Images{N: int(n), Rows: int(rows), Cols: int(cols), Pix: pix}, nil
}

// decodeLabels decodes r, whose size is given if known, else -1.
func decodeLabels(r io.Reader, size int64) ([]uint8, error) {
	r, sz, err := uncompress(r, size)
	if err != nil {
		return nil, err
	}
	if err := readMagic(r, magicLabels); err != nil {
		return nil, err
	}
	var dims [1]uint32
	if err := readDims(r, dims[:]); err != nil {
		return nil, err
	}
	n := uint64(dims[0])
	if n > MaxPayload {
		return nil, errorf(ErrTooLarge, "absurd dimensions: %d labels (limit %d)", n, MaxPayload)
	}
	return readPayload(r, int(n), sz.after(8), fmt.Sprintf("%d labels", n))
}

// streamSize is what is known, before reading, of the length of an uncompressed stream; -1 means
// unknown.
type streamSize struct {
	exact  int64 // the length of a plain file: a header asking for more is wrong
	likely int64 // the length a gzip trailer states, within the deflate bound: only a hint
}

// after returns the size of the rest of the stream after n bytes.
func (s streamSize) after(n int64) streamSize {
	sub := func(v int64) int64 {
		if v < 0 {
			return -1
		}
		return max(v-n, 0)
	}
	return streamSize{exact: sub(s.exact), likely: sub(s.likely)}
}

// uncompress returns r gunzipped if it starts with the gzip magic, and what is known of the size
// of the result given the size of r, or -1.
func uncompress(r io.Reader, size int64) (io.Reader, streamSize, error) {
	unknown := streamSize{exact: -1, likely: -1}
	br := bufio.NewReader(r)
	magic, err := br.Peek(2)
	if len(magic) == 0 && err == io.EOF {
		return nil, unknown, errorf(ErrTruncated, "empty file")
	}
	if err != nil && err != io.EOF {
		return nil, unknown, fmt.Errorf("reading: %w", err)
	}
	if len(magic) < 2 || magic[0] != 0x1f || magic[1] != 0x8b {
		return br, streamSize{exact: size, likely: size}, nil
	}
	z, err := gzip.NewReader(br)
	if err != nil {
		return nil, unknown, errorf(ErrCorrupt, "corrupt gzip: %v", err)
	}
	sz := unknown
	// The trailer's ISIZE is the uncompressed length modulo 2³² of the last gzip member; a
	// corrupt one can only cost an allocation within the deflate bound, or a reallocation.
	var trailer [4]byte
	if ra, ok := r.(io.ReaderAt); ok && size >= 4 {
		if _, err := ra.ReadAt(trailer[:], size-4); err == nil {
			sz.likely = min(int64(binary.LittleEndian.Uint32(trailer[:])), maxDeflateRatio*size)
		}
	}
	return gzipReader{z}, sz, nil
}

// gzipReader marks decompression errors so that a damaged stream is reported as corrupt, not as
// short IDX data.
type gzipReader struct{ z *gzip.Reader }

func (g gzipReader) Read(p []byte) (int, error) {
	n, err := g.z.Read(p)
	if err != nil && err != io.EOF {
		err = errorf(ErrCorrupt, "corrupt gzip: %v", err)
	}
	return n, err
}

func readMagic(r io.Reader, want uint32) error {
	var b [4]byte
	if err := readHeader(r, b[:], 0); err != nil {
		return err
	}
	got := binary.BigEndian.Uint32(b[:])
	if got == want {
		return nil
	}
	if k := fileKind(got); k != "" {
		return errorf(ErrBadMagic, "bad magic 0x%08x, want 0x%08x (this is %s, not %s)",
			got, want, k, fileKind(want))
	}
	return errorf(ErrBadMagic, "bad magic 0x%08x, want 0x%08x for %s", got, want, fileKind(want))
}

func fileKind(magic uint32) string {
	switch magic {
	case magicImages:
		return "an image file"
	case magicLabels:
		return "a label file"
	}
	return ""
}

func readDims(r io.Reader, dims []uint32) error {
	b := make([]byte, 4*len(dims))
	if err := readHeader(r, b, 4); err != nil {
		return err
	}
	for i := range dims {
		dims[i] = binary.BigEndian.Uint32(b[4*i:])
	}
	return nil
}

// readHeader fills b, which starts off bytes into the header.
func readHeader(r io.Reader, b []byte, off int) error {
	n, err := io.ReadFull(r, b)
	switch {
	case err == nil:
		return nil
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return errorf(ErrTruncated, "truncated header: got %d of %d bytes", off+n, off+len(b))
	default:
		return readError(err)
	}
}

// readPayload reads need bytes followed by the end of the stream.
func readPayload(r io.Reader, need int, sz streamSize, what string) ([]byte, error) {
	truncated := func(got int64) error {
		return errorf(ErrTruncated, "truncated: header says %s (%d bytes), got %d", what, need, got)
	}
	// Check before allocating: a corrupt header must not cost a huge buffer.
	if sz.exact >= 0 && int64(need) > sz.exact {
		return nil, truncated(sz.exact)
	}
	capacity := min(need, firstChunk)
	if sz.likely >= 0 {
		capacity = int(min(int64(need), max(sz.likely, firstChunk)))
	}
	buf := make([]byte, 0, capacity)
	for len(buf) < need {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(need, 2*cap(buf)))
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF && len(buf) < need {
			return nil, truncated(int64(len(buf)))
		}
		if err != nil && err != io.EOF {
			return nil, readError(err)
		}
	}
	// Reading to the end also verifies the gzip checksum.
	var one [1]byte
	switch _, err := io.ReadFull(r, one[:]); err {
	case io.EOF:
		return buf, nil
	case nil:
		return nil, errorf(ErrCorrupt, "unexpected data after %s", what)
	default:
		return nil, readError(err)
	}
}

func readError(err error) error {
	var fe *formatError
	if errors.As(err, &fe) {
		return err
	}
	return fmt.Errorf("reading: %w", err)
}
