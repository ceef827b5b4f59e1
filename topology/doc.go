// Package topology describes clusters: a catalog of device types with their
// datasheet peaks, cluster files (YAML) of nodes, devices, switches and
// links, built-in presets, and the routes and bisection bandwidth derived
// from the link graph.
//
// Units: bandwidths are per direction (links are full duplex), in
// units.BytesPerSecond; latencies are time.Duration; sizes units.Bytes.
// Cluster files write quantities as strings ("300GB/s", "100Gb/s", "2us",
// "80GiB"); see README.md for the schema.
//
// Graph: devices and switches are the vertices (devices first, so a
// DeviceID is its Vertex), links the edges. Only switches forward traffic —
// NVSwitch, PCIe switches, host bridges, NICs, network switches — so a
// route never passes through a third device. Routes maximize the
// bottleneck bandwidth, then minimize hops, then latency; ties go to lower
// link numbers, so every result is deterministic.
//
// Errors: a bad cluster file gets an *Error naming the file, line and field
// path, wrapping one of ErrInvalid, ErrBadQuantity, ErrUnknownDeviceType,
// ErrUnknownEndpoint, ErrDuplicateName or ErrDisconnected.
//
// The package imports nothing of flowkit's but units.
package topology
