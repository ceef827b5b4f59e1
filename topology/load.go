package topology

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/flowkit/flowkit/internal/yamlnode"

	"github.com/flowkit/flowkit/units"
)

// Limits that keep a malformed or hostile file from exhausting memory.
const (
	maxNodes    = 4096
	maxVertices = 1 << 16
	maxCount    = 1024 // physical links in one bundle
)

// Load reads a cluster file.
func Load(path string) (*Cluster, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	return Parse(path, data)
}

// Parse parses a cluster file's contents; name is used in error messages.
func Parse(name string, data []byte) (*Cluster, error) {
	return parse(name, data, 1)
}

func parse(name string, data []byte, scale int) (*Cluster, error) {
	return parseLimited(name, data, scale, maxVertices)
}

// parseLimited parses with a bound on devices plus switches (the fuzz test
// uses a small one, to spend its time on inputs rather than on huge fabrics).
func parseLimited(name string, data []byte, scale, vertexLimit int) (*Cluster, error) {
	d := &yamlDecoder{file: name, maxVertices: vertexLimit}
	fs, err := d.decode(data)
	if err != nil {
		return nil, err
	}
	return d.build(fs, scale)
}

type yamlDecoder struct {
	file        string
	maxVertices int
}

func (d *yamlDecoder) errAt(n *yaml.Node, field string, err error) *Error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &Error{File: d.file, Line: line, Field: field, Err: err}
}

func (d *yamlDecoder) invalid(n *yaml.Node, field, format string, args ...any) *Error {
	return d.errAt(n, field, detailf(ErrInvalid, format, args...))
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 16; i++ {
		n = n.Alias
	}
	return n
}

// fields decodes a mapping, rejecting unknown and repeated keys.
func (d *yamlDecoder) fields(n *yaml.Node, path string, allowed ...string) (map[string]*yaml.Node, error) {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil, d.invalid(n, path, "want a mapping with fields %s, got %s", strings.Join(allowed, ", "), yamlnode.Describe(n))
	}
	m := make(map[string]*yaml.Node)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if !slices.Contains(allowed, k.Value) {
			return nil, d.invalid(k, join(path, k.Value), "unknown field (want one of %s)", strings.Join(allowed, ", "))
		}
		if _, dup := m[k.Value]; dup {
			return nil, d.invalid(k, join(path, k.Value), "repeated field")
		}
		m[k.Value] = deref(n.Content[i+1])
	}
	return m, nil
}

func (d *yamlDecoder) scalar(n *yaml.Node, path string) (string, error) {
	if n == nil || n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return "", d.invalid(n, path, "want a value, got %s", yamlnode.Describe(n))
	}
	return n.Value, nil
}

func (d *yamlDecoder) list(n *yaml.Node, path string) ([]*yaml.Node, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, d.invalid(n, path, "want a list, got %s", yamlnode.Describe(n))
	}
	out := make([]*yaml.Node, len(n.Content))
	for i, c := range n.Content {
		out[i] = deref(c)
	}
	return out, nil
}

func (d *yamlDecoder) intValue(n *yaml.Node, path string, lo, hi int) (int, error) {
	s, err := d.scalar(n, path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, d.invalid(n, path, "want an integer, got %q", s)
	}
	if v < lo || v > hi {
		return 0, d.invalid(n, path, "must be between %d and %d, got %d", lo, hi, v)
	}
	return v, nil
}

func (d *yamlDecoder) names(n *yaml.Node, path string) ([]string, error) {
	s, err := d.scalar(n, path)
	if err != nil {
		return nil, err
	}
	names, err := expandNames(s)
	if err != nil {
		return nil, d.invalid(n, path, "%v", err)
	}
	for _, name := range names {
		for part := range strings.SplitSeq(name, "/") {
			if !validName(part) {
				return nil, d.invalid(n, path, "bad name %q (letters, digits, '-', '_' and '.' only)", name)
			}
		}
	}
	return names, nil
}

