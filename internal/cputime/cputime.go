// Package cputime reads the CPU time this process has used, for
// benchmarks on machines shared with other jobs, where the wall time also
// counts the waits for a core.
package cputime
