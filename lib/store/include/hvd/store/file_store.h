#pragma once
/// FileStore: one file per key in a directory shared by every participant
/// (a local path or a shared file system), cf. gloo::rendezvous::FileStore.
///
/// Why each mechanism:
///  * set() writes a hidden temp file and rename()s it over the key's file, so
///    a reader sees either the old or the new value, never a torn one.
///  * get()/wait() poll with exponential backoff (1 ms .. 50 ms): there is no
///    portable change notification on shared file systems.
///  * add() takes flock() on "<dir>/.lock" around read-modify-write; flock
///    locks belong to an open file description, so it serialises threads of
///    one process as well as separate processes.
/// Key bytes outside [A-Za-z0-9_-] are %XX-encoded into the file name, so no
/// key can name a hidden file or escape the directory.
#include "hvd/store/store.h"

#include <string>

namespace hvd::store {

struct FileStoreOptions {
  /// Created (with parents) if missing.
  std::string directory;
  /// Longest sleep between polls in get()/wait().
  std::chrono::milliseconds max_poll_interval{50};
};

class FileStore : public Store {
 public:
  /// Throws IoError when the directory cannot be created or is not writable.
  explicit FileStore(FileStoreOptions options);

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::optional<Bytes> try_get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool erase(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

  const std::string& directory() const { return options_.directory; }

 private:
  std::string path_for(const std::string& key) const;
  void write_atomically(const std::string& key, const Bytes& value);

  FileStoreOptions options_;
};

}  // namespace hvd::store
