package main

import (
	"fmt"
	"image/color"
	"math"
	"strings"

	stdfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
)

// Layout, in plot units. Each node is a box: its devices in rows of up to
// four at the top, then one row per kind of switch (NVSwitch, PCIe
// switches, host bridges, NICs). The fabric's switches sit below the
// nodes, spines below leaves.
const (
	boxW, boxH   = 1.5, 0.8  // a device
	swW, swH     = 1.3, 0.55 // a switch
	colStep      = 1.9
	rowStep      = 1.45
	nodePad      = 0.45
	nodeGap      = 0.8
	devicesInRow = 4
	devicesGap   = 0.45
)

var switchRows = []topology.SwitchKind{topology.NVSwitch, topology.PCIeSwitch, topology.Host, topology.NIC}

type layout struct {
	pos          []vg.Point // per vertex, in plot units (X, Y as floats)
	nodeBox      [][4]float64
	center       [][2]float64 // per node: centre of its devices
	width        float64      // of a node box
	rowBottom    []float64    // per row of nodes: the bottom of its boxes
	xmin, xmax   float64
	ymin, ymax   float64
	kinds        []topology.LinkKind
	c            *topology.Cluster
	maxBW, minBW float64
	typeLabels   bool
	nodesPerRow  int
}

func (l *layout) at(v topology.Vertex) (float64, float64) {
	return float64(l.pos[v].X), float64(l.pos[v].Y)
}

func newLayout(c *topology.Cluster) *layout {
	l := &layout{c: c, pos: make([]vg.Point, c.NumVertices()), minBW: math.Inf(1)}
	types := map[string]bool{}
	for _, d := range c.Devices {
		types[d.Type] = true
	}
	l.typeLabels = len(types) > 1
	// Width of a node: enough columns for its devices and widest switch row.
	cols := 1
	for _, n := range c.Nodes {
		cols = max(cols, min(devicesInRow, len(n.Devices)))
		count := map[topology.SwitchKind]int{}
		for _, s := range n.Switches {
			count[c.Switches[s].Kind]++
		}
		for _, k := range switchRows {
			cols = max(cols, (count[k]+1)/2)
		}
	}
	width := float64(cols)*colStep + 2*nodePad
	l.nodesPerRow = len(c.Nodes)
	if len(c.Nodes) > 3 {
		l.nodesPerRow = int(math.Ceil(math.Sqrt(float64(len(c.Nodes)))))
	}
	var nodeHeights []float64
	for _, n := range c.Nodes {
		rows := (len(n.Devices) + devicesInRow - 1) / devicesInRow
		count := map[topology.SwitchKind]int{}
		for _, s := range n.Switches {
			count[c.Switches[s].Kind]++
		}
		for _, k := range switchRows {
			if count[k] > 0 {
				rows++
			}
		}
		nodeHeights = append(nodeHeights, float64(rows)*rowStep+devicesGap+2*nodePad-0.4)
	}
	rowH := 0.0
	for _, h := range nodeHeights {
		rowH = max(rowH, h)
	}
	for i, n := range c.Nodes {
		col, row := i%l.nodesPerRow, i/l.nodesPerRow
		x0 := float64(col) * (width + nodeGap)
		ytop := -float64(row) * (rowH + nodeGap)
		l.nodeBox = append(l.nodeBox, [4]float64{x0, ytop - rowH, x0 + width, ytop})
		cx := x0 + width/2
		y := ytop - nodePad - boxH/2
		for r := 0; r*devicesInRow < len(n.Devices); r++ {
			ids := n.Devices[r*devicesInRow : min(len(n.Devices), (r+1)*devicesInRow)]
			for j, id := range ids {
				x := cx + (float64(j)-float64(len(ids)-1)/2)*colStep
				l.pos[id] = vg.Point{X: vg.Length(x), Y: vg.Length(y)}
			}
			y -= rowStep
		}
		var sx, sy float64
		for _, id := range n.Devices {
			sx += float64(l.pos[id].X)
			sy += float64(l.pos[id].Y)
		}
		l.center = append(l.center, [2]float64{sx / float64(len(n.Devices)), sy / float64(len(n.Devices))})
		y -= devicesGap // room for the arcs below the last row of devices
		for _, k := range switchRows {
			var row []int
			for _, s := range n.Switches {
				if c.Switches[s].Kind == k {
					row = append(row, s)
				}
			}
			if len(row) == 0 {
				continue
			}
			step := min(colStep, (width-2*nodePad)/float64(len(row)))
			for j, s := range row {
				x := cx + (float64(j)-float64(len(row)-1)/2)*step
				l.pos[c.SwitchVertex(s)] = vg.Point{X: vg.Length(x), Y: vg.Length(y + 0.1)}
			}
			y -= rowStep
		}
	}
	rowsOfNodes := (len(c.Nodes) + l.nodesPerRow - 1) / l.nodesPerRow
	bottom := -float64(rowsOfNodes)*(rowH+nodeGap) + nodeGap
	totalW := float64(min(l.nodesPerRow, len(c.Nodes)))*(width+nodeGap) - nodeGap
	var leaves, spines, others []int
	for i, s := range c.Switches {
		if s.Node >= 0 {
			continue
		}
		switch {
		case strings.Contains(s.Name, "spine"):
			spines = append(spines, i)
		case strings.Contains(s.Name, "leaf"):
			leaves = append(leaves, i)
		default:
			others = append(others, i)
		}
	}
	y := bottom - 1.3
	for _, row := range [][]int{append(others, leaves...), spines} {
		if len(row) == 0 {
			continue
		}
		step := min(3.0, totalW/float64(len(row)))
		for j, s := range row {
			x := totalW/2 + (float64(j)-float64(len(row)-1)/2)*step
			l.pos[c.SwitchVertex(s)] = vg.Point{X: vg.Length(x), Y: vg.Length(y)}
		}
		y -= rowStep
	}
	l.width, l.rowBottom = width, make([]float64, rowsOfNodes)
	for i, b := range l.nodeBox {
		l.rowBottom[i/l.nodesPerRow] = b[1]
	}
	l.xmin, l.xmax = -0.3, totalW+0.3
	l.ymin, l.ymax = y+rowStep-0.7, 0.9
	seen := map[topology.LinkKind]bool{}
	for _, lk := range c.Links {
		if !seen[lk.Kind] {
			seen[lk.Kind] = true
			l.kinds = append(l.kinds, lk.Kind)
		}
		l.maxBW = max(l.maxBW, float64(lk.Bandwidth))
		l.minBW = min(l.minBW, float64(lk.Bandwidth))
	}
	return l
}

