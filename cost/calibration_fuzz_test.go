package cost

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/flowkit/flowkit/topology"
)

// ReadCalibration never panics, and a calibration it accepts prices any
// valid work without panicking, in a finite non-negative time.
func FuzzReadCalibration(f *testing.F) {
	if data, err := os.ReadFile("../results/plan-loop-cpu/calib.json"); err == nil {
		f.Add(data)
	}
	f.Add([]byte(`{"version":1,"devices":{"cpu/2":{"ops":{"relu":{"launch_ns":100,"compute":{"max":0.5,"half":1000,"gamma":1},` +
		`"memory":{"max":0.5,"half":1000,"gamma":1},"exact":[{"dtype":"f32","shape":[4,4],"time_ns":500}]}}}}}`))
	f.Add([]byte(`{"version":1,"devices":{"H200":null}}`))
	f.Add([]byte(`{"version":1,"devices":{"cpu/2":{"probe":{"gemm_ns":600000,"stream_ns":2000000,"spread":0.02},"ops":{}}}}`))
	f.Add([]byte(`{"version":1,"devices":{"cpu/1":{"dispatch_ns":80000,"ops":{"allreduce":{"launch_ns":100,"traffic":true,` +
		`"compute":{"max":0.5,"half":1000,"gamma":1},"memory":{"max":0.5,"half":1000,"gamma":1},` +
		`"exact":[{"dtype":"f32","shape":[2,4],"time_ns":500,"traffic":112},{"dtype":"f32","shape":[2,4],"time_ns":400}]}}}}}`))
	cpu, _ := topology.Spec("cpu", 2)
	h200, _ := topology.Spec("H200", 0)
	work := []Work{
		{Kind: "relu", FLOPs: 16, Bytes: 128, DType: "f32", Shape: []int{4, 4}},
		{Kind: "matmul", FLOPs: 2e9, Bytes: 1e7, DType: "bf16", Shape: []int{1024, 1024}, Family: "fc1"},
		{Kind: "conv2d", FLOPs: 0, Bytes: 0, DType: "f32"},
		{Kind: "allreduce", FLOPs: 8, Bytes: 16, Traffic: 112, DType: "f32", Shape: []int{2, 4}},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ReadCalibration("fuzz.json", bytes.NewReader(data))
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.json") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		m := NewComputeModel(c)
		for _, dev := range []topology.DeviceSpec{cpu, h200} {
			for _, w := range work {
				d, err := m.Time(dev, w)
				if err == nil && d < 0 {
					t.Fatalf("%s on %s: %v", w.Kind, dev.Type, d)
				}
			}
			_ = m.Slowdown(dev, "matmul")
			if d := m.Dispatch(dev); d < 0 {
				t.Fatalf("dispatch on %s: %v", dev.Type, d)
			}
		}
	})
}
