package cputime

import (
	"time"

	"golang.org/x/sys/windows"
)

// Process returns the CPU time the process has used, user and system.
func Process() (time.Duration, error) {
	var creation, exit, kernel, user windows.Filetime
	if err := windows.GetProcessTimes(windows.CurrentProcess(), &creation, &exit, &kernel, &user); err != nil {
		return 0, err
	}
	// Filetimes count 100 ns; Nanoseconds would read them as dates.
	ticks := func(f windows.Filetime) int64 { return int64(f.HighDateTime)<<32 | int64(f.LowDateTime) }
	return time.Duration((ticks(kernel) + ticks(user)) * 100), nil
}
