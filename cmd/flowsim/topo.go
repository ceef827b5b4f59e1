package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowkit/flowkit/internal/cliargs"
	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
)

func newTopoCmd() *cobra.Command {
	topo := &cobra.Command{
		Use:   "topo",
		Short: "Inspect cluster topologies",
		Args:  cobra.ArbitraryArgs,
		// Without a subcommand: help; with an argument that is not
		// one, an error rather than help and success.
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return fmt.Errorf("unknown command %q for \"flowsim topo\" (to show a cluster: flowsim topo show %s)", args[0], args[0])
		},
	}
	var asJSON bool
	var png string
	show := &cobra.Command{
		Use:   "show CLUSTER",
		Short: "Show a cluster's devices, links, bisection bandwidth and peak rate",
		Long: `Show a cluster: its devices, switches and links, its bisection bandwidth and
its total peak FLOP rate, optionally as JSON and as a drawing.

CLUSTER is a preset name (` + joinPresets() + `),
a preset sized to K times its nodes (NAMExK, e.g. dgx-a100x4), or a path to
a cluster YAML file (see topology/README.md for the schema).`,
		Args: cliargs.One("a cluster: a preset (" + joinPresets() + "), NAMExK, or a YAML file"),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Before the cluster is built and its bisection computed
			// (seconds, for thousands of devices).
			if err := cliargs.Output("--png", png); err != nil {
				return err
			}
			if png != "" {
				if err := checkPlotPath("--png", png); err != nil {
					return err
				}
			}
			c, err := topology.Resolve(args[0])
			if err != nil {
				return err
			}
			s := summarize(c)
			if png != "" {
				if err := drawCluster(c, png); err != nil {
					return err
				}
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(s)
			}
			writeSummary(cmd.OutOrStdout(), s)
			if png != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "drawing: %s\n", png)
			}
			return nil
		},
	}
	show.Flags().BoolVar(&asJSON, "json", false, "print the summary as JSON instead of text")
	show.Flags().StringVar(&png, "png", "", "also draw the cluster graph into this PNG `FILE`")
	topo.AddCommand(show)
	return topo
}

func joinPresets() string {
	s := ""
	for i, p := range topology.PresetNames() {
		if i > 0 {
			s += ", "
		}
		s += p
	}
	return s
}

type deviceRow struct {
	Name    string  `json:"name"`
	Type    string  `json:"type"`
	Node    string  `json:"node"`
	Memory  int64   `json:"memory_bytes"`
	PeakF32 float64 `json:"peak_f32_flops"`
	PeakF16 float64 `json:"peak_f16_flops"`
	Cores   int     `json:"cores,omitempty"`
}

type switchRow struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	Node string `json:"node,omitempty"`
}

type linkRow struct {
	A          string  `json:"a"`
	B          string  `json:"b"`
	Kind       string  `json:"kind"`
	Count      int     `json:"count"`
	Bandwidth  float64 `json:"bandwidth_bytes_per_s"`
	LatencyNS  int64   `json:"latency_ns"`
	Efficiency float64 `json:"efficiency"`
	Duplex     float64 `json:"duplex"` // 1 full duplex, 0 half (topology.Link.Duplex)
}

type summary struct {
	Name        string      `json:"name"`
	Description string      `json:"description,omitempty"`
	Nodes       int         `json:"nodes"`
	Devices     []deviceRow `json:"devices"`
	Switches    []switchRow `json:"switches"`
	Links       []linkRow   `json:"links"`
	Bisection   struct {
		Bandwidth float64  `json:"bandwidth_bytes_per_s"`
		Method    string   `json:"method"`
		A         []string `json:"a,omitempty"`
	} `json:"bisection"`
	Peak map[string]float64 `json:"peak_flops"` // by dtype
}

func summarize(c *topology.Cluster) summary {
	s := summary{Name: c.Name, Description: c.Description, Nodes: len(c.Nodes), Peak: map[string]float64{}}
	for _, d := range c.Devices {
		f16, _ := d.Spec.Peak.PeakFor("f16")
		row := deviceRow{Name: d.Name, Type: d.Type, Node: c.Nodes[d.Node].Name, Memory: int64(d.Spec.Memory),
			PeakF32: float64(d.Spec.Peak.F32), PeakF16: float64(f16)}
		if d.Spec.Class == topology.CPU {
			row.Cores = d.Spec.Cores
		}
		s.Devices = append(s.Devices, row)
	}
	for _, sw := range c.Switches {
		row := switchRow{Name: sw.Name, Kind: string(sw.Kind)}
		if sw.Node >= 0 {
			row.Node = c.Nodes[sw.Node].Name
		}
		s.Switches = append(s.Switches, row)
	}
	for _, l := range c.Links {
		s.Links = append(s.Links, linkRow{A: c.VertexName(l.A), B: c.VertexName(l.B), Kind: string(l.Kind), Count: l.Count,
			Bandwidth: float64(l.Bandwidth), LatencyNS: l.Latency.Nanoseconds(), Efficiency: l.Efficiency, Duplex: l.Duplex})
	}
	b := c.Bisection()
	s.Bisection.Bandwidth, s.Bisection.Method = float64(b.Bandwidth), b.Method
	for _, id := range b.A {
		s.Bisection.A = append(s.Bisection.A, c.Devices[id].Name)
	}
	for _, dt := range topology.DTypes {
		s.Peak[dt] = float64(c.PeakFLOPs(dt))
	}
	return s
}

func writeSummary(w io.Writer, s summary) {
	fmt.Fprintf(w, "cluster %s: %d nodes, %d devices, %d switches, %d links\n", s.Name, s.Nodes, len(s.Devices), len(s.Switches), len(s.Links))
	if s.Description != "" {
		fmt.Fprintf(w, "  %s\n", s.Description)
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "\ndevices\tTYPE\tNODE\tMEMORY\tPEAK F32\tPEAK F16\n")
	for _, d := range s.Devices {
		typ := d.Type
		if d.Cores > 0 {
			typ = fmt.Sprintf("%s ×%d cores", d.Type, d.Cores)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%v\t%v\t%v\n", d.Name, typ, d.Node, units.Bytes(d.Memory),
			units.FLOPsPerSecond(d.PeakF32), units.FLOPsPerSecond(d.PeakF16))
	}
	tw.Flush()
	tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "\nswitches\tKIND\tNODE\n")
	for _, sw := range s.Switches {
		node := sw.Node
		if node == "" {
			node = "(fabric)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", sw.Name, sw.Kind, node)
	}
	tw.Flush()
	tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "\nlinks\tTO\tKIND\tBANDWIDTH\tLATENCY\tEFF\n")
	for _, l := range s.Links {
		kind := l.Kind
		if l.Count > 1 {
			kind = fmt.Sprintf("%s ×%d", l.Kind, l.Count)
		}
		if l.Duplex < 1 {
			kind = fmt.Sprintf("%s, duplex %.2f", kind, l.Duplex)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%v\t%v\t%.2f\n", l.A, l.B, kind, units.BytesPerSecond(l.Bandwidth), durationNS(l.LatencyNS), l.Efficiency)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nbisection bandwidth: %v per direction (%s)\n", units.BytesPerSecond(s.Bisection.Bandwidth), s.Bisection.Method)
	fmt.Fprintf(w, "peak:")
	for i, dt := range topology.DTypes {
		if i > 0 {
			fmt.Fprint(w, ",")
		}
		fmt.Fprintf(w, " %s %v", dt, units.FLOPsPerSecond(s.Peak[dt]))
	}
	fmt.Fprintln(w)
}

func durationNS(ns int64) string { return time.Duration(ns).String() }
