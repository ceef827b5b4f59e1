package topology

import (
	"slices"
	"strings"
	"time"

	"github.com/flowkit/flowkit/units"
)

// LinkKind names a link technology: nvlink2, pcie4, ib-hdr, ethernet, …
type LinkKind string

// The link kinds. Each has a default per-direction bandwidth for one
// physical link (a link's count bundles several), a per-hop latency and an
// achievable efficiency; a cluster file may override all three per link.
const (
	NVLink1  LinkKind = "nvlink1"
	NVLink2  LinkKind = "nvlink2"
	NVLink3  LinkKind = "nvlink3"
	NVLink4  LinkKind = "nvlink4"
	PCIe3    LinkKind = "pcie3"
	PCIe4    LinkKind = "pcie4"
	PCIe5    LinkKind = "pcie5"
	IBEDR    LinkKind = "ib-edr"
	IBHDR    LinkKind = "ib-hdr"
	IBNDR    LinkKind = "ib-ndr"
	Ethernet LinkKind = "ethernet"
	MemBus   LinkKind = "membus"
	SMP      LinkKind = "smp"
)

// LinkDefaults are a link kind's figures when a cluster file gives none.
type LinkDefaults struct {
	Bandwidth  units.BytesPerSecond // per direction, one physical link
	Latency    time.Duration        // one hop, including the per-step software cost
	Efficiency float64              // achievable fraction of Bandwidth
	Family     string               // nvlink, pcie, infiniband, ethernet, memory, smp
	Source     string
}

// Latencies are one hop's share of NCCL's per-step hardware latencies
// (src/graph/tuning.cc, LL protocol: NVLink 0.6 µs, PCIe 1 µs, network
// 2.7 µs end to end). Efficiencies are measured bus bandwidth over link
// rate from nccl-tests reports: ~80% on NVLink/NVSwitch and PCIe (TLP and
// protocol overhead), ~92% on InfiniBand, ~70% on TCP Ethernet.
var linkKinds = map[LinkKind]LinkDefaults{
	NVLink1:  {20 * units.GBps, 500 * time.Nanosecond, 0.8, "nvlink", "P100 NVLink 1.0: 20 GB/s per link per direction (40 GB/s bidirectional)"},
	NVLink2:  {25 * units.GBps, 500 * time.Nanosecond, 0.8, "nvlink", "V100 NVLink 2.0: 25 GB/s per link per direction; 6 links = 300 GB/s bidirectional"},
	NVLink3:  {25 * units.GBps, 500 * time.Nanosecond, 0.8, "nvlink", "A100 NVLink 3.0: 25 GB/s per link per direction; 12 links = 600 GB/s bidirectional"},
	NVLink4:  {25 * units.GBps, 500 * time.Nanosecond, 0.8, "nvlink", "H100 NVLink 4.0: 25 GB/s per link per direction; 18 links = 900 GB/s bidirectional"},
	PCIe3:    {15.75 * units.GBps, 1 * time.Microsecond, 0.8, "pcie", "PCIe 3.0 x16: 8 GT/s × 16 lanes × 128/130 = 15.75 GB/s per direction"},
	PCIe4:    {31.5 * units.GBps, 1 * time.Microsecond, 0.8, "pcie", "PCIe 4.0 x16: 16 GT/s × 16 × 128/130 = 31.5 GB/s per direction"},
	PCIe5:    {63 * units.GBps, 1 * time.Microsecond, 0.8, "pcie", "PCIe 5.0 x16: 32 GT/s × 16 × 128/130 = 63 GB/s per direction"},
	IBEDR:    {100 * units.Gbps, 1500 * time.Nanosecond, 0.92, "infiniband", "InfiniBand EDR 4x: 100 Gb/s per direction"},
	IBHDR:    {200 * units.Gbps, 1500 * time.Nanosecond, 0.92, "infiniband", "InfiniBand HDR 4x: 200 Gb/s per direction"},
	IBNDR:    {400 * units.Gbps, 1500 * time.Nanosecond, 0.92, "infiniband", "InfiniBand NDR 4x: 400 Gb/s per direction"},
	Ethernet: {10 * units.Gbps, 15 * time.Microsecond, 0.7, "ethernet", "10 GbE unless the file says otherwise; TCP socket latency"},
	MemBus:   {100 * units.GBps, 100 * time.Nanosecond, 0.8, "memory", "CPU cores to their host bridge: set bandwidth to the socket's memory bandwidth"},
	SMP:      {20 * units.GBps, 500 * time.Nanosecond, 0.8, "smp", "inter-socket link (QPI 9.6 GT/s, UPI 10.4 GT/s, xGMI): ~20 GB/s per direction"},
}

// Defaults returns the kind's default figures and whether the kind exists.
func (k LinkKind) Defaults() (LinkDefaults, bool) {
	d, ok := linkKinds[k]
	return d, ok
}

// LinkKinds lists the link kinds, sorted.
func LinkKinds() []LinkKind {
	var ks []LinkKind
	for k := range linkKinds {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func linkKindNames() string {
	var s []string
	for _, k := range LinkKinds() {
		s = append(s, string(k))
	}
	return strings.Join(s, ", ")
}

// SwitchKind names an element that forwards traffic without computing.
type SwitchKind string

// Switch kinds. Devices never forward traffic (GPUs do not relay peer
// traffic); only switches do.
const (
	NVSwitch   SwitchKind = "nvswitch"    // NVSwitch chips of a node, modeled as one crossbar
	PCIeSwitch SwitchKind = "pcie-switch" // a PCIe switch (PLX/Broadcom)
	Host       SwitchKind = "host"        // a CPU socket's root complex / host bridge
	NIC        SwitchKind = "nic"         // a network adapter
	IBSwitch   SwitchKind = "ib-switch"   // an InfiniBand switch
	EthSwitch  SwitchKind = "eth-switch"  // an Ethernet switch
)

var switchKinds = []SwitchKind{NVSwitch, PCIeSwitch, Host, NIC, IBSwitch, EthSwitch}

func validSwitchKind(k SwitchKind) bool { return slices.Contains(switchKinds, k) }

func switchKindNames() string {
	var s []string
	for _, k := range switchKinds {
		s = append(s, string(k))
	}
	return strings.Join(s, ", ")
}
