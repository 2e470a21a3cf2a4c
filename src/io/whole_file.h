// Files written whole or not at all (checkpoints, weights, ONNX models): the
// bytes go to a new temporary file beside the target (created exclusively,
// with the replaced file's permissions), which is flushed, fsynced and renamed
// over it, and the directory is fsynced, so a crash leaves the old file or the
// new one. Two cases are written otherwise:
//   - a symbolic link to an existing file: the kernel follows it (so Linux's
//     fs.protected_symlinks guards a link planted in /tmp) and that file is
//     replaced, the link stays; a link to nothing is refused (as `cp` does);
//   - an existing file that is not a regular one (/dev/null, a FIFO,
//     /dev/stdout as a pipe) is written in place: renaming over it replaced
//     the device with a file. A FIFO needs a reader already: without one the
//     write fails at once (ENXIO), it does not wait.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace dp::io {

struct Piece {
  const void* data;
  size_t size;
};

// Where a write to `path` lands and how: `path` itself, or the file an
// existing symbolic link leads to; in_place for an existing file that is not
// a regular one. DP_ERR_IO for a link that leads nowhere or may not be followed.
struct WriteTarget {
  std::string path;
  bool in_place = false;
};
WriteTarget write_target(const std::string& path);

// Writes the pieces, in order, as the whole content of `path` (see above).
// DP_ERR_IO naming `path` and the cause; on failure a regular file is
// unchanged (one written in place: as far as it was written).
void write_whole_file(const std::string& path, const std::vector<Piece>& pieces);

}  // namespace dp::io
