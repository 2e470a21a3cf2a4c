#include "io/whole_file.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

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

// The temporary file: removed unless kept.
struct TempFile {
  std::string path;
  FILE* f = nullptr;
  bool keep = false;
  ~TempFile() {
    if (f) std::fclose(f);
    if (!keep) std::remove(path.c_str());
  }
};

void put_all(FILE* f, const std::vector<Piece>& pieces, const std::string& path, const std::string& into) {
  for (const Piece& p : pieces)
    if (p.size && std::fwrite(p.data, 1, p.size, f) != p.size)
      fail(DP_ERR_IO, path + ": cannot write" + (into.empty() ? "" : " '" + into + "'") + ": " + sys_error());
  if (std::fflush(f) != 0)
    fail(DP_ERR_IO, path + ": cannot write" + (into.empty() ? "" : " '" + into + "'") + ": " + sys_error());
}

}  // namespace

WriteTarget write_target(const std::string& path) {
  WriteTarget t;
  t.path = path;
  for (int links = 0;; ++links) {
    struct stat st {};
    if (::lstat(t.path.c_str(), &st) != 0) return t;  // not there yet: created
    if (!S_ISLNK(st.st_mode)) {
      t.in_place = !S_ISREG(st.st_mode);
      return t;
    }
    if (links == 40) fail(DP_ERR_IO, path + ": too many levels of symbolic links");
    char buf[PATH_MAX];
    const ssize_t n = ::readlink(t.path.c_str(), buf, sizeof buf);
    if (n < 0 || static_cast<size_t>(n) >= sizeof buf)
      fail(DP_ERR_IO, path + ": cannot read the symbolic link '" + t.path + "': " + (n < 0 ? sys_error() : "too long"));
    const std::string to(buf, static_cast<size_t>(n));
    t.path = to.front() == '/' ? to : dir_of(t.path) + "/" + to;
  }
}

void write_whole_file(const std::string& path, const std::vector<Piece>& pieces) {
  const WriteTarget target = write_target(path);
  const std::string& dest = target.path;
  const std::string via = dest == path ? "" : " (a link to " + dest + ")";
  if (target.in_place) {
    FILE* f = std::fopen(dest.c_str(), "wb");
    if (!f) fail(DP_ERR_IO, path + via + ": cannot open: " + sys_error());
    try {
      put_all(f, pieces, path + via, "");
    } catch (...) {
      std::fclose(f);
      throw;
    }
    if (std::fclose(f) != 0) fail(DP_ERR_IO, path + via + ": cannot write: " + sys_error());
    return;
  }
  TempFile tmp;
  tmp.path = dest + ".tmp-" + std::to_string(static_cast<long>(getpid()));
  tmp.f = std::fopen(tmp.path.c_str(), "wb");
  if (!tmp.f) {
    tmp.keep = true;  // nothing was created
    fail(DP_ERR_IO, path + via + ": cannot create the temporary file '" + tmp.path + "': " + sys_error());
  }
  put_all(tmp.f, pieces, path + via, tmp.path);
  if (fsync(fileno(tmp.f)) != 0) fail(DP_ERR_IO, path + via + ": cannot fsync '" + tmp.path + "': " + sys_error());
  FILE* f = tmp.f;
  tmp.f = nullptr;
  if (std::fclose(f) != 0) fail(DP_ERR_IO, path + via + ": cannot close '" + tmp.path + "': " + sys_error());
  if (std::rename(tmp.path.c_str(), dest.c_str()) != 0)
    fail(DP_ERR_IO, path + via + ": cannot rename '" + tmp.path + "' over it: " + sys_error());
  tmp.keep = true;
  // Make the rename itself durable. Some file systems cannot fsync a
  // directory (EINVAL): the file is in place, so that is not an error.
  const std::string dir = dir_of(dest);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail(DP_ERR_IO, path + via + ": written, but cannot open its directory '" + dir + "' to fsync it: " + sys_error());
  const int rc = fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) {
    errno = err;
    fail(DP_ERR_IO, path + via + ": written, but cannot fsync its directory '" + dir + "': " + sys_error());
  }
}

}  // namespace dp::io
