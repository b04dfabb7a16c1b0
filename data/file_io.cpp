// FileReader over stdio, FileWriter over AtomicFile, both through libzstd's streaming API.
#include "data/file_io.h"

#include <glob.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>

#include "tensor/error.h"

namespace hla::data {

namespace {
constexpr size_t kInBufBytes = 1 << 20;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::string> glob_paths(const std::string& pattern) {
  glob_t g{};
  int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> matches(g.gl_pathv, g.gl_pathv + (rc == 0 ? g.gl_pathc : 0));
  globfree(&g);
  return matches;
}

FileReader::FileReader(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "rb");
  if (!file_) fail("cannot open ", path, ": ", std::strerror(errno));
  if (ends_with(path, ".zst")) {
    zstd_ = ZSTD_createDCtx();
    in_buf_.resize(kInBufBytes);
  }
}

FileReader::~FileReader() {
  if (zstd_) ZSTD_freeDCtx(zstd_);
  if (file_) std::fclose(file_);
}

bool FileReader::refill() {
  in_size_ = std::fread(in_buf_.data(), 1, in_buf_.size(), file_);
  in_pos_ = 0;
  if (std::ferror(file_)) fail("error reading ", path_, ": ", std::strerror(errno));
  file_bytes_read_ += in_size_;
  eof_ = in_size_ == 0;
  return !eof_;
}

size_t FileReader::read(char* dst, size_t n) {
  if (!zstd_) {
    size_t got = std::fread(dst, 1, n, file_);
    if (std::ferror(file_)) fail("error reading ", path_, ": ", std::strerror(errno));
    file_bytes_read_ += got;
    return got;
  }
  ZSTD_outBuffer out{dst, n, 0};
  while (out.pos < out.size) {
    if (in_pos_ == in_size_ && !eof_) refill();
    ZSTD_inBuffer in{in_buf_.data(), in_size_, in_pos_};
    size_t out_before = out.pos;
    size_t ret = ZSTD_decompressStream(zstd_, &out, &in);
    if (ZSTD_isError(ret)) fail(path_, ": zstd decompression failed: ", ZSTD_getErrorName(ret));
    in_pos_ = in.pos;
    bool stuck = eof_ && in_pos_ == in_size_ && out.pos == out_before;
    if (stuck) {
      if (frame_open_) fail(path_, ": truncated zstd stream (the last frame is incomplete)");
      break;
    }
    frame_open_ = ret != 0;  // 0: a frame just ended and all its output was flushed
  }
  return out.pos;
}

std::string FileReader::read_all() {
  std::string out;
  std::vector<char> buf(kInBufBytes);
  while (size_t got = read(buf.data(), buf.size())) out.append(buf.data(), got);
  return out;
}

FileWriter::FileWriter(const std::string& path, int zstd_level, int zstd_workers) : file_(path) {
  if (zstd_level > 0) {
    zstd_ = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(zstd_, ZSTD_c_compressionLevel, zstd_level);
    ZSTD_CCtx_setParameter(zstd_, ZSTD_c_checksumFlag, 1);
    // Fails harmlessly (stays single-threaded) when libzstd was built without threads.
    if (zstd_workers > 0) ZSTD_CCtx_setParameter(zstd_, ZSTD_c_nbWorkers, zstd_workers);
    out_buf_.resize(ZSTD_CStreamOutSize());
  }
}

FileWriter::~FileWriter() {
  if (zstd_) ZSTD_freeCCtx(zstd_);
}

void FileWriter::compress(const void* data, size_t n, bool end) {
  ZSTD_inBuffer in{data, n, 0};
  ZSTD_EndDirective mode = end ? ZSTD_e_end : ZSTD_e_continue;
  for (;;) {
    ZSTD_outBuffer out{out_buf_.data(), out_buf_.size(), 0};
    size_t remaining = ZSTD_compressStream2(zstd_, &out, &in, mode);
    if (ZSTD_isError(remaining)) fail(file_.path(), ": zstd compression failed: ", ZSTD_getErrorName(remaining));
    file_.write(out_buf_.data(), out.pos);
    bool done = end ? remaining == 0 : in.pos == in.size;
    if (done) break;
  }
}

void FileWriter::write(const void* data, size_t n) {
  HLA_CHECK(!closed_, "write to closed file ", file_.path());
  if (zstd_) {
    compress(data, n, false);
  } else {
    file_.write(data, n);
  }
}

void FileWriter::close() {
  HLA_CHECK(!closed_, "file ", file_.path(), " closed twice");
  if (zstd_) compress(nullptr, 0, true);
  closed_ = true;
  file_.commit();
}

}  // namespace hla::data