// The parsed file, before expansion. Each part keeps its YAML nodes so that
// later checks can point at a line.
type fileSpec struct {
	name, description, source string
	nodes                     []*nodeSpec
	fabric                    *fabricSpec
	switches                  []*switchSpec
	links                     []*linkSpec
}

type nodeSpec struct {
	path     string
	nameN    *yaml.Node
	name     string
	count    int
	devices  []*deviceSpec
	switches []*switchSpec
	links    []*linkSpec
}

type deviceSpec struct {
	path   string
	nameN  *yaml.Node
	names  []string
	typ    string
	typeN  *yaml.Node
	cores  int         // 0: catalog default
	memory units.Bytes // 0: catalog default
}

type switchSpec struct {
	path  string
	nameN *yaml.Node
	names []string
	kind  SwitchKind
}

type linkParams struct {
	kind       LinkKind
	count      int
	bandwidth  units.BytesPerSecond // 0: default
	latency    time.Duration
	hasLatency bool
	efficiency float64 // 0: default
	duplex     float64
	hasDuplex  bool
}

type linkSpec struct {
	path     string
	self     *yaml.Node
	fromN    *yaml.Node
	toN      *yaml.Node
	from, to []string
	linkParams
}

type fabricSpec struct {
	path   string
	self   *yaml.Node
	portsN *yaml.Node
	ports  []string
	radix  int
	linkParams
}

func (d *yamlDecoder) decode(data []byte) (*fileSpec, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, d.yamlError(err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, d.invalid(&doc, "", "empty cluster file")
	}
	f, err := d.fields(doc.Content[0], "", "name", "description", "source", "nodes", "fabric", "switches", "links")
	if err != nil {
		return nil, err
	}
	fs := &fileSpec{}
	for key, dst := range map[string]*string{"name": &fs.name, "description": &fs.description, "source": &fs.source} {
		if n, ok := f[key]; ok {
			if *dst, err = d.scalar(n, key); err != nil {
				return nil, err
			}
		}
	}
	nodesN, ok := f["nodes"]
	if !ok {
		return nil, d.invalid(doc.Content[0], "nodes", "missing: a cluster needs at least one node")
	}
	nodes, err := d.list(nodesN, "nodes")
	if err != nil {
		return nil, err
	}
	if len(nodes) == 0 {
		return nil, d.invalid(nodesN, "nodes", "empty: a cluster needs at least one node")
	}
	for i, n := range nodes {
		ns, err := d.node(n, fmt.Sprintf("nodes[%d]", i))
		if err != nil {
			return nil, err
		}
		fs.nodes = append(fs.nodes, ns)
	}
	if n, ok := f["fabric"]; ok {
		if fs.fabric, err = d.fabric(n, "fabric"); err != nil {
			return nil, err
		}
	}
	if n, ok := f["switches"]; ok {
		if fs.switches, err = d.switches(n, "switches"); err != nil {
			return nil, err
		}
	}
	if n, ok := f["links"]; ok {
		if fs.links, err = d.links(n, "links"); err != nil {
			return nil, err
		}
	}
	return fs, nil
}

// yamlError turns a YAML syntax error into an *Error with its line.
func (d *yamlDecoder) yamlError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, tail, ok := strings.Cut(rest, ": "); ok {
			if l, e := strconv.Atoi(num); e == nil {
				line, msg = l, tail
			}
		}
	}
	return &Error{File: d.file, Line: line, Err: detailf(ErrInvalid, "YAML: %s", msg)}
}

