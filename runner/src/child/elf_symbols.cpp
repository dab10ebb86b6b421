#include "elf_symbols.h"

#include <cxxabi.h>
#include <elf.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <regex>
#include <vector>

#include <fmt/format.h>

namespace atrex::runner {

namespace {

struct Symbol {
  std::string name;
  unsigned char type = STT_NOTYPE, bind = STB_LOCAL, visibility = STV_DEFAULT;
  bool dynamic = false;  // from .dynsym
};

// Every defined symbol of .symtab and .dynsym.
Result<std::vector<Symbol>> defined_symbols(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(fmt::format("{}: cannot read", path.string()));
  const std::vector<char> data((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
  auto bad = [&](const char* why) {
    return invalid_input(fmt::format("{}: not a readable ELF64 file ({})", path.string(), why));
  };
  if (data.size() < sizeof(Elf64_Ehdr) || std::memcmp(data.data(), ELFMAG, SELFMAG) != 0)
    return bad("no ELF header");
  Elf64_Ehdr eh;
  std::memcpy(&eh, data.data(), sizeof eh);
  if (eh.e_ident[EI_CLASS] != ELFCLASS64) return bad("not 64-bit");
  if (eh.e_shoff == 0 || eh.e_shentsize != sizeof(Elf64_Shdr) ||
      eh.e_shoff + eh.e_shnum * sizeof(Elf64_Shdr) > data.size()) {
    return bad("section table out of range");
  }
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  std::memcpy(sections.data(), data.data() + eh.e_shoff, eh.e_shnum * sizeof(Elf64_Shdr));
  std::vector<Symbol> out;
  for (const auto& sh : sections) {
    if (sh.sh_type != SHT_DYNSYM && sh.sh_type != SHT_SYMTAB) continue;
    if (sh.sh_link >= sections.size()) return bad("symbol table without strings");
    const Elf64_Shdr& strtab = sections[sh.sh_link];
    if (sh.sh_offset + sh.sh_size > data.size() || strtab.sh_offset + strtab.sh_size > data.size())
      return bad("symbols out of range");
    for (size_t off = 0; off + sizeof(Elf64_Sym) <= sh.sh_size; off += sizeof(Elf64_Sym)) {
      Elf64_Sym sym;
      std::memcpy(&sym, data.data() + sh.sh_offset + off, sizeof sym);
      if (sym.st_shndx == SHN_UNDEF || sym.st_name >= strtab.sh_size) continue;
      const char* name = data.data() + strtab.sh_offset + sym.st_name;
      out.push_back(Symbol{std::string(name, strnlen(name, strtab.sh_size - sym.st_name)),
                           ELF64_ST_TYPE(sym.st_info), ELF64_ST_BIND(sym.st_info),
                           ELF64_ST_VISIBILITY(sym.st_other), sh.sh_type == SHT_DYNSYM});
    }
  }
  return out;
}

Result<std::set<std::string>> function_symbols(const std::filesystem::path& path,
                                               bool exported_only) {
  ATREX_ASSIGN_OR_RETURN(auto symbols, defined_symbols(path));
  std::set<std::string> names;
  for (const auto& s : symbols) {
    if (s.type != STT_FUNC) continue;
    if (exported_only && (!s.dynamic || s.bind == STB_LOCAL || s.visibility == STV_HIDDEN ||
                          s.visibility == STV_INTERNAL)) {
      continue;
    }
    names.insert(s.name);
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

std::optional<std::string> kernel_of_stub_symbol(const std::string& symbol) {
  static constexpr std::string_view kStub = "__device_stub__";
  const size_t pos = symbol.find(kStub);
  if (pos == std::string::npos) return std::nullopt;
  size_t digits = pos;
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(symbol[digits - 1]))) --digits;
  if (digits == pos || pos - digits > 6) return std::nullopt;
  const size_t length = std::stoul(symbol.substr(digits, pos - digits));
  if (length <= kStub.size() || pos + length > symbol.size()) return std::nullopt;
  return "_" + symbol.substr(pos + kStub.size(), length - kStub.size());
}

Result<std::set<std::string>> defined_kernels(const std::filesystem::path& path) {
  ATREX_ASSIGN_OR_RETURN(auto symbols, defined_symbols(path));
  std::set<std::string> functions, kernels;
  for (const auto& s : symbols) {
    if (s.type == STT_FUNC) functions.insert(s.name);
  }
  for (const auto& s : symbols) {
    auto mangled = kernel_of_stub_symbol(s.name);
    if (!mangled) continue;
    // An extern "C" kernel's stub carries the C++ mangling; its device name (and host wrapper) is
    // the plain name.
    if (!functions.count(*mangled)) {
      const std::string key = kernel_key(*mangled);
      const std::string plain = key.substr(0, key.find('('));
      if (functions.count(plain)) mangled = plain;
    }
    kernels.insert(*mangled);
  }
  return kernels;
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
