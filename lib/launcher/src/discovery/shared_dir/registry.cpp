// Hosts that meet in a shared directory (discovery/shared_dir/registry.h).
#include "hvd/launcher/discovery/shared_dir/registry.h"

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
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "hvd/common/error.h"

namespace hvd::launcher::shared_dir {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kWorkerPrefix = "WORKER_";
constexpr const char* kLeaderFile = "MAIN.json";
constexpr const char* kStatusFile = "MAIN_status.json";

/// The file's text; nullopt when it does not exist or cannot be read.
std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

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
}

void Registry::write_atomically(const std::string& name, const std::string& text) const {
  // A temporary name no other writer uses (pid and a counter), then rename.
  static std::atomic<unsigned> counter{0};
  const std::string final_path = dir_ + "/" + name;
  const std::string tmp = fmt::format("{}/.{}.{}.{}.tmp", dir_, name, ::getpid(), counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError(fmt::format("cannot write {}: {}", tmp, std::strerror(errno)));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw IoError(fmt::format("cannot write {}: {}", tmp, std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("cannot rename {} to {}: {}", tmp, final_path, std::strerror(err)));
  }
}

void Registry::register_worker(const std::string& name, const HostSpec& host) const {
  json j = {{"address", host.name}, {"slots", host.slots}, {"heartbeat", clock_()}};
  write_atomically(kWorkerPrefix + name + ".json", j.dump() + "\n");
}

void Registry::unregister_worker(const std::string& name) const {
  ::unlink((dir_ + "/" + kWorkerPrefix + name + ".json").c_str());
}

WorkerListing Registry::list_workers() const {
  WorkerListing out;
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kWorkerPrefix, 0) == 0 && ends_with(name, ".json")) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  const double now = clock_();
  const double limit = std::chrono::duration<double>(stale_after_).count();
  std::map<std::string, size_t> by_address;  // address -> index in out.workers
  for (const auto& name : names) {
    const auto text = read_text(dir_ + "/" + name);
    if (!text) continue;  // unregistered meanwhile
    std::string why;
    auto entry = parse_worker(*text, why);
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
  const auto text = read_text(dir_ + "/" + kLeaderFile);
  if (!text) {
    if (problem) *problem = fmt::format("no {}", kLeaderFile);
    return std::nullopt;
  }
  try {
    const json j = json::parse(*text);
    Leader l;
    l.address = j.at("address").get<std::string>();
    l.run = j.at("run").get<std::string>();
    l.heartbeat = j.at("heartbeat").get<double>();
    return l;
  } catch (const json::exception& e) {
    if (problem) *problem = fmt::format("{} is malformed ({})", kLeaderFile, e.what());
    return std::nullopt;
  }
}

double Registry::age(const Leader& leader) const { return clock_() - leader.heartbeat; }

bool Registry::stale(const Leader& leader) const {
  return age(leader) > std::chrono::duration<double>(stale_after_).count();
}

void Registry::remove_leader() const { ::unlink((dir_ + "/" + kLeaderFile).c_str()); }

void Registry::write_status(const std::string& run, int status) const {
  json j = {{"run", run}, {"status", status}};
  write_atomically(kStatusFile, j.dump() + "\n");
}

std::optional<int> Registry::read_status(const std::string& run) const {
  const auto text = read_text(dir_ + "/" + kStatusFile);
  if (!text) return std::nullopt;
  try {
    const json j = json::parse(*text);
    if (j.at("run").get<std::string>() != run) return std::nullopt;
    return j.at("status").get<int>();
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

SharedDirHostSource::SharedDirHostSource(const Registry& registry, HostSpec self)
    : registry_(registry), self_(std::move(self)) {}

std::string SharedDirHostSource::describe() const {
  return fmt::format("the workers registered in {} and this host {}", registry_.dir(), format_host(self_));
}

DiscoveryResult SharedDirHostSource::discover() {
  const WorkerListing found = registry_.list_workers();
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
  }
  return r;
}

}  // namespace hvd::launcher::shared_dir
