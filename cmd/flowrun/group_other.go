//go:build !unix

package main

import "os/exec"

// ownGroup leaves c in this process's group: on Windows a console's
// Ctrl-C reaches the workers too, which then stop at once (see
// group_unix.go).
func ownGroup(*exec.Cmd) {}
