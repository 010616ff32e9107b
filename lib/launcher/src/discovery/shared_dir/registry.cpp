// Hosts that meet in a shared directory (discovery/shared_dir/registry.h).
#include "hvd/launcher/discovery/shared_dir/registry.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "hvd/common/error.h"

namespace hvd::launcher::shared_dir {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kWorkerPrefix = "WORKER_";
constexpr const char* kLeaderFile = "MAIN.json";
constexpr const char* kStatusFile = "MAIN_status.json";

/// A registry file's size bound: an entry is a few dozen bytes.
constexpr std::size_t kMaxFileBytes = 65536;
/// WORKER_ entries looked at per listing; the rest are one ignored line.
constexpr std::size_t kMaxEntries = 4096;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// The worker entry in `text`, or why it is not one.
std::optional<WorkerEntry> parse_worker(const std::string& text, std::string& why) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception&) {
    why = "not JSON";
    return std::nullopt;
  }
  if (!j.is_object()) {
    why = "not a JSON object";
    return std::nullopt;
  }
  WorkerEntry e;
  auto address = j.find("address");
  auto slots = j.find("slots");
  auto heartbeat = j.find("heartbeat");
  if (address == j.end() || !address->is_string() || address->get<std::string>().empty()) {
    why = "no 'address' string";
    return std::nullopt;
  }
  if (slots == j.end() || !slots->is_number_integer() || slots->get<long>() < 1 || slots->get<long>() > 65536) {
    why = "no 'slots' count from 1 to 65536";
    return std::nullopt;
  }
  if (heartbeat == j.end() || !heartbeat->is_number() || !std::isfinite(heartbeat->get<double>())) {
    why = "no 'heartbeat' time";
    return std::nullopt;
  }
  // The address must be a host name or address in the -H grammar.
  const std::string name = address->get<std::string>();
  const bool ipv6 = name.find(':') != std::string::npos;
  HostEntry parsed = try_parse_host_entry(ipv6 ? "[" + name + "]" : name);
  if (!parsed.ok()) {
    why = fmt::format("address '{}': {}", name, *parsed.error);
    return std::nullopt;
  }
  e.host = HostSpec{parsed.host.name, static_cast<int>(slots->get<long>())};
  e.heartbeat = heartbeat->get<double>();
  auto token = j.find("token");
  if (token != j.end() && token->is_string()) e.token = token->get<std::string>();
  return e;
}

}  // namespace

double wall_clock() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Registry::Registry(std::string dir, std::chrono::milliseconds stale_after, Clock clock)
    : dir_(std::move(dir)), stale_after_(stale_after), clock_(std::move(clock)) {}

void Registry::create_directories() const {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw IoError(fmt::format("cannot create the shared directory {}: {}", dir_, ec.message()));
  check_directory();
}

void Registry::check_directory() const { (void)open_dir(); }

SharedDirectory Registry::open_dir() const {
  SharedDirectory d = open_shared_directory(dir_);
  if (d.world_writable && !warned_world_writable_.exchange(true)) {
    spdlog::warn(
        "the shared directory {} is writable by every user (it has the sticky bit): hvdrun trusts only the files of "
        "this user and root there (docs/design.md, \"Security rules\")",
        dir_);
  }
  return d;
}

void Registry::write_atomically(const std::string& name, const std::string& text) const {
  const SharedDirectory d = open_dir();
  if (!d.fd) throw IoError(fmt::format("cannot write {}/{}: the shared directory is gone", dir_, name));
  write_file_atomically(d.fd.get(), dir_, name, text);
}

OwnedFile Registry::read(const std::string& name) const {
  const SharedDirectory d = open_dir();
  if (!d.fd) return OwnedFile{};
  return read_owned_file(d.fd.get(), name, kMaxFileBytes);
}

void Registry::remove(const std::string& name) const {
  try {
    const SharedDirectory d = open_dir();
    if (d.fd && ::unlinkat(d.fd.get(), name.c_str(), 0) != 0 && errno != ENOENT) {
      spdlog::warn("cannot remove {}/{}: {}", dir_, name, std::strerror(errno));
    }
  } catch (const Error& e) {
    spdlog::warn("cannot remove {}/{}: {}", dir_, name, e.what());
  }
}

double Registry::skew_limit() const { return std::chrono::duration<double>(stale_after_).count(); }

