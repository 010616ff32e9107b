// Files in directories other users may write (hvd/common/files.h).
#include "hvd/common/files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "hvd/common/error.h"
#include "hvd/common/secret.h"

namespace hvd {

namespace {

bool trusted_owner(uid_t uid) { return uid == ::geteuid() || uid == 0; }

std::string untrusted_owner(uid_t uid) {
  return fmt::format("owned by uid {}, not by this user (uid {}) or root", uid, ::geteuid());
}

bool writable_by_all_without_sticky(mode_t mode) { return (mode & S_IWOTH) != 0 && (mode & S_ISVTX) == 0; }

}  // namespace

std::string file_type_name(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

SharedDirectory open_shared_directory(const std::string& dir) {
  SharedDirectory out;
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return out;
    struct stat st;
    if (err == ENOTDIR && ::stat(dir.c_str(), &st) == 0) {
      throw InvalidArgument(
          fmt::format("the shared directory {} is {}, not a directory", dir, file_type_name(st.st_mode)));
    }
    throw IoError(fmt::format("cannot open the shared directory {}: {}", dir, std::strerror(err)));
  }
  out.fd.reset(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    throw IoError(fmt::format("cannot read the shared directory {}: {}", dir, std::strerror(errno)));
  }
  if (!trusted_owner(st.st_uid)) {
    throw InvalidArgument(fmt::format("the shared directory {} is {}: another user could replace its files", dir,
                                      untrusted_owner(st.st_uid)));
  }
  if (writable_by_all_without_sticky(st.st_mode)) {
    throw InvalidArgument(fmt::format(
        "the shared directory {} is writable by every user and has no sticky bit: another user could replace its "
        "files; chmod 1777 or 0755 it",
        dir));
  }
  out.world_writable = (st.st_mode & S_IWOTH) != 0;
  // Above it: a directory every user can write without the sticky bit lets
  // anyone rename this one away and put their own in its place.
  char* real = ::realpath(dir.c_str(), nullptr);
  if (real == nullptr) {
    throw IoError(fmt::format("cannot resolve the shared directory {}: {}", dir, std::strerror(errno)));
  }
  std::filesystem::path above(real);
  std::free(real);
  while (above.has_relative_path()) {
    above = above.parent_path();
    struct stat up;
    if (::stat(above.c_str(), &up) == 0 && writable_by_all_without_sticky(up.st_mode)) {
      throw InvalidArgument(fmt::format(
          "{} is writable by every user and has no sticky bit: another user could replace the shared directory {} "
          "in it; chmod 1777 or 0755 it",
          above.string(), dir));
    }
  }
  return out;
}

OwnedFile read_owned_file(int dirfd, const std::string& name, std::size_t max_bytes) {
  OwnedFile out;
  // O_NONBLOCK: a FIFO opens at once (and is refused below) instead of
  // waiting for a writer; O_NOFOLLOW: a link fails with ELOOP.
  const int fd = ::openat(dirfd, name.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    struct stat st;
    if (err == ENOENT) return out;
    out.status = OwnedFile::Status::Refused;
    if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode)) {
      out.why = file_type_name(st.st_mode) + ", not a regular file";
    } else {
      out.why = fmt::format("cannot be read: {}", std::strerror(err));
    }
    return out;
  }
  UniqueFd file(fd);
  struct stat st;
  out.status = OwnedFile::Status::Refused;
  if (::fstat(fd, &st) != 0) {
    out.why = fmt::format("cannot be read: {}", std::strerror(errno));
    return out;
  }
  if (!S_ISREG(st.st_mode)) {
    out.why = file_type_name(st.st_mode) + ", not a regular file";
    return out;
  }
  if (!trusted_owner(st.st_uid)) {
    out.why = untrusted_owner(st.st_uid) + ": not trusted";
    return out;
  }
  if (st.st_nlink != 1) {
    out.why = fmt::format("has {} hard links (hvdrun's own files have one): not trusted", st.st_nlink);
    return out;
  }
  if (static_cast<std::size_t>(st.st_size) > max_bytes) {
    out.why = fmt::format("larger than {} bytes", max_bytes);
    return out;
  }
  std::string text(max_bytes + 1, '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) {
      out.why = fmt::format("cannot be read: {}", std::strerror(errno));
      return out;
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  if (done > max_bytes) {  // it grew since fstat
    out.why = fmt::format("larger than {} bytes", max_bytes);
    return out;
  }
  text.resize(done);
  out.status = OwnedFile::Status::Ok;
  out.text = std::move(text);
  return out;
}

void write_file_atomically(int dirfd, const std::string& shown, const std::string& name, const std::string& text,
                           mode_t mode) {
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    // 128 random bits: no name another user could plant in advance.
    tmp = fmt::format(".{}.{}.tmp", name, random_secret(16));
    fd = ::openat(dirfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, mode);
    if (fd < 0 && (errno != EEXIST || attempt == 3)) {
      throw IoError(fmt::format("cannot write {}/{}: {}", shown, tmp, std::strerror(errno)));
    }
  }
  UniqueFd file(fd);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      file.reset();
      ::unlinkat(dirfd, tmp.c_str(), 0);
      throw IoError(fmt::format("cannot write {}/{}: {}", shown, tmp, std::strerror(err)));
    }
    done += static_cast<std::size_t>(n);
  }
  file.reset();
  if (::renameat(dirfd, tmp.c_str(), dirfd, name.c_str()) != 0) {
    const int err = errno;
    ::unlinkat(dirfd, tmp.c_str(), 0);
    throw IoError(fmt::format("cannot rename {}/{} to {}: {}", shown, tmp, name, std::strerror(err)));
  }
}

int open_output_file(const std::string& path, std::string& why) {
  // Look before opening: opening a device for writing can have effects of
  // its own, and a FIFO without O_NONBLOCK waits for a reader.
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    why = fmt::format("is {}, not a regular file", file_type_name(st.st_mode));
    return -1;
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {  // replaced meanwhile
      why = fmt::format("is {}, not a regular file", file_type_name(st.st_mode));
    } else {
      why = fmt::format("cannot be created: {}", std::strerror(err));
    }
    return -1;
  }
  UniqueFd file(fd);
  if (::fstat(fd, &st) != 0) {
    why = fmt::format("cannot be created: {}", std::strerror(errno));
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    why = fmt::format("is {}, not a regular file", file_type_name(st.st_mode));
    return -1;
  }
  if (!trusted_owner(st.st_uid)) {
    why = fmt::format("is {}: not written", untrusted_owner(st.st_uid));
    return -1;
  }
  if (st.st_nlink != 1) {
    why = fmt::format("has {} hard links (another of its names may be someone else's file): not written", st.st_nlink);
    return -1;
  }
  if (::ftruncate(fd, 0) != 0) {
    why = fmt::format("cannot be truncated: {}", std::strerror(errno));
    return -1;
  }
  set_nonblocking(fd, false);
  return file.release();
}

}  // namespace hvd
