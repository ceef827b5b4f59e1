package topology

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/flowkit/flowkit/units"
)

// elemRef is a device or switch under construction.
type elemRef struct {
	device bool
	index  int
}

// builder expands a fileSpec into a Cluster.
type builder struct {
	d      *yamlDecoder
	c      *Cluster
	local  []map[string]elemRef // per node: local name -> element
	top    map[string]int       // top-level switches
	devPos []*deviceSpec
	links  map[[2]elemRef]*yaml.Node
	pend   []pendingLink
}

type pendingLink struct {
	a, b elemRef
	p    linkParams
}

func (d *yamlDecoder) build(fs *fileSpec, scale int) (*Cluster, error) {
	c := &Cluster{Name: fs.name, Description: fs.description, Source: fs.source}
	b := &builder{d: d, c: c, top: map[string]int{}, links: map[[2]elemRef]*yaml.Node{}}
	nodeNames := map[string]bool{}
	vertices := 0
	type inst struct {
		spec *nodeSpec
		node int
	}
	var insts []inst
	for _, ns := range fs.nodes {
		count := ns.count * scale
		if len(c.Nodes)+count > min(maxNodes, d.maxVertices) {
			return nil, d.invalid(ns.nameN, join(ns.path, "count"), "more than %d nodes", min(maxNodes, d.maxVertices))
		}
		for i := range count {
			name := ns.name
			if count > 1 {
				name += strconv.Itoa(i)
			}
			if nodeNames[name] {
				return nil, d.errAt(ns.nameN, join(ns.path, "name"), detailf(ErrDuplicateName, "duplicate node name %q", name))
			}
			nodeNames[name] = true
			c.Nodes = append(c.Nodes, Node{Name: name})
			b.local = append(b.local, map[string]elemRef{})
			insts = append(insts, inst{ns, len(c.Nodes) - 1})
		}
	}
	// Devices first (their IDs are vertices 0..n-1), then switches.
	for _, in := range insts {
		for _, ds := range in.spec.devices {
			for _, local := range ds.names {
				if err := b.declare(in.node, local, elemRef{device: true, index: len(c.Devices)}, ds.nameN, join(ds.path, "name")); err != nil {
					return nil, err
				}
				if vertices++; vertices > d.maxVertices {
					return nil, d.invalid(ds.nameN, join(ds.path, "name"), "more than %d devices and switches", d.maxVertices)
				}
				spec, err := Spec(ds.typ, ds.cores)
				if err != nil {
					return nil, d.errAt(ds.typeN, join(ds.path, "type"), err)
				}
				if ds.memory > 0 {
					spec.Memory = ds.memory
				}
				id := DeviceID(len(c.Devices))
				c.Devices = append(c.Devices, Device{ID: id, Name: c.Nodes[in.node].Name + "/" + local, Node: in.node, Type: spec.Type, Spec: spec})
				c.Nodes[in.node].Devices = append(c.Nodes[in.node].Devices, id)
				b.devPos = append(b.devPos, ds)
			}
		}
	}
	for _, in := range insts {
		for _, ss := range in.spec.switches {
			for _, local := range ss.names {
				if err := b.declare(in.node, local, elemRef{index: len(c.Switches)}, ss.nameN, join(ss.path, "name")); err != nil {
					return nil, err
				}
				if vertices++; vertices > d.maxVertices {
					return nil, d.invalid(ss.nameN, join(ss.path, "name"), "more than %d devices and switches", d.maxVertices)
				}
				c.Nodes[in.node].Switches = append(c.Nodes[in.node].Switches, len(c.Switches))
				c.Switches = append(c.Switches, Switch{Name: c.Nodes[in.node].Name + "/" + local, Node: in.node, Kind: ss.kind})
			}
		}
	}
	for _, ss := range fs.switches {
		for _, name := range ss.names {
			if _, dup := b.top[name]; dup || nodeNames[name] {
				return nil, d.errAt(ss.nameN, join(ss.path, "name"), detailf(ErrDuplicateName, "duplicate name %q", name))
			}
			b.top[name] = len(c.Switches)
			c.Switches = append(c.Switches, Switch{Name: name, Node: -1, Kind: ss.kind})
		}
	}
	for _, in := range insts {
		for _, ls := range in.spec.links {
			resolve := func(name string) (elemRef, bool) {
				r, ok := b.local[in.node][name]
				return r, ok
			}
			if err := b.link(ls, resolve, fmt.Sprintf(" in node %q", c.Nodes[in.node].Name)); err != nil {
				return nil, err
			}
		}
	}
	for _, ls := range fs.links {
		if err := b.link(ls, b.resolveGlobal, ""); err != nil {
			return nil, err
		}
	}
	c.port = make([]Vertex, len(c.Devices))
	for i := range c.port {
		c.port[i] = -1
	}
	if fs.fabric != nil && len(c.Nodes) > 1 {
		if err := b.fabric(fs.fabric); err != nil {
			return nil, err
		}
	}
	b.finishLinks()
	if err := b.checkConnected(); err != nil {
		if fs.fabric == nil && len(c.Nodes) > 1 {
			return nil, fmt.Errorf("%w; the cluster has %d nodes and no fabric to join them (fabric: {kind: ib-hdr, ports: nic})", err, len(c.Nodes))
		}
		return nil, err
	}
	c.buildIndexes()
	return c, nil
}

