// The function symbols a shared object defines (ELF .symtab and .dynsym), for target-DSL
// attribution: the host stub of a __global__ kernel carries the kernel's (mangled) name, so a
// kernel whose CUPTI name is among the candidate library's symbols was compiled from the
// candidate's own source; any other (cuBLAS, cuDNN, ...) comes from a vendor library.
#pragma once

#include <filesystem>
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

// A comparable form of a (mangled) kernel or symbol name: demangled, with nvcc's per-module
// names of anonymous namespaces (`_GLOBAL__N__<hash>`) written as `(anonymous namespace)`, so
// a device kernel's name and its host stub's agree.
std::string kernel_key(const std::string& mangled);

}  // namespace atrex::runner
