// Files written whole or not at all (checkpoints, weights, ONNX models): the
// bytes go to a temporary file beside the target, which is flushed, fsynced
// and renamed over it, and the directory is fsynced, so a crash leaves the old
// file or the new one. Two cases are written otherwise, as `cp` and
// torch.save treat them:
//   - a symbolic link is followed to the file it names: that file is
//     replaced, the link stays (renaming over the link replaced the link);
//   - an existing file that is not a regular one (/dev/null, a FIFO) is
//     written in place: renaming over it replaced the device with a file.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace dp::io {

struct Piece {
  const void* data;
  size_t size;
};

// Where a write to `path` lands: `path` with its symbolic links followed,
// and whether that is an existing file other than a regular one.
struct WriteTarget {
  std::string path;
  bool in_place = false;
};
WriteTarget write_target(const std::string& path);

// Writes the pieces, in order, as the whole content of `path` (see above).
// DP_ERR_IO naming `path` and the cause; on failure `path` is unchanged
// (written in place: as far as it was written).
void write_whole_file(const std::string& path, const std::vector<Piece>& pieces);

}  // namespace dp::io
