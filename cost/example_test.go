package cost_test

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
)

// Calibrating a device: measured samples → Fit → write a file → load it
// anywhere → predict. Here the "measurements" come from a formula.
func Example_calibrate() {
	dev, _ := topology.Spec("cpu", 2) // the device the samples were measured on
	var samples []cost.Sample
	for _, n := range []int{32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024} {
		flops := units.FLOPs(2 * n * n * n)
		achieved := 100e9 * float64(flops) / (float64(flops) + 4e6) // saturates at 100 GFLOP/s
		t := 2*time.Microsecond + time.Duration(float64(flops)/achieved*1e9)
		w := cost.Work{Kind: "matmul", FLOPs: flops, Bytes: units.Bytes(12 * n * n), DType: "f32", Shape: []int{n, n, n}}
		samples = append(samples, cost.Sample{Work: w, Time: t})
	}
	fit, report, err := cost.Fit(dev, samples)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("held out %d of %d shapes, median error under 2%%: %v\n", report.HeldOut, report.Shapes, report.MedianRelErr < 0.02)

	calib := cost.NewCalibration()
	calib.Devices[dev.Type] = &cost.DeviceCalibration{Cores: dev.Cores, Ops: map[string]*cost.OpFit{"matmul": &fit}}
	path := filepath.Join(os.TempDir(), "flowkit-example-calib.json")
	if err := calib.WriteFile(path); err != nil {
		fmt.Println(err)
		return
	}
	defer os.Remove(path)

	loaded, err := cost.LoadCalibration(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	model := cost.NewComputeModel(loaded)
	measured, _ := model.Predict(dev, cost.Work{Kind: "matmul", FLOPs: 2 * 256 * 256 * 256, DType: "f32", Shape: []int{256, 256, 256}})
	unseen, _ := model.Predict(dev, cost.Work{Kind: "matmul", FLOPs: 2 * 300 * 300 * 300, DType: "f32", Shape: []int{300, 300, 300}})
	fmt.Println("256³ from", measured.Source, "in", measured.Time.Round(time.Microsecond))
	fmt.Println("300³ from", unseen.Source, "in", unseen.Time.Round(10*time.Microsecond))
	// Output:
	// held out 3 of 11 shapes, median error under 2%: true
	// 256³ from exact in 378µs
	// 300³ from fit in 580µs
}

// Pricing collectives on a preset.
func ExampleComm_Collective() {
	c, _ := topology.Preset("dgx-a100x2")
	m := cost.NewComm(c)
	var all []topology.DeviceID
	for _, d := range c.Devices {
		all = append(all, d.ID)
	}
	for _, size := range []units.Bytes{64 << 10, 1 << 30} {
		e, _ := m.Collective(cost.OpAllReduce, all, size, cost.Auto)
		fmt.Printf("all-reduce %v over %d GPUs: %v, %v\n", size, e.Ranks, e.Algo, e.Time.Round(time.Microsecond))
	}
	// Output:
	// all-reduce 64.00 KiB over 16 GPUs: hierarchical, 29µs
	// all-reduce 1.00 GiB over 16 GPUs: ring, 11.152ms
}
