package topology

import (
	"fmt"
	"sync"
	"time"

	"gonum.org/v1/gonum/graph"
	"gonum.org/v1/gonum/graph/simple"

	"github.com/flowkit/flowkit/units"
)

// DeviceID indexes Cluster.Devices.
type DeviceID int

// LinkID indexes Cluster.Links.
type LinkID int

// Vertex is a vertex of the cluster graph: the devices come first
// (Vertex(id) is device id), then the switches.
type Vertex int

// Cluster is a loaded cluster: nodes, their devices and switches, the
// links between them, and the routes derived from those links. It is
// immutable once loaded and safe for concurrent use.
type Cluster struct {
	Name        string
	Description string
	Source      string
	Nodes       []Node
	Devices     []Device
	Switches    []Switch
	Links       []Link

	adj      [][]adjacent // per vertex, in link order
	port     []Vertex     // by device: the fabric port it leaves its node through; −1: none of its own
	portNode []int        // by vertex: the node whose devices' port it is; −1: no device's
	searches sync.Pool    // of *search, route searches' scratch
	byName   map[string]DeviceID

	mu     sync.Mutex
	routes map[[2]DeviceID]Route
}

// Node is a machine: the devices and switches inside one chassis.
type Node struct {
	Name     string
	Devices  []DeviceID
	Switches []int // indexes into Cluster.Switches
}

// Device is a compute device: a GPU, or a set of CPU cores.
type Device struct {
	ID   DeviceID
	Name string // qualified: "node0/gpu3"
	Node int    // index into Cluster.Nodes
	Type string // catalog type
	Spec DeviceSpec
}

// Switch is an element that forwards traffic: NVSwitch, PCIe switch, host
// bridge, NIC, or a network switch of the fabric (Node −1).
type Switch struct {
	Name string
	Node int
	Kind SwitchKind
}

// Link is a connection between two vertices. Bandwidth is per direction
// and already multiplied by Count.
type Link struct {
	ID         LinkID
	A, B       Vertex
	Kind       LinkKind
	Count      int // physical links bundled (nvidia-smi's NV#)
	Bandwidth  units.BytesPerSecond
	Latency    time.Duration
	Efficiency float64 // achievable fraction of Bandwidth
	// Duplex is how much of a second direction the link carries beside a
	// first: each direction moves up to Effective, and both together up
	// to (1 + Duplex)·Effective. 1 is full duplex (every link kind's
	// default: wires and lanes each way); 0 is half duplex, one direction's
	// worth shared by both, as a transport whose cost is the endpoints'
	// CPUs, which carry what they send and what they receive ('flowrun
	// calibrate link' measures it).
	Duplex float64
}

// Effective is the link's achievable bandwidth per direction.
func (l Link) Effective() units.BytesPerSecond {
	return l.Bandwidth * units.BytesPerSecond(l.Efficiency)
}

// Both is the link's achievable bandwidth in its two directions together:
// (1 + Duplex)·Effective.
func (l Link) Both() units.BytesPerSecond {
	return l.Effective() * units.BytesPerSecond(1+l.Duplex)
}

// HalfShared reports whether the link's two directions together carry
// less than twice one's bandwidth (Duplex < 1).
func (l Link) HalfShared() bool { return l.Duplex < 1 }

type adjacent struct {
	link  LinkID
	other Vertex
	fwd   bool // leaving through this link goes A→B
}

// NumVertices is the number of graph vertices: devices plus switches.
func (c *Cluster) NumVertices() int { return len(c.Devices) + len(c.Switches) }

// SwitchVertex is the vertex of switch i.
func (c *Cluster) SwitchVertex(i int) Vertex { return Vertex(len(c.Devices) + i) }

// DeviceAt reports whether v is a device, and which.
func (c *Cluster) DeviceAt(v Vertex) (DeviceID, bool) {
	if int(v) < len(c.Devices) {
		return DeviceID(v), true
	}
	return 0, false
}