void Registry::register_worker(const std::string& name, const HostSpec& host, const std::string& token) const {
  json j = {{"address", host.name}, {"slots", host.slots}, {"heartbeat", clock_()}};
  if (!token.empty()) j["token"] = token;
  write_atomically(kWorkerPrefix + name + ".json", j.dump() + "\n");
}

void Registry::unregister_worker(const std::string& name) const { remove(kWorkerPrefix + name + ".json"); }

WorkerListing Registry::list_workers() const {
  WorkerListing out;
  const SharedDirectory d = open_dir();
  if (!d.fd) return out;  // not created yet: nobody registered
  std::vector<std::string> names;
  {
    const int fd = ::dup(d.fd.get());
    DIR* listing = fd < 0 ? nullptr : ::fdopendir(fd);
    if (listing == nullptr) {
      if (fd >= 0) ::close(fd);
      throw IoError(fmt::format("cannot list the shared directory {}: {}", dir_, std::strerror(errno)));
    }
    ::rewinddir(listing);
    size_t over = 0;
    while (const dirent* e = ::readdir(listing)) {
      const std::string name = e->d_name;
      if (name.rfind(kWorkerPrefix, 0) != 0 || !ends_with(name, ".json")) continue;
      if (names.size() < kMaxEntries) {
        names.push_back(name);
      } else {
        ++over;
      }
    }
    ::closedir(listing);
    if (over > 0) {
      out.ignored.push_back(
          fmt::format("{}*.json: {} more entries than the {} looked at", kWorkerPrefix, over, kMaxEntries));
    }
  }
  std::sort(names.begin(), names.end());
  const double now = clock_();
  const double limit = std::chrono::duration<double>(stale_after_).count();
  std::map<std::string, size_t> by_address;  // address -> index in out.workers
  for (const auto& name : names) {
    const OwnedFile file = read_owned_file(d.fd.get(), name, kMaxFileBytes);
    if (file.status == OwnedFile::Status::Absent) continue;  // unregistered meanwhile
    if (file.status == OwnedFile::Status::Refused) {
      out.ignored.push_back(fmt::format("{}: {}", name, file.why));
      continue;
    }
    std::string why;
    auto entry = parse_worker(file.text, why);
    if (!entry) {
      out.ignored.push_back(fmt::format("{}: {}", name, why));
      continue;
    }
    entry->file = name;
    if (now - entry->heartbeat > limit) {
      out.ignored.push_back(
          fmt::format("{}: stale (its heartbeat is {:.0f} s old; a worker refreshes it every few "
                      "seconds while it runs)",
                      name, now - entry->heartbeat));
      continue;
    }
    if (entry->heartbeat - now > skew_limit()) {
      out.ignored.push_back(
          fmt::format("{}: stale (its heartbeat is {:.0f} s in the future, more than the {:.0f} s the machines' "
                      "clocks may differ by)",
                      name, entry->heartbeat - now, skew_limit()));
      continue;
    }
    auto seen = by_address.find(entry->host.name);
    if (seen != by_address.end()) {
      WorkerEntry& other = out.workers[seen->second];
      const bool newer = entry->heartbeat > other.heartbeat;
      out.ignored.push_back(fmt::format("{}: address {} is also registered by {}, whose heartbeat is {}",
                                        newer ? other.file : name, entry->host.name, newer ? name : other.file,
                                        "newer"));
      if (newer) other = *entry;
      continue;
    }
    by_address[entry->host.name] = out.workers.size();
    out.workers.push_back(std::move(*entry));
  }
  return out;
}

void Registry::write_leader(const std::string& address, const std::string& run) const {
  json j = {{"address", address}, {"run", run}, {"heartbeat", clock_()}};
  write_atomically(kLeaderFile, j.dump() + "\n");
}

std::optional<Leader> Registry::read_leader(std::string* problem) const {
  OwnedFile file;
  try {
    file = read(kLeaderFile);
  } catch (const Error& e) {
    if (problem) *problem = e.what();
    return std::nullopt;
  }
  if (file.status != OwnedFile::Status::Ok) {
    if (problem) {
      *problem = file.status == OwnedFile::Status::Absent ? fmt::format("no {}", kLeaderFile)
                                                          : fmt::format("{}: {}", kLeaderFile, file.why);
    }
    return std::nullopt;
  }
  try {
    const json j = json::parse(file.text);
    Leader l;
    l.address = j.at("address").get<std::string>();
    l.run = j.at("run").get<std::string>();
    l.heartbeat = j.at("heartbeat").get<double>();
    if (!std::isfinite(l.heartbeat)) throw std::out_of_range("'heartbeat' is not a finite number");
    return l;
  } catch (const std::exception& e) {
    if (problem) *problem = fmt::format("{} is malformed ({})", kLeaderFile, e.what());
    return std::nullopt;
  }
}