// path is the polyline of a link. A fabric link from a node above the
// last row of nodes leaves its node downwards and runs along the alleys
// between nodes, so that it crosses no other node.
func (l *layout) path(lk topology.Link) [][2]float64 {
	x0, y0 := l.at(lk.A)
	x1, y1 := l.at(lk.B)
	na, nb := l.c.VertexNode(lk.A), l.c.VertexNode(lk.B)
	if na >= 0 && nb >= 0 || na < 0 && nb < 0 {
		return [][2]float64{{x0, y0}, {x1, y1}}
	}
	if na < 0 {
		x0, y0, x1, y1, na = x1, y1, x0, y0, nb
	}
	row, col := na/l.nodesPerRow, na%l.nodesPerRow
	if row == len(l.rowBottom)-1 {
		return [][2]float64{{x0, y0}, {x1, y1}}
	}
	box := l.nodeBox[na]
	ya := box[1] - nodeGap/2 + 0.08*float64(col)
	xa := box[2] + nodeGap/2 - 0.12 - 0.06*float64(row)
	if col == l.nodesPerRow-1 && col > 0 {
		xa = box[0] - nodeGap/2 + 0.12 + 0.06*float64(row)
	}
	yb := l.rowBottom[len(l.rowBottom)-1] - nodeGap/2 + 0.08*float64(col)
	return [][2]float64{{x0, y0}, {x0, ya}, {xa, ya}, {xa, yb}, {x1, y1}}
}

// Colors by link family, darker for newer generations.
func linkColor(k topology.LinkKind) color.Color {
	switch k {
	case topology.NVLink1, topology.NVLink2:
		return color.RGBA{0x2e, 0x9e, 0x3a, 0xff}
	case topology.NVLink3, topology.NVLink4:
		return color.RGBA{0x11, 0x6b, 0x1e, 0xff}
	case topology.PCIe3, topology.PCIe4, topology.PCIe5:
		return color.RGBA{0xe0, 0x8a, 0x1e, 0xff}
	case topology.IBEDR, topology.IBHDR, topology.IBNDR:
		return color.RGBA{0x1f, 0x5f, 0xc8, 0xff}
	case topology.Ethernet:
		return color.RGBA{0x8e, 0x3f, 0xb0, 0xff}
	case topology.MemBus:
		return color.RGBA{0x8b, 0x5a, 0x2b, 0xff}
	}
	return color.RGBA{0x70, 0x70, 0x70, 0xff}
}

