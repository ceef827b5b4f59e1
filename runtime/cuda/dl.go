//go:build !windows

package cuda

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/ebitengine/purego"
)

// errLoader is why this build cannot load the CUDA libraries: nil here.
var errLoader error

// dlopen opens a library on one OS thread: dlerror's message is per
// thread, and between purego's dlopen and dlerror calls (separate cgo calls
// when cgo is on, as under -race) the goroutine could otherwise move and
// read another thread's empty message.
func dlopen(path string) (uintptr, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil && strings.TrimSpace(err.Error()) == "" {
		err = fmt.Errorf("%s: cannot open shared object", path)
	}
	return h, err
}

func dlsym(handle uintptr, name string) (uintptr, error) { return purego.Dlsym(handle, name) }

func dlclose(handle uintptr) { _ = purego.Dlclose(handle) }
