#include "hvd/store/file_store.h"

#include "hvd/common/error.h"
#include "hvd/common/io.h"
#include "store_detail.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

namespace hvd::store {

namespace {

std::string errno_text() { return std::strerror(errno); }

void mkdir_p(const std::string& dir) {
  std::string partial;
  for (std::size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      if (!partial.empty() && ::mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
        throw IoError(fmt::format("FileStore: cannot create directory '{}': {}", partial, errno_text()));
      }
    }
    if (i < dir.size()) partial.push_back(dir[i]);
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw IoError(fmt::format("FileStore: '{}' is not a directory", dir));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    throw IoError(fmt::format("FileStore: directory '{}' is not writable: {}", dir, errno_text()));
  }
}

std::string encode_name(const std::string& key) {
  if (key.empty()) throw InvalidArgument("FileStore: keys must not be empty");
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : key) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  // NAME_MAX is 255 on Linux; leave room for the temp-file decoration.
  if (out.size() > 200) {
    throw InvalidArgument(fmt::format("FileStore: key '{}...' is too long for a file name ({} bytes encoded, max 200)",
                                      key.substr(0, 40), out.size()));
  }
  return out;
}

/// Reads the whole file; nullopt when it does not exist.
std::optional<Bytes> read_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return std::nullopt;
    throw IoError(fmt::format("FileStore: cannot open '{}': {}", path, errno_text()));
  }
  Bytes out;
  uint8_t buf[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n > 0) {
      out.insert(out.end(), buf, buf + n);
    } else if (n == 0) {
      return out;
    } else if (errno != EINTR) {
      throw IoError(fmt::format("FileStore: cannot read '{}': {}", path, errno_text()));
    }
  }
}

/// Holds flock(LOCK_EX) on the store's lock file for its lifetime.
class DirLock {
 public:
  explicit DirLock(const std::string& path) : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)) {
    if (!fd_) throw IoError(fmt::format("FileStore: cannot open lock file '{}': {}", path, errno_text()));
    while (::flock(fd_.get(), LOCK_EX) != 0) {
      if (errno != EINTR) throw IoError(fmt::format("FileStore: flock '{}' failed: {}", path, errno_text()));
    }
  }
  ~DirLock() { ::flock(fd_.get(), LOCK_UN); }

 private:
  UniqueFd fd_;
};

std::atomic<uint64_t> g_temp_counter{0};

}  // namespace

FileStore::FileStore(FileStoreOptions options) : options_(std::move(options)) {
  if (options_.directory.empty()) throw InvalidArgument("FileStore: directory must not be empty");
  while (options_.directory.size() > 1 && options_.directory.back() == '/') options_.directory.pop_back();
  mkdir_p(options_.directory);
  if (options_.max_poll_interval.count() < 1) options_.max_poll_interval = std::chrono::milliseconds(1);
}

std::string FileStore::path_for(const std::string& key) const { return options_.directory + "/" + encode_name(key); }

void FileStore::write_atomically(const std::string& key, const Bytes& value) {
  const std::string final_path = path_for(key);
  const std::string tmp =
      fmt::format("{}/.tmp.{}.{}.{}", options_.directory, ::getpid(), g_temp_counter.fetch_add(1), encode_name(key));
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!fd) throw IoError(fmt::format("FileStore: cannot create '{}': {}", tmp, errno_text()));
    try {
      write_all(fd.get(), value.data(), value.size());
    } catch (const Error& e) {
      ::unlink(tmp.c_str());
      throw IoError(fmt::format("FileStore: cannot write '{}': {}", tmp, e.what()));
    }
  }
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("FileStore: cannot rename '{}' to '{}': {}", tmp, final_path, why));
  }
}

void FileStore::set(const std::string& key, const Bytes& value) { write_atomically(key, value); }

std::optional<Bytes> FileStore::try_get(const std::string& key) { return read_file(path_for(key)); }

Bytes FileStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  const auto deadline = detail::deadline_after(timeout);
  std::chrono::milliseconds sleep(1);
  for (;;) {
    if (auto v = try_get(key)) return std::move(*v);
    const auto now = Clock::now();
    if (now >= deadline) detail::throw_timeout({key}, timeout);
    std::this_thread::sleep_for(std::min<Clock::duration>(sleep, deadline - now));
    sleep = std::min(sleep * 2, options_.max_poll_interval);
  }
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  DirLock lock(options_.directory + "/.lock");
  auto current = try_get(key);
  const int64_t value = detail::checked_add(key, current ? detail::parse_counter(key, *current) : 0, delta);
  write_atomically(key, detail::counter_bytes(value));
  return value;
}

bool FileStore::erase(const std::string& key) {
  const std::string path = path_for(key);
  if (::unlink(path.c_str()) == 0) return true;
  if (errno == ENOENT) return false;
  throw IoError(fmt::format("FileStore: cannot remove '{}': {}", path, errno_text()));
}

void FileStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = detail::deadline_after(timeout);
  std::chrono::milliseconds sleep(1);
  for (;;) {
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      struct stat st;
      if (::stat(path_for(k).c_str(), &st) != 0) missing.push_back(k);
    }
    if (missing.empty()) return;
    const auto now = Clock::now();
    if (now >= deadline) detail::throw_timeout(missing, timeout);
    std::this_thread::sleep_for(std::min<Clock::duration>(sleep, deadline - now));
    sleep = std::min(sleep * 2, options_.max_poll_interval);
  }
}

}  // namespace hvd::store