// linkWidth grows with the log of bandwidth: 12.5 GB/s ≈ 1.5 pt, 300 GB/s ≈ 5 pt.
func linkWidth(bw units.BytesPerSecond) vg.Length {
	w := 1.5 + 1.1*math.Log2(float64(bw)/12.5e9)
	return vg.Points(math.Max(0.8, math.Min(6, w)))
}

func elementColor(c *topology.Cluster, v topology.Vertex) color.Color {
	if id, ok := c.DeviceAt(v); ok {
		if c.Devices[id].Spec.Class == topology.CPU {
			return color.RGBA{0xbf, 0xdb, 0xf7, 0xff}
		}
		return color.RGBA{0xc8, 0xeb, 0xc0, 0xff}
	}
	switch c.Switches[int(v)-len(c.Devices)].Kind {
	case topology.NVSwitch:
		return color.RGBA{0x9f, 0xd6, 0x94, 0xff}
	case topology.PCIeSwitch, topology.Host:
		return color.RGBA{0xfb, 0xdc, 0xb0, 0xff}
	case topology.NIC:
		return color.RGBA{0xc4, 0xd6, 0xf5, 0xff}
	}
	return color.RGBA{0x9d, 0xb9, 0xe8, 0xff}
}

// clusterPlotter draws a layout; it is a plot.Plotter and plot.DataRanger.
type clusterPlotter struct{ l *layout }

func (p clusterPlotter) DataRange() (xmin, xmax, ymin, ymax float64) {
	return p.l.xmin, p.l.xmax, p.l.ymin, p.l.ymax
}

func (p clusterPlotter) Plot(dc draw.Canvas, plt *plot.Plot) {
	l, c := p.l, p.l.c
	tx, ty := plt.Transforms(&dc)
	pt := func(x, y float64) vg.Point { return vg.Point{X: tx(x), Y: ty(y)} }
	rect := func(x0, y0, x1, y1 float64) []vg.Point {
		return []vg.Point{pt(x0, y0), pt(x1, y0), pt(x1, y1), pt(x0, y1)}
	}
	label := func(size float64, bold bool) draw.TextStyle {
		sty := plt.Title.TextStyle
		sty.Font = font.From(plot.DefaultFont, vg.Points(size))
		if bold {
			sty.Font.Weight = stdfont.WeightBold
		}
		sty.XAlign, sty.YAlign = draw.XCenter, draw.YCenter
		sty.Color = color.Black
		return sty
	}
	for i, b := range l.nodeBox {
		dc.FillPolygon(color.RGBA{0xf3, 0xf3, 0xf3, 0xff}, rect(b[0], b[1], b[2], b[3]))
		dc.StrokeLines(draw.LineStyle{Color: color.Gray{0x99}, Width: vg.Points(1)}, append(rect(b[0], b[1], b[2], b[3]), pt(b[0], b[1])))
		sty := label(10, true)
		sty.XAlign, sty.YAlign = draw.XLeft, draw.YBottom
		dc.FillText(sty, pt(b[0]+0.05, b[3]+0.05), c.Nodes[i].Name)
	}
	for _, lk := range c.Links {
		x0, y0 := l.at(lk.A)
		x1, y1 := l.at(lk.B)
		sty := draw.LineStyle{Color: linkColor(lk.Kind), Width: linkWidth(lk.Bandwidth)}
		_, aDev := c.DeviceAt(lk.A)
		_, bDev := c.DeviceAt(lk.B)
		if !(aDev && bDev) {
			var pts []vg.Point
			for _, q := range l.path(lk) {
				pts = append(pts, pt(q[0], q[1]))
			}
			dc.StrokeLines(sty, pts)
			continue
		}
		// Device-to-device links bow outwards so links along one row stay
		// apart: the longer the link, the higher its arc.
		dx, dy := x1-x0, y1-y0
		d := math.Hypot(dx, dy)
		bow := 0.28 * d
		if dy != 0 && dx == 0 {
			bow = 0.12 * d
		}
		// Bow away from the centre of the node's devices.
		cx, cy := l.center[c.VertexNode(lk.A)][0], l.center[c.VertexNode(lk.A)][1]
		mx, my := (x0+x1)/2-dy/d*bow, (y0+y1)/2+dx/d*bow
		ox, oy := (x0+x1)/2+dy/d*bow, (y0+y1)/2-dx/d*bow
		if math.Hypot(ox-cx, oy-cy) > math.Hypot(mx-cx, my-cy)+1e-9 {
			mx, my = ox, oy
		}
		var pts []vg.Point
		for i := 0; i <= 24; i++ {
			t := float64(i) / 24
			x := (1-t)*(1-t)*x0 + 2*(1-t)*t*mx + t*t*x1
			y := (1-t)*(1-t)*y0 + 2*(1-t)*t*my + t*t*y1
			pts = append(pts, pt(x, y))
		}
		dc.StrokeLines(sty, pts)
	}
	border := draw.LineStyle{Color: color.Gray{0x55}, Width: vg.Points(0.8)}
	for v := range c.NumVertices() {
		x, y := l.at(topology.Vertex(v))
		w, h := swW, swH
		if _, ok := c.DeviceAt(topology.Vertex(v)); ok {
			w, h = boxW, boxH
		}
		r := rect(x-w/2, y-h/2, x+w/2, y+h/2)
		dc.FillPolygon(elementColor(c, topology.Vertex(v)), r)
		dc.StrokeLines(border, append(r, r[0]))
		name := c.VertexName(topology.Vertex(v))
		if i := strings.LastIndexByte(name, '/'); i >= 0 && c.VertexNode(topology.Vertex(v)) >= 0 {
			name = name[i+1:]
		}
		if id, ok := c.DeviceAt(topology.Vertex(v)); ok {
			dc.FillText(label(9, true), pt(x, y+0.14), name)
			dc.FillText(label(6.5, false), pt(x, y-0.18), shortType(c.Devices[id]))
			continue
		}
		if c.VertexNode(topology.Vertex(v)) < 0 {
			name = strings.TrimPrefix(name, "fabric/")
			dc.FillText(label(8, true), pt(x, y+0.08), name)
			dc.FillText(label(6, false), pt(x, y-0.14), string(c.Switches[v-len(c.Devices)].Kind))
			continue
		}
		dc.FillText(label(7.5, false), pt(x, y), name)
	}
}