func (d *yamlDecoder) node(n *yaml.Node, path string) (*nodeSpec, error) {
	f, err := d.fields(n, path, "name", "count", "devices", "switches", "links")
	if err != nil {
		return nil, err
	}
	ns := &nodeSpec{path: path, nameN: f["name"], count: 1}
	if ns.nameN == nil {
		return nil, d.invalid(n, join(path, "name"), "missing")
	}
	if ns.name, err = d.scalar(ns.nameN, join(path, "name")); err != nil {
		return nil, err
	}
	if !validName(ns.name) {
		return nil, d.invalid(ns.nameN, join(path, "name"), "bad name %q (letters, digits, '-', '_' and '.' only)", ns.name)
	}
	if c, ok := f["count"]; ok {
		if ns.count, err = d.intValue(c, join(path, "count"), 1, maxNodes); err != nil {
			return nil, err
		}
	}
	devs, ok := f["devices"]
	if !ok {
		return nil, d.invalid(n, join(path, "devices"), "missing: a node needs at least one device")
	}
	items, err := d.list(devs, join(path, "devices"))
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, d.invalid(devs, join(path, "devices"), "empty: a node needs at least one device")
	}
	for i, item := range items {
		ds, err := d.device(item, fmt.Sprintf("%s.devices[%d]", path, i))
		if err != nil {
			return nil, err
		}
		ns.devices = append(ns.devices, ds)
	}
	if s, ok := f["switches"]; ok {
		if ns.switches, err = d.switches(s, join(path, "switches")); err != nil {
			return nil, err
		}
	}
	if l, ok := f["links"]; ok {
		if ns.links, err = d.links(l, join(path, "links")); err != nil {
			return nil, err
		}
	}
	return ns, nil
}

func (d *yamlDecoder) device(n *yaml.Node, path string) (*deviceSpec, error) {
	f, err := d.fields(n, path, "name", "type", "cores", "memory")
	if err != nil {
		return nil, err
	}
	ds := &deviceSpec{path: path, nameN: f["name"], typeN: f["type"]}
	if ds.nameN == nil {
		return nil, d.invalid(n, join(path, "name"), "missing")
	}
	if ds.names, err = d.names(ds.nameN, join(path, "name")); err != nil {
		return nil, err
	}
	if ds.typeN == nil {
		return nil, d.invalid(n, join(path, "type"), "missing (known: %s)", strings.Join(DeviceTypes(), ", "))
	}
	if ds.typ, err = d.scalar(ds.typeN, join(path, "type")); err != nil {
		return nil, err
	}
	spec, err := Spec(ds.typ, 1)
	if err != nil {
		return nil, d.errAt(ds.typeN, join(path, "type"), err)
	}
	ds.typ = spec.Type
	if c, ok := f["cores"]; ok {
		if spec.Class != CPU {
			return nil, d.invalid(c, join(path, "cores"), "only CPU devices have cores; %s is a GPU", spec.Type)
		}
		if c.Value == "auto" {
			ds.cores = runtime.NumCPU()
		} else if ds.cores, err = d.intValue(c, join(path, "cores"), 1, MaxCores); err != nil {
			return nil, err
		}
	}
	if m, ok := f["memory"]; ok {
		s, err := d.scalar(m, join(path, "memory"))
		if err != nil {
			return nil, err
		}
		if s == "auto" {
			if spec.Class != CPU {
				return nil, d.invalid(m, join(path, "memory"), "auto (this machine's memory) is for CPU devices; %s is a GPU: give its memory, as 80GiB, or leave it to the catalog (%v)", spec.Type, spec.Memory)
			}
			ds.memory = hostMemory(spec.Memory)
		} else {
			b, err := ParseSize(s)
			if err != nil {
				return nil, d.errAt(m, join(path, "memory"), quantityError(err))
			}
			if b <= 0 {
				return nil, d.invalid(m, join(path, "memory"), "must be positive, got %s", s)
			}
			ds.memory = b
		}
	}
	return ds, nil
}

// hostMemory is this machine's memory from /proc/meminfo, or def.
func hostMemory(def units.Bytes) units.Bytes {
	if m, ok := HostMemory(); ok {
		return m
	}
	return def
}

