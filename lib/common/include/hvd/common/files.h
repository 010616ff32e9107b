#pragma once
/// Files in directories other users may write (docs/design.md, "Security
/// rules"). hvdrun runs as root in containers, and a shared directory (the
/// OCI job's registry, a timeline in a synchronized folder) may be writable
/// by every user. The rules, each kept by one function here:
///  * a file hvdrun creates there gets a name nobody can predict, created
///    O_EXCL|O_NOFOLLOW (a name planted first fails, a link is never
///    followed), and is renamed into place: write_file_atomically;
///  * a file hvdrun reads from there must be a regular file with one link,
///    owned by this user or root, of bounded size, opened
///    O_NONBLOCK|O_NOFOLLOW and then checked with fstat (a FIFO never
///    blocks, a link to /dev/zero is never read): read_owned_file;
///  * the directory must not be writable by every user without the sticky
///    bit (nor any directory above it): open_shared_directory;
///  * a file hvdrun writes in place (the timeline) is opened without
///    blocking and must be a regular file: open_output_file.
#include <sys/types.h>

#include <cstddef>
#include <string>

#include "hvd/common/io.h"

namespace hvd {

/// What open_shared_directory found.
struct SharedDirectory {
  UniqueFd fd;  ///< the directory (O_DIRECTORY); invalid when it does not exist
  /// Writable by every user, with the sticky bit (as /tmp): allowed, since
  /// only an entry's owner can replace it, but worth one warning.
  bool world_writable = false;
};

/// Opens `dir` (symbolic links in its path are followed) and checks that it
/// may hold files hvdrun trusts: throws InvalidArgument, one line naming the
/// directory, when it is not a directory, is owned by another user (not this
/// one, not root), or when it or a directory above it is writable by every
/// user without the sticky bit (anyone could rename it or its files away and
/// put their own in place). A directory that does not exist is an invalid fd
/// (no error); another failure to open it is an IoError.
SharedDirectory open_shared_directory(const std::string& dir);

/// One file read from a directory others may write.
struct OwnedFile {
  enum class Status { Ok, Absent, Refused };
  Status status = Status::Absent;
  std::string text;  ///< Ok: the whole content
  /// Refused: why, without the file's name ("a FIFO, not a regular file",
  /// "owned by uid 1001, not by this user (uid 0) or root: not trusted",
  /// "larger than 65536 bytes", "has 2 hard links (...)").
  std::string why;
};

/// Reads `name` in the directory `dirfd` by the rules above: never blocks,
/// never follows a link, never reads more than `max_bytes` + 1 bytes.
OwnedFile read_owned_file(int dirfd, const std::string& name, std::size_t max_bytes);

/// Writes `name` in `dirfd` whole or not at all: `text` goes to a temporary
/// name with 128 random bits, created O_EXCL|O_NOFOLLOW with `mode`, then
/// renamed over `name` (which replaces a link there, never follows it).
/// `shown` is the directory as messages name it. Throws IoError.
void write_file_atomically(int dirfd, const std::string& shown, const std::string& name, const std::string& text,
                           mode_t mode = 0644);

/// Opens `path` for writing without blocking: created (0644) when absent;
/// else it must be a regular file with one link, owned by this user or root
/// (a link, a FIFO, a device or a socket is refused, never opened for
/// writing); then truncated. The descriptor (O_CLOEXEC, blocking again), or
/// -1 with `why` ("is a FIFO, not a regular file", "No such file or
/// directory", ...; to follow the quoted path).
int open_output_file(const std::string& path, std::string& why);

/// "a FIFO", "a directory", "a symbolic link", ... for a stat mode.
std::string file_type_name(mode_t mode);

}  // namespace hvd
