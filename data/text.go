package data

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Text is a corpus of bytes for a byte-level language model (a vocabulary
// of 256): files read whole, in path order, each followed by a newline.
type Text struct {
	Name  string // where it came from
	Bytes []byte
	Files int
}

// TextSplit is the share of a corpus's files that LoadText holds out for
// testing: those whose path hashes to 0 mod 1/TextSplit.
const TextSplit = 0.1

// EnvText names the environment variable that points at a text directory.
const EnvText = "FLOWKIT_TEXT"

// ErrNoText reports that no text directory could be located.
var ErrNoText = errors.New("data: no text")

// LocateText returns the directory a language model trains on: flagDir if
// not empty, else $FLOWKIT_TEXT, else the source tree of the Go that the go
// command runs ($(go env GOROOT)/src): real text, on every machine with Go.
func LocateText(flagDir string) (string, error) {
	if flagDir != "" {
		return flagDir, checkDir("text dir "+flagDir, flagDir)
	}
	if dir := os.Getenv(EnvText); dir != "" {
		return dir, checkDir("$"+EnvText+"="+dir, dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), goEnvTimeout)
	defer cancel()
	out, err := runGo(ctx, "", "env", "GOROOT")
	if err != nil {
		return "", fmt.Errorf("%w: $%s is not set, and Go's source tree was not found (%v); pass --data DIR, a directory of .go files", ErrNoText, EnvText, err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "src")
	return dir, checkDir("Go's source tree "+dir, dir)
}

// LoadText reads the files under dir whose names end in ext (".go") into
// a training and a test corpus: a file is held out for testing when the
// FNV-1a hash of its path relative to dir is 0 mod 10 (TextSplit), so the
// split does not depend on which other files there are. Folders named
// testdata are skipped (inputs of tests, not the language), and so are
// files over maxFile bytes (generated tables; 0: no limit).
func LoadText(dir, ext string, maxFile int64) (train, test *Text, err error) {
	if err := checkDir("text dir "+dir, dir); err != nil {
		return nil, nil, err
	}
	var paths []string
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && d.Name() == "testdata":
			return filepath.SkipDir
		case d.Type().IsRegular() && strings.HasSuffix(d.Name(), ext):
			paths = append(paths, path)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("data: reading %s: %w", dir, err)
	}
	slices.Sort(paths)
	train, test = &Text{Name: dir + " (train)"}, &Text{Name: dir + " (test)"}
	every := uint32(math.Round(1 / TextSplit))
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, fmt.Errorf("data: %w", err)
		}
		if maxFile > 0 && int64(len(b)) > maxFile {
			continue
		}
		rel, _ := filepath.Rel(dir, path)
		h := fnv.New32a()
		h.Write([]byte(filepath.ToSlash(rel)))
		t := train
		if h.Sum32()%every == 0 {
			t = test
		}
		t.Bytes = append(append(t.Bytes, b...), '\n')
		t.Files++
	}
	if train.Files == 0 || test.Files == 0 {
		return nil, nil, fmt.Errorf("%w: %s has %d files named *%s (%d to train on, %d to test on); want some of each", ErrNoText, dir, train.Files+test.Files, ext, train.Files, test.Files)
	}
	return train, test, nil
}

// Windows is the number of non-overlapping windows of seq+1 bytes (a
// sequence and its next bytes) that t holds: window w starts at w·seq.
func (t *Text) Windows(seq int) int {
	if seq < 1 || len(t.Bytes) <= seq {
		return 0
	}
	return (len(t.Bytes) - 1) / seq
}

// Window copies window w's tokens (bytes w·seq … w·seq+seq−1) into tokens
// and their next bytes into labels, each of seq values; either may be nil.
func (t *Text) Window(w, seq int, tokens, labels []int32) {
	b := t.Bytes[w*seq : w*seq+seq+1]
	for i := range seq {
		if tokens != nil {
			tokens[i] = int32(b[i])
		}
		if labels != nil {
			labels[i] = int32(b[i+1])
		}
	}
}

// Sum is a checksum of the text's bytes (FNV-1a, 64 bits), to tell two
// copies apart.
func (t *Text) Sum() uint64 {
	h := fnv.New64a()
	h.Write(t.Bytes)
	return h.Sum64()
}

// UnigramBits is the cross-entropy, in bits per byte, of test under the
// byte frequencies of t (add-one smoothed): what a model that learned those
// frequencies and nothing else would score.
func (t *Text) UnigramBits(test *Text) float64 {
	var count [256]float64
	for _, b := range t.Bytes {
		count[b]++
	}
	total := float64(len(t.Bytes)) + 256
	var bits float64
	for _, b := range test.Bytes {
		bits -= math.Log2((count[b] + 1) / total)
	}
	return bits / float64(len(test.Bytes))
}