func (b *builder) declare(node int, local string, r elemRef, n *yaml.Node, field string) error {
	if _, dup := b.local[node][local]; dup {
		return b.d.errAt(n, field, detailf(ErrDuplicateName, "duplicate name %q in node %q", local, b.c.Nodes[node].Name))
	}
	b.local[node][local] = r
	return nil
}

// resolveGlobal resolves "node/element" or a top-level switch name.
func (b *builder) resolveGlobal(name string) (elemRef, bool) {
	if node, local, ok := strings.Cut(name, "/"); ok {
		for i, n := range b.c.Nodes {
			if n.Name == node {
				r, ok := b.local[i][local]
				return r, ok
			}
		}
		return elemRef{}, false
	}
	i, ok := b.top[name]
	return elemRef{index: i}, ok
}

func (b *builder) name(r elemRef) string {
	if r.device {
		return b.c.Devices[r.index].Name
	}
	return b.c.Switches[r.index].Name
}

func (b *builder) link(ls *linkSpec, resolve func(string) (elemRef, bool), where string) error {
	look := func(names []string, n *yaml.Node, field string) ([]elemRef, error) {
		var out []elemRef
		for _, name := range names {
			r, ok := resolve(name)
			if !ok {
				return nil, b.d.errAt(n, join(ls.path, field), detailf(ErrUnknownEndpoint, "unknown endpoint %q%s", name, where))
			}
			out = append(out, r)
		}
		return out, nil
	}
	from, err := look(ls.from, ls.fromN, "from")
	if err != nil {
		return err
	}
	to, err := look(ls.to, ls.toN, "to")
	if err != nil {
		return err
	}
	n := max(len(from), len(to))
	for i := range n {
		a, z := from[min(i, len(from)-1)], to[min(i, len(to)-1)]
		if err := b.addLink(a, z, ls.linkParams, ls.self, ls.path); err != nil {
			return err
		}
	}
	return nil
}

func (b *builder) addLink(a, z elemRef, p linkParams, at *yaml.Node, path string) error {
	if a == z {
		return b.d.invalid(at, path, "link from %q to itself", b.name(a))
	}
	key := [2]elemRef{a, z}
	if z.device && !a.device || a.device == z.device && z.index < a.index {
		key = [2]elemRef{z, a}
	}
	if first, dup := b.links[key]; dup {
		line := 0
		if first != nil {
			line = first.Line
		}
		return b.d.invalid(at, path, "second link between %q and %q (first at line %d): bundle links with count", b.name(a), b.name(z), line)
	}
	if len(b.links) >= 4*b.d.maxVertices {
		return b.d.invalid(at, path, "more than %d links", 4*b.d.maxVertices)
	}
	b.links[key] = at
	b.pend = append(b.pend, pendingLink{a, z, p})
	return nil
}