// VertexName is the qualified name of a device or switch.
func (c *Cluster) VertexName(v Vertex) string {
	if id, ok := c.DeviceAt(v); ok {
		return c.Devices[id].Name
	}
	return c.Switches[int(v)-len(c.Devices)].Name
}

// VertexNode is the node a vertex belongs to, or −1 for the fabric.
func (c *Cluster) VertexNode(v Vertex) int {
	if id, ok := c.DeviceAt(v); ok {
		return c.Devices[id].Node
	}
	return c.Switches[int(v)-len(c.Devices)].Node
}

// DeviceByName finds a device by its qualified name.
func (c *Cluster) DeviceByName(name string) (DeviceID, bool) {
	id, ok := c.byName[name]
	return id, ok
}

// LinkByName finds the link between two named vertices.
func (c *Cluster) LinkByName(a, b string) (LinkID, bool) {
	for _, l := range c.Links {
		na, nb := c.VertexName(l.A), c.VertexName(l.B)
		if na == a && nb == b || na == b && nb == a {
			return l.ID, true
		}
	}
	return 0, false
}

// PeakFLOPs is the sum of the devices' peak rates for dtype.
func (c *Cluster) PeakFLOPs(dtype string) units.FLOPsPerSecond {
	var sum units.FLOPsPerSecond
	for _, d := range c.Devices {
		p, _ := d.Spec.Peak.PeakFor(dtype)
		sum += p
	}
	return sum
}

// Graph returns the link graph as a gonum weighted undirected graph: node
// IDs are Vertex values, edge weights per-direction bandwidths in bytes/s.
func (c *Cluster) Graph() graph.WeightedUndirected {
	g := simple.NewWeightedUndirectedGraph(0, 0)
	for v := range c.NumVertices() {
		g.AddNode(simple.Node(v))
	}
	for _, l := range c.Links {
		g.SetWeightedEdge(g.NewWeightedEdge(simple.Node(l.A), simple.Node(l.B), float64(l.Bandwidth)))
	}
	return g
}

// buildIndexes derives what searches use from the loaded cluster: the
// links at each vertex, the nodes of ports, devices by name.
func (c *Cluster) buildIndexes() {
	c.adj = make([][]adjacent, c.NumVertices())
	for _, l := range c.Links {
		c.adj[l.A] = append(c.adj[l.A], adjacent{link: l.ID, other: l.B, fwd: true})
		c.adj[l.B] = append(c.adj[l.B], adjacent{link: l.ID, other: l.A, fwd: false})
	}
	c.portNode = make([]int, c.NumVertices())
	for v := range c.portNode {
		c.portNode[v] = -1
	}
	for d, p := range c.port {
		if p >= 0 {
			c.portNode[p] = c.Devices[d].Node
		}
	}
	c.searches.New = func() any { return newSearch(c.NumVertices()) }
	c.byName = make(map[string]DeviceID, len(c.Devices))
	for _, d := range c.Devices {
		if _, dup := c.byName[d.Name]; !dup { // the first, as a search in order finds
			c.byName[d.Name] = d.ID
		}
	}
	c.routes = make(map[[2]DeviceID]Route)
}

// Port returns the fabric port (a switch vertex, such as a NIC) device d
// leaves and enters its node through, as NCCL pairs each GPU with a NIC;
// false if it has none of its own (see the fabric of cluster files).
func (c *Cluster) Port(d DeviceID) (Vertex, bool) {
	if int(d) < 0 || int(d) >= len(c.port) || c.port[d] < 0 {
		return 0, false
	}
	return c.port[d], true
}

func (c *Cluster) checkDevice(id DeviceID) error {
	if id < 0 || int(id) >= len(c.Devices) {
		return fmt.Errorf("topology: device %d out of range [0,%d)", id, len(c.Devices))
	}
	return nil
}
