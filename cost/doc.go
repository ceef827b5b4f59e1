// Package cost prices work on a cluster: kernels on devices (the compute
// model, calibrated from measurements) and transfers between them
// (point-to-point and collectives over the topology's routes).
//
// Compute: a Work (op kind, FLOPs, bytes, dtype, shape) on a device costs
//
//	launch + max(FLOPs / (peak(dtype) · eff_c(FLOPs)), bytes / (bw · eff_m(bytes)))
//
// with saturating efficiency curves (Curve). A Calibration, keyed by device
// type and op kind, overrides the catalog defaults; an exact measured
// shape overrides the curves. Fit turns measured samples into an OpFit and
// reports its error on held-out shapes:
//
//	fit, report, err := cost.Fit(spec, samples)      // one op kind
//	calib := cost.NewCalibration()
//	calib.Devices[spec.Type] = &cost.DeviceCalibration{Ops: map[string]*cost.OpFit{"matmul": &fit}}
//	err = calib.WriteFile("calib.json")
//	...
//	calib, err = cost.LoadCalibration("calib.json") // on any machine
//	t, err := cost.NewComputeModel(calib).Time(spec, work)
//
// Communication: Comm prices point-to-point transfers and collectives
// (all-reduce, reduce-scatter, all-gather, all-to-all, broadcast) by
// algorithm — ring, tree, hierarchical, direct — with NCCL's conventions
// for sizes and bus bandwidth; see Comm and Comm.Collective for the
// formulas. Contention between concurrent transfers is the simulator's
// business; Comm prices one collective on an idle cluster.
//
// Determinism: no output depends on map iteration order; equal inputs give
// equal times and equal calibration files. The package knows devices and
// work descriptions, never graphs.
package cost