// fabric attaches every node's ports to one switch, or to a non-blocking
// fat tree when there are more ports than a switch has: up to radix²/2
// ports two levels (leaves with radix/2 ports down and radix/2 up, and
// spines), up to radix³/4 three (pods of radix/2 leaves and radix/2
// aggregation switches, and core switches: Selene's 3,072 HDR ports on
// radix-40 switches). A level above the leaves is modeled as one switch
// (the spines; a pod's aggregation switches; the core) and each switch
// below it as one link of all its uplinks: a non-blocking tree with
// adaptive routing spreads flows over its parallel switches, which
// single-path routes over separate switches could not, and so links
// shared by concurrent flows are shared as the fabric shares them. More
// ports than radix³/4 is an error. It also records which port each
// device of a node leaves through (see Cluster.Port).
func (b *builder) fabric(f *fabricSpec) error {
	var ports []elemRef
	for i, node := range b.c.Nodes {
		var mine []elemRef
		for _, name := range f.ports {
			r, ok := b.local[i][name]
			if !ok {
				return b.d.errAt(f.portsN, join(f.path, "ports"), detailf(ErrUnknownEndpoint, "node %q has no element %q to attach", node.Name, name))
			}
			mine = append(mine, r)
		}
		ports = append(ports, mine...)
		b.affine(node, mine)
	}
	kind := IBSwitch
	if linkKinds[f.kind].Family == "ethernet" {
		kind = EthSwitch
	}
	addSwitch := func(name string) elemRef {
		b.c.Switches = append(b.c.Switches, Switch{Name: name, Node: -1, Kind: kind})
		return elemRef{index: len(b.c.Switches) - 1}
	}
	if len(ports) <= f.radix {
		sw := addSwitch("fabric/switch")
		for _, p := range ports {
			if err := b.addLink(p, sw, f.linkParams, f.self, f.path); err != nil {
				return err
			}
		}
		return nil
	}
	down := f.radix / 2
	leaves := (len(ports) + down - 1) / down
	if leaves > f.radix*f.radix/2 {
		return b.d.invalid(f.self, f.path, "%d ports need more than three fat-tree levels of radix-%d switches (at most %d ports)", len(ports), f.radix, f.radix*f.radix*f.radix/4)
	}
	leafRefs := make([]elemRef, leaves)
	for i := range leafRefs {
		leafRefs[i] = addSwitch(fmt.Sprintf("fabric/leaf%d", i))
	}
	for i, p := range ports {
		if err := b.addLink(p, leafRefs[i/down], f.linkParams, f.self, f.path); err != nil {
			return err
		}
	}
	// uplink joins a switch to the level above with n ports' worth of
	// uplinks: a switch has radix/2 uplinks whatever it has below it.
	portBW, _, _ := f.linkParams.resolve()
	uplink := func(lo, hi elemRef, n int) error {
		up := f.linkParams
		up.bandwidth, up.count = portBW*units.BytesPerSecond(n), n
		return b.addLink(lo, hi, up, f.self, f.path)
	}
	if leaves <= f.radix {
		spine := addSwitch("fabric/spine")
		for _, leaf := range leafRefs {
			if err := uplink(leaf, spine, down); err != nil {
				return err
			}
		}
		return nil
	}
	core := addSwitch("fabric/core")
	for pod := 0; pod*down < leaves; pod++ {
		agg := addSwitch(fmt.Sprintf("fabric/pod%d", pod))
		for _, leaf := range leafRefs[pod*down : min((pod+1)*down, leaves)] {
			if err := uplink(leaf, agg, down); err != nil {
				return err
			}
		}
		if err := uplink(agg, core, down*down); err != nil {
			return err
		}
	}
	return nil
}

