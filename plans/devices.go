package plans

import (
	"fmt"

	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
)

// maxPerCore bounds oversubscription: more devices than that per core
// would only make the plan huge and each device's memory tiny.
const maxPerCore = 64

// DevicesFromCluster returns n devices of a cluster for a plan: its first n
// devices, or, when the cluster has fewer and they are CPUs, its CPU cores
// divided into n devices of equal core counts (the local machine's cores
// become the devices of a data- or pipeline-parallel plan), memory shared
// in proportion. With oversubscribe, more devices than cores may be made
// (one worker each, sharing cores: the simulator does not model that).
func DevicesFromCluster(c *topology.Cluster, n int, oversubscribe bool) ([]Device, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: %d devices asked for", ErrInfeasible, n)
	}
	if len(c.Devices) >= n {
		devs := make([]Device, n)
		for i, d := range c.Devices[:n] {
			devs[i] = Device{Name: d.Name, Type: d.Type, Workers: max(d.Spec.Cores, 1), Memory: d.Spec.Memory, Host: c.Nodes[d.Node].Name}
		}
		return devs, nil
	}
	cores := 0
	for _, d := range c.Devices {
		if d.Spec.Class != topology.CPU {
			return nil, fmt.Errorf("%w: the plan needs %d devices, cluster %s has %d", ErrInfeasible, n, c.Name, len(c.Devices))
		}
		cores += d.Spec.Cores
	}
	per := cores / n
	if per < 1 && oversubscribe && n > maxPerCore*cores {
		return nil, fmt.Errorf("%w: the plan needs %d devices; oversubscribed, cluster %s's %d CPU cores make at most %d",
			ErrInfeasible, n, c.Name, cores, maxPerCore*cores)
	}
	if per < 1 && oversubscribe {
		var devs []Device
		for i := range n {
			d := c.Devices[i%len(c.Devices)]
			devs = append(devs, Device{Name: fmt.Sprintf("%s:%d", d.Name, i), Type: d.Type, Workers: 1,
				Memory: d.Spec.Memory / units.Bytes(n), Host: c.Nodes[d.Node].Name})
		}
		return devs, nil
	}
	if per < 1 {
		return nil, &fewerCores{fmt.Errorf("%w: the plan needs %d devices, cluster %s has %d CPU cores in all", ErrInfeasible, n, c.Name, cores)}
	}
	var devs []Device
	for _, d := range c.Devices {
		parts := d.Spec.Cores / per
		for k := range parts {
			if len(devs) == n {
				break
			}
			devs = append(devs, Device{Name: fmt.Sprintf("%s:%d", d.Name, k), Type: d.Type, Workers: per,
				Memory: d.Spec.Memory * units.Bytes(per) / units.Bytes(d.Spec.Cores), Host: c.Nodes[d.Node].Name})
		}
	}
	if len(devs) < n {
		return nil, fmt.Errorf("%w: cluster %s's CPUs do not divide into %d devices of %d cores", ErrInfeasible, c.Name, n, per)
	}
	return devs, nil
}

// DevicesFor returns the devices of cluster c that a plan of strategy st
// is compiled over (Config.Devices): its first st.Devices() (see
// DevicesFromCluster), or, when st places its stages by device type
// (Strategy.Place) or names its devices (Strategy.DeviceNames), every
// device of the cluster, to choose from.
func DevicesFor(c *topology.Cluster, st Strategy, oversubscribe bool) ([]Device, error) {
	n := st.Devices()
	if st.Place != nil || st.DeviceNames != nil {
		n = max(n, len(c.Devices))
	}
	return DevicesFromCluster(c, n, oversubscribe)
}

// fewerCores is an ErrInfeasible that is also ErrFewerCores.
type fewerCores struct{ error }

func (e *fewerCores) Unwrap() []error { return []error{e.error, ErrFewerCores} }