// HostMemory is this machine's memory (MemTotal in /proc/meminfo); ok is
// false where that cannot be read (not Linux).
func HostMemory() (units.Bytes, bool) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err == nil && kb > 0 {
				return units.Bytes(kb) * units.KiB, true
			}
		}
	}
	return 0, false
}

func (d *yamlDecoder) switches(n *yaml.Node, path string) ([]*switchSpec, error) {
	items, err := d.list(n, path)
	if err != nil {
		return nil, err
	}
	var out []*switchSpec
	for i, item := range items {
		p := fmt.Sprintf("%s[%d]", path, i)
		f, err := d.fields(item, p, "name", "kind")
		if err != nil {
			return nil, err
		}
		ss := &switchSpec{path: p, nameN: f["name"]}
		if ss.nameN == nil {
			return nil, d.invalid(item, join(p, "name"), "missing")
		}
		if ss.names, err = d.names(ss.nameN, join(p, "name")); err != nil {
			return nil, err
		}
		k, ok := f["kind"]
		if !ok {
			return nil, d.invalid(item, join(p, "kind"), "missing (want one of %s)", switchKindNames())
		}
		s, err := d.scalar(k, join(p, "kind"))
		if err != nil {
			return nil, err
		}
		if ss.kind = SwitchKind(s); !validSwitchKind(ss.kind) {
			return nil, d.invalid(k, join(p, "kind"), "unknown switch kind %q (want one of %s)", s, switchKindNames())
		}
		out = append(out, ss)
	}
	return out, nil
}