func shortType(d topology.Device) string {
	t := d.Type
	t = strings.Replace(t, "-SXM2", "", 1)
	t = strings.Replace(t, "-SXM4", "", 1)
	if d.Spec.Class == topology.CPU {
		return fmt.Sprintf("%s ×%d", t, d.Spec.Cores)
	}
	return t
}

type lineThumb struct{ sty draw.LineStyle }

func (t lineThumb) Thumbnail(c *draw.Canvas) {
	y := (c.Min.Y + c.Max.Y) / 2
	c.StrokeLine2(t.sty, c.Min.X, y, c.Max.X, y)
}

// drawCluster draws c into a PNG file.
func drawCluster(c *topology.Cluster, path string) error {
	l := newLayout(c)
	p := plot.New()
	p.Title.Text = c.Name
	if c.Description != "" {
		p.Title.Text += "\n" + wrap(c.Description, 140)
	}
	p.Title.TextStyle.Font.Size = vg.Points(14)
	p.HideAxes()
	p.Add(clusterPlotter{l})
	best := map[topology.LinkKind]units.BytesPerSecond{}
	for _, lk := range c.Links {
		best[lk.Kind] = max(best[lk.Kind], lk.Bandwidth)
	}
	for _, k := range l.kinds {
		d, _ := k.Defaults()
		p.Legend.Add(fmt.Sprintf("%s (%s, up to %v)", k, d.Family, best[k]), lineThumb{draw.LineStyle{Color: linkColor(k), Width: linkWidth(best[k])}})
	}
	p.Legend.Top = false
	p.Legend.Left = false
	p.Legend.TextStyle.Font.Size = vg.Points(11)
	p.Legend.ThumbnailWidth = vg.Points(28)
	w := vg.Length(l.xmax-l.xmin) * vg.Inch * 0.72
	h := vg.Length(l.ymax-l.ymin)*vg.Inch*0.72 + 1.4*vg.Inch
	w = max(w, 8*vg.Inch)
	return savePlot(p, w, h, path)
}

func wrap(s string, width int) string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		if len(line)+len(word)+1 > width && line != "" {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return strings.Join(append(lines, line), "\n")
}
