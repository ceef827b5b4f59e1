//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// ownGroup starts c in a process group of its own, so that the interrupt
// a terminal sends its foreground group (Ctrl-C) reaches this process
// alone: a worker it started goes on until this process stops the run
// (graceful training finishes its steps on every rank) and ends it.
func ownGroup(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