double Registry::age(const Leader& leader) const { return clock_() - leader.heartbeat; }

bool Registry::stale(const Leader& leader) const {
  const double a = age(leader);
  return a > std::chrono::duration<double>(stale_after_).count() || -a > skew_limit();
}

std::string Registry::describe_age(const Leader& leader) const {
  const double a = age(leader);
  return a >= 0 ? fmt::format("{:.0f} s old", a) : fmt::format("{:.0f} s in the future", -a);
}

void Registry::remove_leader() const { remove(kLeaderFile); }

void Registry::write_status(const std::string& run, int status, const std::set<std::string>& workers) const {
  json j = {{"run", run}, {"status", status}, {"workers", workers}};
  write_atomically(kStatusFile, j.dump() + "\n");
}

std::optional<std::string> Registry::status_text(std::string* problem) const {
  OwnedFile file;
  try {
    file = read(kStatusFile);
  } catch (const Error& e) {
    if (problem) *problem = e.what();
    return std::nullopt;
  }
  if (file.status == OwnedFile::Status::Refused) {
    if (problem) *problem = fmt::format("{}: {}", kStatusFile, file.why);
    return std::nullopt;
  }
  if (file.status != OwnedFile::Status::Ok) return std::nullopt;
  return std::move(file.text);
}

std::optional<int> Registry::read_status(const std::string& run, std::string* problem) const {
  const auto text = status_text(problem);
  if (!text) return std::nullopt;
  try {
    const json j = json::parse(*text);
    if (j.at("run").get<std::string>() != run) return std::nullopt;
    return j.at("status").get<int>();
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

std::optional<std::pair<std::string, int>> Registry::read_status_naming(const std::string& token) const {
  if (token.empty()) return std::nullopt;
  const auto text = status_text(nullptr);
  if (!text) return std::nullopt;
  try {
    const json j = json::parse(*text);
    auto workers = j.find("workers");
    if (workers == j.end() || !workers->is_array()) return std::nullopt;
    for (const auto& w : *workers) {
      if (w.is_string() && w.get<std::string>() == token) {
        return std::make_pair(j.at("run").get<std::string>(), j.at("status").get<int>());
      }
    }
  } catch (const json::exception&) {
  }
  return std::nullopt;
}

SharedDirHostSource::SharedDirHostSource(const Registry& registry, HostSpec self)
    : registry_(registry), self_(std::move(self)) {}

std::string SharedDirHostSource::describe() const {
  return fmt::format("the workers registered in {} and this host {}", registry_.dir(), format_host(self_));
}

DiscoveryResult SharedDirHostSource::discover() {
  WorkerListing found;
  try {
    found = registry_.list_workers();
  } catch (const Error& e) {  // failures are values (host_source.h)
    DiscoveryResult failed;
    failed.error = e.what();
    return failed;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::string, std::string> now;
  for (const auto& line : found.ignored) {
    const std::string file = line.substr(0, line.find(':'));
    // A stale entry's age changes every look: report the kind of reason once.
    const std::string kind = line.find(": stale") != std::string::npos ? std::string("stale") : line;
    now[file] = kind;
    auto it = reported_.find(file);
    if (it == reported_.end() || it->second != kind) spdlog::warn("{}: ignored: {}", registry_.dir(), line);
  }
  reported_ = std::move(now);
  DiscoveryResult r;
  r.hosts.push_back(self_);
  for (const auto& w : found.workers) {
    if (w.host.name == self_.name) {
      spdlog::debug("{}: {} registers this host's own address {}; ignored", registry_.dir(), w.file, w.host.name);
      continue;
    }
    r.hosts.push_back(w.host);
    if (!w.token.empty()) tokens_.insert(w.token);
  }
  return r;
}

std::set<std::string> SharedDirHostSource::tokens_seen() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return tokens_;
}

}  // namespace hvd::launcher::shared_dir