// affine records the fabric port each device of node leaves and enters
// the node through, as NCCL pairs GPUs with NICs: with as many ports as
// devices, device i takes port i; with k devices per port, devices
// i·k … i·k+k−1 share port i; with k ports per device, device i takes port
// i·k. Otherwise devices have no port of their own. Routes prefer a
// device's port among paths that are otherwise equal (Cluster.Route).
func (b *builder) affine(node Node, ports []elemRef) {
	g, p := len(node.Devices), len(ports)
	if g == 0 || p == 0 || g%p != 0 && p%g != 0 {
		return
	}
	for i, d := range node.Devices {
		port := ports[i*p/g]
		if g > p {
			port = ports[i/(g/p)]
		}
		b.c.port[d] = b.vertex(port)
	}
}

func (b *builder) vertex(r elemRef) Vertex {
	if r.device {
		return Vertex(r.index)
	}
	return Vertex(len(b.c.Devices) + r.index)
}

func (b *builder) finishLinks() {
	for _, pl := range b.pend {
		bw, lat, eff := pl.p.resolve()
		b.c.Links = append(b.c.Links, Link{ID: LinkID(len(b.c.Links)), A: b.vertex(pl.a), B: b.vertex(pl.b),
			Kind: pl.p.kind, Count: pl.p.count, Bandwidth: bw, Latency: lat, Efficiency: eff, Duplex: pl.p.duplexOf()})
	}
}

// checkConnected checks that every pair of devices has a route: either a
// direct link or a path through switches only.
func (b *builder) checkConnected() error {
	c := b.c
	nd, ns := len(c.Devices), len(c.Switches)
	parent := make([]int, ns)
	for i := range parent {
		parent[i] = i
	}
	find := func(x int) int {
		for parent[x] != x {
			parent[x] = parent[parent[x]]
			x = parent[x]
		}
		return x
	}
	touches := make([][]int, nd) // switch components each device reaches
	direct := make([]map[int]bool, nd)
	for _, l := range c.Links {
		da, aDev := c.DeviceAt(l.A)
		db, bDev := c.DeviceAt(l.B)
		switch {
		case !aDev && !bDev:
			parent[find(int(l.A)-nd)] = find(int(l.B) - nd)
		case aDev && bDev:
			if direct[da] == nil {
				direct[da] = map[int]bool{}
			}
			if direct[db] == nil {
				direct[db] = map[int]bool{}
			}
			direct[da][int(db)], direct[db][int(da)] = true, true
		}
	}
	for _, l := range c.Links {
		da, aDev := c.DeviceAt(l.A)
		db, bDev := c.DeviceAt(l.B)
		if aDev && !bDev {
			touches[da] = append(touches[da], find(int(l.B)-nd))
		}
		if bDev && !aDev {
			touches[db] = append(touches[db], find(int(l.A)-nd))
		}
	}
	for i := range nd {
		if len(touches[i]) == 0 && len(direct[i]) == 0 && nd > 1 {
			return b.disconnected(i, "is connected to nothing")
		}
	}
	shares := func(i, j int) bool {
		if direct[i][j] {
			return true
		}
		for _, x := range touches[i] {
			for _, y := range touches[j] {
				if x == y {
					return true
				}
			}
		}
		return false
	}
	// Fast path: one switch component every device touches.
	if nd > 0 && len(touches[0]) > 0 {
		common := touches[0][0]
		all := true
		for i := range nd {
			found := false
			for _, x := range touches[i] {
				found = found || x == common
			}
			all = all && found
		}
		if all {
			return nil
		}
	}
	for j := 1; j < nd; j++ {
		for i := range j {
			if !shares(i, j) {
				return b.disconnected(j, fmt.Sprintf("has no route to %q (devices do not forward traffic: join them through a switch)", c.Devices[i].Name))
			}
		}
	}
	return nil
}

func (b *builder) disconnected(i int, why string) error {
	ds := b.devPos[i]
	return b.d.errAt(ds.nameN, join(ds.path, "name"), detailf(ErrDisconnected, "device %q %s", b.c.Devices[i].Name, why))
}
