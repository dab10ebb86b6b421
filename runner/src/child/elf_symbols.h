// The function symbols a shared object defines (ELF .symtab and .dynsym), for target-DSL
// attribution: the host stub of a __global__ kernel carries the kernel's (mangled) name, so a
// kernel whose CUPTI name is among the candidate library's symbols was compiled from the
// candidate's own source; any other (cuBLAS, cuDNN, ...) comes from a vendor library.
#pragma once

#include <filesystem>
#include <optional>
#include <set>
#include <string>

#include "atrex/common/error.h"

namespace atrex::runner {

// Names of the defined STT_FUNC symbols of the ELF64 file `path`. Errors: kIo (unreadable),
// kInvalidInput (not an ELF64 file).
Result<std::set<std::string>> defined_function_symbols(const std::filesystem::path& path);
// Only those a dlopen/dlsym can find: .dynsym, global or weak, not hidden (the candidate entry
// point of a library built with -fvisibility=hidden). Same errors.
Result<std::set<std::string>> exported_function_symbols(const std::filesystem::path& path);

// The __global__ kernels a CUDA shared object defines, by their device (mangled) names as
// CUPTI reports them. nvcc gives each kernel a host stub `__device_stub__<mangled name without
// the leading _>`; at -O3 a template kernel's stub is inlined and only its static locals
// (`..._device_stub_...E8__handle`) keep the name, so every defined symbol (functions and
// objects, .symtab included) is searched for it. An extern "C" kernel's stub carries a C++
// mangling while its device name is the plain one: the plain name is used when the library
// defines a function of that name. Same errors as defined_function_symbols.
Result<std::set<std::string>> defined_kernels(const std::filesystem::path& path);
// The kernel named by one symbol containing `__device_stub__`
// ("_Z31__device_stub__Z11dead_kernelPfPf"
// -> "_Z11dead_kernelPf"), else nullopt.
std::optional<std::string> kernel_of_stub_symbol(const std::string& symbol);

// A comparable form of a (mangled) kernel or symbol name: demangled, with nvcc's per-module
// names of anonymous namespaces (`_GLOBAL__N__<hash>`) written as `(anonymous namespace)`, so
// a device kernel's name and its host stub's agree.
std::string kernel_key(const std::string& mangled);

}  // namespace atrex::runner
