// Streaming file reading and writing with transparent zstd: a name ending in ".zst" is
// decompressed while read and compressed while written. Writers stream into an AtomicFile
// ("<path>.tmp-<pid>", every write checked, fsync, rename on close()), so a crash or a full disk
// never leaves a half-written file under the final name and never loses the previous file.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "tensor/atomic_file.h"

struct ZSTD_DCtx_s;
struct ZSTD_CCtx_s;

namespace hla::data {

bool ends_with(const std::string& s, const std::string& suffix);
// The paths matching a shell glob, sorted; empty when none match.
std::vector<std::string> glob_paths(const std::string& pattern);

class FileReader {
 public:
  explicit FileReader(const std::string& path);  // zstd when path ends in .zst
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  // Reads up to n decompressed bytes into dst; returns the count, 0 only at the end.
  size_t read(char* dst, size_t n);
  std::string read_all();
  uint64_t file_bytes_read() const { return file_bytes_read_; }  // on disk, for progress
  const std::string& path() const { return path_; }

 private:
  bool refill();

  std::string path_;
  FILE* file_ = nullptr;
  ZSTD_DCtx_s* zstd_ = nullptr;
  std::vector<char> in_buf_;
  size_t in_pos_ = 0, in_size_ = 0;
  bool eof_ = false, frame_open_ = false;
  uint64_t file_bytes_read_ = 0;
};

class FileWriter {
 public:
  // zstd_level > 0 compresses (zstd_workers > 0 uses that many compression threads when the
  // library supports it); 0 writes plain bytes.
  FileWriter(const std::string& path, int zstd_level, int zstd_workers = 0);
  ~FileWriter();  // without close(): removes the temporary file
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void write(const void* data, size_t n);
  void close();  // ends the zstd frame, then commits: fsync, rename over <path>, fsync the directory

 private:
  void compress(const void* data, size_t n, bool end);

  AtomicFile file_;
  bool closed_ = false;
  ZSTD_CCtx_s* zstd_ = nullptr;
  std::vector<char> out_buf_;
};

}  // namespace hla::data
