/*
 * The table of a kernel source's entries, for the emulator: the generated
 * file that includes a .cu lists its kernels with EMU_ENTRY (their names
 * come from the .entry lines of the source's PTX), and the table registers
 * itself with emu.cc when the library loads.
 */
#pragma once

#include <stddef.h>
#include <utility>

namespace emu {

/* Entry is a kernel: call(params) runs it as the calling fiber's thread,
 * with params as cuLaunchKernel's kernelParams (one pointer to each
 * argument's value). */
struct Entry {
	const char *name;
	void (*call)(void **params);
	int nparams;
	const unsigned char *sizes; /* bytes of each parameter */
};

struct Registrar {
	Registrar(const Entry *entries, int n);
};

template <class... A, size_t... I> inline void invoke(void (*f)(A...), void **p, std::index_sequence<I...>) {
	f(*static_cast<A *>(p[I])...);
}
template <class... A> inline void call(void (*f)(A...), void **p) { invoke(f, p, std::index_sequence_for<A...>{}); }
template <class... A> constexpr int arity(void (*)(A...)) { return sizeof...(A); }
template <class... A> inline const unsigned char *sizes(void (*)(A...)) {
	static const unsigned char s[] = {(unsigned char)sizeof(A)..., 0};
	return s;
}

} // namespace emu

#define EMU_ENTRY(name) {#name, [](void **p) { emu::call(name, p); }, emu::arity(name), emu::sizes(name)}
