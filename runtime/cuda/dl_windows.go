package cuda

import "errors"

// errLoader is why CUDA is not available on Windows: the loader knows
// the Linux (and WSL) layout of the driver and cuBLAS only.
var errLoader = errors.New("windows: flowkit loads libcuda and cuBLAS as Linux installs them; under WSL the Linux build finds the driver in /usr/lib/wsl/lib")

func dlopen(string) (uintptr, error)         { return 0, errLoader }
func dlsym(uintptr, string) (uintptr, error) { return 0, errLoader }
func dlclose(uintptr)                        {}
