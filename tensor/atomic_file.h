// Writing a file so that a failure loses nothing: the bytes go to "<path>.tmp-<pid>", every
// write is checked, the file is fsynced and closed, renamed over <path>, and the directory is
// fsynced. A full disk, a write error or a crash before commit() leaves the previous <path> as
// it was and no partial file under that name. Every error names the file and the errno text.
//
//   AtomicFile f(path);
//   f.write(bytes, n);  // as often as needed
//   f.commit();         // without it, the destructor removes the temporary file
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "tensor/error.h"

namespace hla {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp-" + std::to_string(getpid())) {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail_errno("cannot create ");
  }
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) std::remove(tmp_.c_str());
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t done = ::write(fd_, p, n);
      if (done < 0 && errno == EINTR) continue;
      if (done <= 0) fail_errno("write failed on ");
      p += done;
      n -= static_cast<size_t>(done);
    }
  }
  void write(const std::string& s) { write(s.data(), s.size()); }

  // fsync, close, rename over the final name, fsync the directory.
  void commit() {
    if (::fsync(fd_) != 0) fail_errno("fsync failed on ");
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail_errno("close failed on ");
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0) fail_errno("cannot rename into place: ");
    committed_ = true;
    sync_directory();
  }

  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail_errno(const char* what) const {
    const int e = errno;
    fail(path_, ": ", what, tmp_, " (", std::strerror(e), "); ", path_, " is unchanged");
  }
  void sync_directory() const {
    const size_t slash = path_.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path_.substr(0, slash));
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;  // the rename is done; a directory we cannot open cannot be synced
    ::fsync(fd);
    ::close(fd);
  }

  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// The whole file in one call.
inline void write_file_atomic(const std::string& path, const std::string& bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

}  // namespace hla
