//go:build !amd64 || purego

package cpu

// backward2x2Rows is the row of 2×2 max-pooling gradients this CPU runs.
var backward2x2Rows = backward2x2RowsGo
