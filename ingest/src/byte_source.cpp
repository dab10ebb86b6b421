#include "byte_source.h"

#include <cerrno>
#include <cstring>
#include <memory>

#include <fmt/format.h>

namespace atrex::ingest::detail {
namespace {

bool is_hex(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// Bytes a UTF-8 sequence with lead byte `c` has after it; -1 for a byte no sequence starts with.
int utf8_continuations(unsigned char c) {
  if (c < 0x80) return 0;
  if (c >= 0xC2 && c <= 0xDF) return 1;
  if (c >= 0xE0 && c <= 0xEF) return 2;
  if (c >= 0xF0 && c <= 0xF4) return 3;
  return -1;
}

// RFC 3629 table: the range the second byte of a sequence must be in, for its lead byte.
bool second_byte_ok(unsigned char lead, unsigned char c) {
  if (lead == 0xE0) return c >= 0xA0 && c <= 0xBF;
  if (lead == 0xED) return c >= 0x80 && c <= 0x9F;
  if (lead == 0xF0) return c >= 0x90 && c <= 0xBF;
  if (lead == 0xF4) return c >= 0x80 && c <= 0x8F;
  return c >= 0x80 && c <= 0xBF;
}

constexpr const char* kReplacement = "\\ufffd";

}  // namespace

void StringRepair::flush_escape(std::string& out) {
  // An invalid escape: the backslash becomes a literal one, the rest is ordinary text.
  out += "\\\\";
  ++repairs_;
  std::string rest = escape_.substr(1);
  escape_.clear();
  for (unsigned char c : rest) in_string(c, out);
}

void StringRepair::flush_utf8_invalid(std::string& out) {
  for (size_t i = 0; i < utf8_.size(); ++i) {
    out += kReplacement;
    ++repairs_;
  }
  utf8_.clear();
  utf8_need_ = 0;
}

void StringRepair::in_string(unsigned char c, std::string& out) {
  if (!escape_.empty()) {
    if (escape_.size() == 1) {
      if (std::strchr("\"\\/bfnrt", c) != nullptr && c != 0) {
        out += '\\';
        out += static_cast<char>(c);
        escape_.clear();
        return;
      }
      if (c == 'u') {
        escape_ += 'u';
        return;
      }
      flush_escape(out);
      in_string(c, out);
      return;
    }
    if (!is_hex(c)) {
      flush_escape(out);
      in_string(c, out);
      return;
    }
    escape_ += static_cast<char>(c);
    if (escape_.size() == 6) {
      const unsigned long code = std::stoul(escape_.substr(2), nullptr, 16);
      if (code >= 0xD800 && code <= 0xDFFF) {  // surrogates: pairs are not reassembled
        out += kReplacement;
        ++repairs_;
      } else {
        out += escape_;
      }
      escape_.clear();
    }
    return;
  }
  if (utf8_need_ > 0) {
    const bool ok = utf8_.size() == 1 ? second_byte_ok(static_cast<unsigned char>(utf8_[0]), c)
                                      : (c >= 0x80 && c <= 0xBF);
    if (!ok) {
      flush_utf8_invalid(out);
      in_string(c, out);
      return;
    }
    utf8_ += static_cast<char>(c);
    if (--utf8_need_ == 0) {
      out += utf8_;
      utf8_.clear();
    }
    return;
  }
  if (c == '"') {
    in_string_ = false;
    out += '"';
    return;
  }
  if (c == '\\') {
    escape_ = "\\";
    return;
  }
  if (c < 0x20) {
    out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    ++repairs_;
    return;
  }
  const int need = utf8_continuations(c);
  if (need < 0) {
    out += kReplacement;
    ++repairs_;
    return;
  }
  if (need == 0) {
    out += static_cast<char>(c);
    return;
  }
  utf8_ = std::string(1, static_cast<char>(c));
  utf8_need_ = need;
}

void StringRepair::feed(const char* data, size_t n, std::string& out) {
  out.reserve(out.size() + n + 16);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(data[i]);
    if (in_string_) {
      in_string(c, out);
    } else {
      if (c == '"') in_string_ = true;
      out += static_cast<char>(c);
    }
  }
}

void StringRepair::finish(std::string& out) {
  out += escape_;
  out += utf8_;
  escape_.clear();
  utf8_.clear();
  utf8_need_ = 0;
}

Result<std::unique_ptr<TraceByteSource>> TraceByteSource::open(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return not_found(fmt::format("{}: no such trace file", path.string()));
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    return io_error(fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)));
  }
  gzbuffer(f, 1 << 18);
  return std::unique_ptr<TraceByteSource>(new TraceByteSource(f));
}

TraceByteSource::~TraceByteSource() { gzclose(file_); }

TraceByteSource::int_type TraceByteSource::underflow() {
  if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
  buffer_.clear();
  while (buffer_.empty() && !eof_) {
    const int n = gzread(file_, raw_.data(), static_cast<unsigned>(raw_.size()));
    if (n > 0) {
      repair_.feed(raw_.data(), static_cast<size_t>(n), buffer_);
      continue;
    }
    if (n < 0) {
      int errnum = 0;
      const char* msg = gzerror(file_, &errnum);
      read_error_ = msg != nullptr ? msg : "read error";
    }
    eof_ = true;
    repair_.finish(buffer_);
  }
  if (buffer_.empty()) return traits_type::eof();
  bytes_out_ += buffer_.size();
  setg(buffer_.data(), buffer_.data(), buffer_.data() + buffer_.size());
  return traits_type::to_int_type(*gptr());
}

}  // namespace atrex::ingest::detail
