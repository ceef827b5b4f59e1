// Command mnistdir prints the directory holding the MNIST files
// (data.LocateMNIST), for scripts that copy them to a machine without
// network access.
package main

import (
	"fmt"
	"os"

	"github.com/flowkit/flowkit/data"
)

func main() {
	dir, err := data.LocateMNIST("")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mnistdir:", err)
		os.Exit(1)
	}
	fmt.Println(dir)
}
