// The bytes of a trace file for the JSON SAX parser: zlib's gzread (which decompresses gzip and
// passes a plain file through unchanged) behind a std::streambuf, with a repair filter that makes
// the insides of JSON strings valid (see trace.h).
#pragma once

#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <streambuf>
#include <string>
#include <vector>

#include "atrex/common/error.h"

namespace atrex::ingest::detail {

// Rewrites, inside JSON strings only: an invalid escape "\q" into "\\q" (the backslash kept as
// a character), a "\u" escape without 4 hex digits likewise, a surrogate "\uD8xx" into
// "\uFFFD", a raw control byte into "\u00XX", and each byte of an ill-formed UTF-8 sequence
// (RFC 3629 table 3-7) into "\uFFFD". Everything outside strings passes unchanged. Each rewrite
// counts one repair. Stateful across calls: feed the stream in any chunking.
class StringRepair {
 public:
  void feed(const char* data, size_t n, std::string& out);
  // At the end of input: flushes a pending partial sequence as is (the parser then reports the
  // cut).
  void finish(std::string& out);
  uint64_t repairs() const { return repairs_; }

 private:
  void in_string(unsigned char c, std::string& out);
  void flush_escape(std::string& out);
  void flush_utf8_invalid(std::string& out);
  bool in_string_ = false;
  std::string escape_;  // pending "\..." sequence
  std::string utf8_;    // pending multibyte sequence
  int utf8_need_ = 0;
  uint64_t repairs_ = 0;
};

class TraceByteSource : public std::streambuf {
 public:
  // kNotFound / kIo naming the file.
  static Result<std::unique_ptr<TraceByteSource>> open(const std::filesystem::path& path);
  ~TraceByteSource() override;
  TraceByteSource(const TraceByteSource&) = delete;
  TraceByteSource& operator=(const TraceByteSource&) = delete;

  uint64_t bytes_out() const { return bytes_out_; }
  uint64_t repairs() const { return repair_.repairs(); }
  // zlib's message when the stream ended with an error (a cut gzip member), else "".
  const std::string& read_error() const { return read_error_; }

 protected:
  int_type underflow() override;

 private:
  explicit TraceByteSource(gzFile f) : file_(f) {}
  gzFile file_;
  std::vector<char> raw_ = std::vector<char>(1 << 18);
  std::string buffer_;
  uint64_t bytes_out_ = 0;
  bool eof_ = false;
  std::string read_error_;
  StringRepair repair_;
};

}  // namespace atrex::ingest::detail