// linkParams decodes the fields links and the fabric share.
func (d *yamlDecoder) linkParams(f map[string]*yaml.Node, self *yaml.Node, path string) (linkParams, error) {
	var p linkParams
	k, ok := f["kind"]
	if !ok {
		return p, d.invalid(self, join(path, "kind"), "missing (want one of %s)", linkKindNames())
	}
	s, err := d.scalar(k, join(path, "kind"))
	if err != nil {
		return p, err
	}
	if p.kind = LinkKind(s); !knownLinkKind(p.kind) {
		return p, d.invalid(k, join(path, "kind"), "unknown link kind %q (want one of %s)", s, linkKindNames())
	}
	p.count = 1
	if c, ok := f["count"]; ok {
		if p.count, err = d.intValue(c, join(path, "count"), 1, maxCount); err != nil {
			return p, err
		}
	}
	if b, ok := f["bandwidth"]; ok {
		s, err := d.scalar(b, join(path, "bandwidth"))
		if err != nil {
			return p, err
		}
		if p.bandwidth, err = ParseBandwidth(s); err != nil {
			return p, d.errAt(b, join(path, "bandwidth"), quantityError(err))
		}
		if p.bandwidth <= 0 {
			return p, d.invalid(b, join(path, "bandwidth"), "must be positive, got %s", s)
		}
	}
	if l, ok := f["latency"]; ok {
		s, err := d.scalar(l, join(path, "latency"))
		if err != nil {
			return p, err
		}
		if p.latency, err = ParseLatency(s); err != nil {
			return p, d.errAt(l, join(path, "latency"), quantityError(err))
		}
		if p.latency < 0 {
			return p, d.invalid(l, join(path, "latency"), "must not be negative, got %s", s)
		}
		p.hasLatency = true
	}
	if e, ok := f["efficiency"]; ok {
		s, err := d.scalar(e, join(path, "efficiency"))
		if err != nil {
			return p, err
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(v > 0 && v <= 1) {
			return p, d.invalid(e, join(path, "efficiency"), "must be a fraction in (0, 1], got %q", s)
		}
		p.efficiency = v
	}
	if e, ok := f["duplex"]; ok {
		s, err := d.scalar(e, join(path, "duplex"))
		if err != nil {
			return p, err
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(v >= 0 && v <= 1) {
			return p, d.invalid(e, join(path, "duplex"), "must be a fraction in [0, 1] (1 full duplex, 0 half), got %q", s)
		}
		p.duplex, p.hasDuplex = v, true
	}
	return p, nil
}

func knownLinkKind(k LinkKind) bool {
	_, ok := linkKinds[k]
	return ok
}

func (d *yamlDecoder) links(n *yaml.Node, path string) ([]*linkSpec, error) {
	items, err := d.list(n, path)
	if err != nil {
		return nil, err
	}
	var out []*linkSpec
	for i, item := range items {
		p := fmt.Sprintf("%s[%d]", path, i)
		f, err := d.fields(item, p, "from", "to", "kind", "count", "bandwidth", "latency", "efficiency", "duplex")
		if err != nil {
			return nil, err
		}
		ls := &linkSpec{path: p, self: item, fromN: f["from"], toN: f["to"]}
		if ls.fromN == nil {
			return nil, d.invalid(item, join(p, "from"), "missing")
		}
		if ls.toN == nil {
			return nil, d.invalid(item, join(p, "to"), "missing")
		}
		if ls.from, err = d.names(ls.fromN, join(p, "from")); err != nil {
			return nil, err
		}
		if ls.to, err = d.names(ls.toN, join(p, "to")); err != nil {
			return nil, err
		}
		if len(ls.from) != len(ls.to) && len(ls.from) != 1 && len(ls.to) != 1 {
			return nil, d.invalid(item, p, "from names %d endpoints and to names %d: give equal counts (paired in order) or one on a side", len(ls.from), len(ls.to))
		}
		if ls.linkParams, err = d.linkParams(f, item, p); err != nil {
			return nil, err
		}
		out = append(out, ls)
	}
	return out, nil
}

func (d *yamlDecoder) fabric(n *yaml.Node, path string) (*fabricSpec, error) {
	f, err := d.fields(n, path, "kind", "ports", "radix", "bandwidth", "latency", "efficiency", "duplex")
	if err != nil {
		return nil, err
	}
	fs := &fabricSpec{path: path, self: n, portsN: f["ports"]}
	if fs.linkParams, err = d.linkParams(f, n, path); err != nil {
		return nil, err
	}
	fam := linkKinds[fs.kind].Family
	if fam != "infiniband" && fam != "ethernet" {
		return nil, d.invalid(f["kind"], join(path, "kind"), "a fabric is InfiniBand or Ethernet, not %s", fs.kind)
	}
	if fs.portsN == nil {
		return nil, d.invalid(n, join(path, "ports"), "missing: name the element of each node that attaches to the fabric, e.g. nic or nic[0-7]")
	}
	if fs.ports, err = d.names(fs.portsN, join(path, "ports")); err != nil {
		return nil, err
	}
	fs.radix = defaultRadix(fs.kind)
	if r, ok := f["radix"]; ok {
		if fs.radix, err = d.intValue(r, join(path, "radix"), 2, 1024); err != nil {
			return nil, err
		}
	}
	return fs, nil
}

// defaultRadix is the port count of the usual switch of each generation:
// Mellanox SB7800 (EDR, 36), QM8700 (HDR, 40), QM9700 (NDR, 64); a 64-port
// Ethernet top-of-rack switch.
func defaultRadix(k LinkKind) int {
	switch k {
	case IBEDR:
		return 36
	case IBHDR:
		return 40
	}
	return 64
}

// duplexOf is the link's Duplex: as given, else 1 (full duplex).
func (p linkParams) duplexOf() float64 {
	if p.hasDuplex {
		return p.duplex
	}
	return 1
}

// params resolves defaults into bandwidth, latency and efficiency.
func (p linkParams) resolve() (units.BytesPerSecond, time.Duration, float64) {
	def := linkKinds[p.kind]
	bw := def.Bandwidth * units.BytesPerSecond(p.count)
	if p.bandwidth > 0 {
		bw = p.bandwidth
	}
	lat := def.Latency
	if p.hasLatency {
		lat = p.latency
	}
	eff := def.Efficiency
	if p.efficiency > 0 {
		eff = p.efficiency
	}
	return bw, lat, eff
}
