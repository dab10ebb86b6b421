#include "elf_symbols.h"

#include <cxxabi.h>
#include <elf.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <regex>
#include <vector>

#include <fmt/format.h>

namespace atrex::runner {

namespace {

Result<std::set<std::string>> function_symbols(const std::filesystem::path& path, bool exported_only) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(fmt::format("{}: cannot read", path.string()));
  const std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto bad = [&](const char* why) { return invalid_input(fmt::format("{}: not a readable ELF64 file ({})", path.string(), why)); };
  if (data.size() < sizeof(Elf64_Ehdr) || std::memcmp(data.data(), ELFMAG, SELFMAG) != 0) return bad("no ELF header");
  Elf64_Ehdr eh;
  std::memcpy(&eh, data.data(), sizeof eh);
  if (eh.e_ident[EI_CLASS] != ELFCLASS64) return bad("not 64-bit");
  if (eh.e_shoff == 0 || eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff + eh.e_shnum * sizeof(Elf64_Shdr) > data.size()) {
    return bad("section table out of range");
  }
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  std::memcpy(sections.data(), data.data() + eh.e_shoff, eh.e_shnum * sizeof(Elf64_Shdr));
  std::set<std::string> names;
  for (const auto& sh : sections) {
    if (sh.sh_type != SHT_DYNSYM && (exported_only || sh.sh_type != SHT_SYMTAB)) continue;
    if (sh.sh_link >= sections.size()) return bad("symbol table without strings");
    const Elf64_Shdr& strtab = sections[sh.sh_link];
    if (sh.sh_offset + sh.sh_size > data.size() || strtab.sh_offset + strtab.sh_size > data.size()) return bad("symbols out of range");
    for (size_t off = 0; off + sizeof(Elf64_Sym) <= sh.sh_size; off += sizeof(Elf64_Sym)) {
      Elf64_Sym sym;
      std::memcpy(&sym, data.data() + sh.sh_offset + off, sizeof sym);
      if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF || sym.st_name >= strtab.sh_size) continue;
      if (exported_only && (ELF64_ST_BIND(sym.st_info) == STB_LOCAL || ELF64_ST_VISIBILITY(sym.st_other) == STV_HIDDEN ||
                            ELF64_ST_VISIBILITY(sym.st_other) == STV_INTERNAL)) {
        continue;
      }
      const char* name = data.data() + strtab.sh_offset + sym.st_name;
      names.emplace(name, strnlen(name, strtab.sh_size - sym.st_name));
    }
  }
  return names;
}

}  // namespace

Result<std::set<std::string>> defined_function_symbols(const std::filesystem::path& path) {
  return function_symbols(path, false);
}

Result<std::set<std::string>> exported_function_symbols(const std::filesystem::path& path) {
  return function_symbols(path, true);
}

std::string kernel_key(const std::string& mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string name = status == 0 && d ? d : mangled;
  std::free(d);
  static const std::regex anon("_GLOBAL__N__[0-9A-Za-z_]+");
  return std::regex_replace(name, anon, "(anonymous namespace)");
}

}  // namespace atrex::runner
