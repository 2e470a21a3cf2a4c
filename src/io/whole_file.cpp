#include "io/whole_file.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace dp::io {

namespace {

std::string sys_error() { return std::strerror(errno); }

std::string dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// A descriptor closed on every path out.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void write_all(int fd, const std::vector<Piece>& pieces, const std::string& path, const std::string& into) {
  for (const Piece& p : pieces) {
    const char* at = static_cast<const char*>(p.data);
    size_t left = p.size;
    while (left > 0) {
      const ssize_t n = ::write(fd, at, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail(DP_ERR_IO, path + ": cannot write" + (into.empty() ? "" : " '" + into + "'") + ": " + sys_error());
      at += n;
      left -= static_cast<size_t>(n);
    }
  }
}

// The temporary file beside `dest`: a new name, created exclusively (never an
// existing file or a link someone placed there), removed unless kept.
struct TempFile {
  std::string path;
  Fd file;
  bool keep = false;
  explicit TempFile(const std::string& dest, const std::string& shown) {
    static std::atomic<unsigned> counter{0};
    for (int attempt = 0;; ++attempt) {
      path = dest + ".tmp-" + std::to_string(static_cast<long>(getpid())) + "-" + std::to_string(counter++);
      file.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);  // the umask applies
      if (file.fd >= 0) return;
      if (errno != EEXIST || attempt == 100) {
        keep = true;  // nothing was created
        fail(DP_ERR_IO, shown + ": cannot create the temporary file '" + path + "': " + sys_error());
      }
    }
  }
  ~TempFile() {
    if (!keep) std::remove(path.c_str());
  }
};

}  // namespace

WriteTarget write_target(const std::string& path) {
  WriteTarget t;
  t.path = path;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return t;  // not there yet: created
  if (!S_ISLNK(st.st_mode)) {
    t.in_place = !S_ISREG(st.st_mode);
    return t;
  }
  // A link: the kernel follows it (fs.protected_symlinks applies), and names
  // what it reached.
  Fd reached;
  reached.fd = ::open(path.c_str(), O_PATH | O_CLOEXEC);
  if (reached.fd < 0) {
    if (errno == ENOENT)
      fail(DP_ERR_IO, path + ": a symbolic link to a file that does not exist; dp writes through a link only to an "
                             "existing file (give the file's own path)");
    fail(DP_ERR_IO, path + ": cannot follow the symbolic link: " + sys_error());
  }
  if (::fstat(reached.fd, &st) != 0) fail(DP_ERR_IO, path + ": cannot follow the symbolic link: " + sys_error());
  if (!S_ISREG(st.st_mode)) {
    t.in_place = true;  // opened by `path` again: /dev/stdout to a pipe has no name to reach it by
    return t;
  }
  char buf[PATH_MAX];
  const std::string proc = "/proc/self/fd/" + std::to_string(reached.fd);
  const ssize_t n = ::readlink(proc.c_str(), buf, sizeof buf);
  if (n <= 0 || static_cast<size_t>(n) >= sizeof buf || buf[0] != '/')
    fail(DP_ERR_IO, path + ": cannot tell which file the symbolic link leads to (" + proc + ")");
  t.path.assign(buf, static_cast<size_t>(n));
  return t;
}

void write_whole_file(const std::string& path, const std::vector<Piece>& pieces) {
  const WriteTarget target = write_target(path);
  const std::string& dest = target.path;
  const std::string shown = dest == path ? path : path + " (a link to " + dest + ")";
  if (target.in_place) {
    // Non-blocking first: a FIFO without a reader fails (ENXIO) instead of
    // waiting for one; then blocking writes.
    Fd f;
    f.fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (f.fd < 0)
      fail(DP_ERR_IO, shown + ": cannot open: " + (errno == ENXIO ? std::string("a FIFO with no reader") : sys_error()));
    const int flags = ::fcntl(f.fd, F_GETFL);
    if (flags < 0 || ::fcntl(f.fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
      fail(DP_ERR_IO, shown + ": cannot open: " + sys_error());
    write_all(f.fd, pieces, shown, "");
    const int fd = f.fd;
    f.fd = -1;
    if (::close(fd) != 0) fail(DP_ERR_IO, shown + ": cannot write: " + sys_error());
    return;
  }
  struct stat old {};
  const bool replacing = ::stat(dest.c_str(), &old) == 0;
  TempFile tmp(dest, shown);
  write_all(tmp.file.fd, pieces, shown, tmp.path);
  if (replacing && ::fchmod(tmp.file.fd, old.st_mode & 07777) != 0)  // the replaced file's permissions
    fail(DP_ERR_IO, shown + ": cannot give '" + tmp.path + "' the file's permissions: " + sys_error());
  if (::fsync(tmp.file.fd) != 0) fail(DP_ERR_IO, shown + ": cannot fsync '" + tmp.path + "': " + sys_error());
  const int fd = tmp.file.fd;
  tmp.file.fd = -1;
  if (::close(fd) != 0) fail(DP_ERR_IO, shown + ": cannot close '" + tmp.path + "': " + sys_error());
  if (std::rename(tmp.path.c_str(), dest.c_str()) != 0)
    fail(DP_ERR_IO, shown + ": cannot rename '" + tmp.path + "' over it: " + sys_error());
  tmp.keep = true;
  // Make the rename itself durable. Some file systems cannot fsync a
  // directory (EINVAL): the file is in place, so that is not an error.
  const std::string dir = dir_of(dest);
  Fd d;
  d.fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d.fd < 0) fail(DP_ERR_IO, shown + ": written, but cannot open its directory '" + dir + "' to fsync it: " + sys_error());
  if (::fsync(d.fd) != 0 && errno != EINVAL)
    fail(DP_ERR_IO, shown + ": written, but cannot fsync its directory '" + dir + "': " + sys_error());
}

}  // namespace dp::io
