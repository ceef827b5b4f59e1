package main

import (
	"encoding/json"
	"io"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/cost"
)

// A small calibration writes the dispatch latency of the devices that ran
// two-device plans, and all-reduces measured by their traffic.
func TestCalibrateDispatchAndTraffic(t *testing.T) {
	if goruntime.NumCPU() < 2 {
		t.Skip("two-device plans need two cores")
	}
	path := filepath.Join(t.TempDir(), "calib.json")
	out := captureStdout(t, func() {
		cmd := newCalibrateCmd()
		cmd.SetArgs([]string{"--models", "mlp", "--batches", "8,16,32,64", "--workers", "1", "--rounds", "1", "--iters", "4", "--json", "-o", path})
		cmd.SetErr(io.Discard)
		require.NoError(t, cmd.Execute())
	})
	var rep struct {
		Dispatch map[string]int64 `json:"dispatch_ns"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	cal, err := cost.LoadCalibration(path)
	require.NoError(t, err)
	dc := cal.Devices["cpu/1"]
	require.NotNil(t, dc)
	require.Equal(t, int64(dc.Dispatch), rep.Dispatch["cpu/1"])
	require.GreaterOrEqual(t, dc.Dispatch, time.Duration(0))
	ar := dc.Ops["allreduce"]
	require.NotNil(t, ar)
	require.True(t, ar.Traffic)
	for _, e := range ar.Exact {
		require.Positive(t, e.Traffic, "%v", e.Shape)
	}
}

// The dispatch latency is the median of the runs' latencies.
func TestMeasuredDispatch(t *testing.T) {
	for _, tt := range []struct {
		waits []time.Duration
		want  time.Duration
	}{
		{nil, 0},
		{[]time.Duration{30, 10, 20}, 20},
		{[]time.Duration{40, 10}, 40},
	} {
		m := &measured{latencies: slices.Clone(tt.waits)}
		require.Equal(t, tt.want, m.dispatch(), "%v", tt.waits)
		require.Equal(t, tt.waits, m.latencies, "dispatch reordered the latencies")
	}
}
