package main

import (
	"fmt"
	"os"
	goruntime "runtime"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/flowkit/flowkit/runtime"
	cu "github.com/flowkit/flowkit/runtime/cuda"
)

func newDevicesCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "devices",
		Short: "List this machine's devices: CPU cores and CUDA GPUs with their catalog types",
		Long: `List the devices flowrun can execute plans on: the CPU's cores, and every CUDA
GPU the driver reports, with the catalog type a plan for it must name
(compile plans with a cluster of that type, e.g. --cluster h200-host for an
H200). Where there is no GPU, or no driver or cuBLAS, it says why.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDevices(asJSON) },
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the devices as one JSON object")
	return cmd
}

type gpuRow struct {
	Ordinal  int    `json:"ordinal"`
	Name     string `json:"name"`
	Catalog  string `json:"catalog_type"`
	Compute  string `json:"compute_capability"`
	SMs      int    `json:"sms"`
	MemoryGB string `json:"memory"`
	Driver   int    `json:"driver"`
}

func runDevices(asJSON bool) error {
	out := map[string]any{"cpu_cores": goruntime.NumCPU()}
	gpus := []gpuRow{}
	var why string
	n, err := cu.DeviceCount()
	if err != nil {
		why = err.Error()
	}
	for i := range n {
		c, err := cu.Open(i)
		if err != nil {
			return fmt.Errorf("cuda:%d: %w", i, err)
		}
		info := c.Info()
		gpus = append(gpus, gpuRow{Ordinal: i, Name: info.Name, Catalog: runtime.CatalogType(info),
			Compute: fmt.Sprintf("%d.%d", info.Major, info.Minor), SMs: info.SMs, MemoryGB: info.TotalMem.String(), Driver: info.Driver})
		if err := c.Close(); err != nil {
			return err
		}
	}
	out["gpus"] = gpus
	if why != "" {
		out["gpus_unavailable"] = why
	} else {
		out["libraries"] = cu.Libraries()
	}
	if asJSON {
		return printJSON(out)
	}
	fmt.Printf("cpu: %d cores\n", goruntime.NumCPU())
	if why != "" {
		fmt.Printf("gpus: none (%s)\n", why)
		return nil
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "gpu\tname\tcatalog type\tsm\tSMs\tmemory\tdriver")
	for _, g := range gpus {
		catalog := g.Catalog
		if catalog == "" {
			catalog = "(not in the catalog)"
		}
		fmt.Fprintf(tw, "cuda:%d\t%s\t%s\t%s\t%d\t%s\t%d\n", g.Ordinal, g.Name, catalog, g.Compute, g.SMs, g.MemoryGB, g.Driver)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Printf("libraries: %v\n", cu.Libraries())
	return nil
}
