package data

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// The standard MNIST file names; each may also be gzipped with a .gz suffix.
const (
	TrainImagesFile = "train-images-idx3-ubyte"
	TrainLabelsFile = "train-labels-idx1-ubyte"
	TestImagesFile  = "t10k-images-idx3-ubyte"
	TestLabelsFile  = "t10k-labels-idx1-ubyte"
)

// Classes is the number of MNIST classes, the digits 0 to 9.
const Classes = 10

// Errors from checking a data set's files against each other.
var (
	ErrMismatch = errors.New("data: MNIST files disagree")
	ErrBadLabel = errors.New("data: label out of range")
)

// Dataset is a labelled image set kept as raw bytes, as stored on disk.
type Dataset struct {
	Images        []uint8 // N×Rows×Cols pixels, image-major then row-major, 0 background to 255 ink
	Labels        []uint8 // N classes, each < Classes
	N, Rows, Cols int
}

// Image returns the pixels of image i, Rows×Cols bytes row-major.
func (d *Dataset) Image(i int) []uint8 {
	size := d.Rows * d.Cols
	return d.Images[i*size : (i+1)*size : (i+1)*size]
}

// LoadMNIST reads the training and test sets from the four standard MNIST files in dir, each
// found as name or name.gz. It checks that each set has as many labels as images, that every label
// is a digit, and that both sets have the same image size.
func LoadMNIST(dir string) (train, test *Dataset, err error) {
	names := [4]string{TrainImagesFile, TrainLabelsFile, TestImagesFile, TestLabelsFile}
	var paths [4]string
	for i, name := range names {
		if paths[i], err = findFile(dir, name); err != nil {
			return nil, nil, err
		}
	}

	// The files are independent; the training images dominate the time.
	var (
		images [2]*Images
		labels [2][]uint8
		errs   [4]error
		wg     sync.WaitGroup
	)
	for s := range 2 {
		wg.Go(func() { images[s], errs[2*s] = ReadImages(paths[2*s]) })
		wg.Go(func() { labels[s], errs[2*s+1] = ReadLabels(paths[2*s+1]) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, nil, err
		}
	}

	var sets [2]*Dataset
	for s := range 2 {
		if sets[s], err = newDataset(images[s], labels[s], paths[2*s], paths[2*s+1]); err != nil {
			return nil, nil, err
		}
	}
	if sets[0].Rows != sets[1].Rows || sets[0].Cols != sets[1].Cols {
		return nil, nil, fmt.Errorf("data: %w", errorf(ErrMismatch, "%s has %d×%d images but %s has %d×%d",
			paths[0], sets[0].Rows, sets[0].Cols, paths[2], sets[1].Rows, sets[1].Cols))
	}
	return sets[0], sets[1], nil
}

// findFile returns the path of name or name.gz in dir.
func findFile(dir, name string) (string, error) {
	for _, p := range []string{filepath.Join(dir, name), filepath.Join(dir, name+".gz")} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("data: %w", err)
		}
	}
	return "", fmt.Errorf("data: MNIST dir %s: no %s or %s.gz: %w", dir, name, name, fs.ErrNotExist)
}

// newDataset pairs images with labels, checking that the counts agree and every label is a
// digit.
func newDataset(img *Images, labels []uint8, imagesPath, labelsPath string) (*Dataset, error) {
	if img.N != len(labels) {
		return nil, fmt.Errorf("data: %w", errorf(ErrMismatch, "%s has %d images but %s has %d labels",
			imagesPath, img.N, labelsPath, len(labels)))
	}
	for i, l := range labels {
		if l >= Classes {
			return nil, fmt.Errorf("data: file %s: %w", labelsPath,
				errorf(ErrBadLabel, "label %d at index %d, want 0 to %d", l, i, Classes-1))
		}
	}
	return &Dataset{Images: img.Pix, Labels: labels, N: img.N, Rows: img.Rows, Cols: img.Cols}, nil
}
