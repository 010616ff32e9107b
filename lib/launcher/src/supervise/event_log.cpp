#include "hvd/launcher/supervise/event_log.h"

#include "hvd/common/error.h"

#include <fcntl.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

namespace hvd::launcher {

EventValue::EventValue(const char* s) : json_(nlohmann::json(std::string(s)).dump()) {}
EventValue::EventValue(const std::string& s) : json_(nlohmann::json(s).dump()) {}
EventValue::EventValue(int v) : json_(std::to_string(v)) {}
EventValue::EventValue(long v) : json_(std::to_string(v)) {}
EventValue::EventValue(long long v) : json_(std::to_string(v)) {}
EventValue::EventValue(unsigned long v) : json_(std::to_string(v)) {}
EventValue::EventValue(unsigned long long v) : json_(std::to_string(v)) {}
EventValue::EventValue(bool v) : json_(v ? "true" : "false") {}
EventValue::EventValue(const std::vector<std::string>& list) : json_(nlohmann::json(list).dump()) {}
EventValue::EventValue(const std::vector<int>& list) : json_(nlohmann::json(list).dump()) {}

EventValue EventValue::null() { return raw("null"); }

EventValue EventValue::raw(std::string json) {
  EventValue v;
  v.json_ = std::move(json);
  return v;
}

namespace {

std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>(ms));
  return out;
}

template <typename Fields>
std::string encode(const std::string& event, const Fields& fields) {
  std::string line = "{\"time\":\"" + utc_now() + "\",\"event\":" + nlohmann::json(event).dump();
  for (const auto& [name, value] : fields) {
    line += ',';
    line += nlohmann::json(std::string(name)).dump();
    line += ':';
    line += value.json();
  }
  line += "}\n";
  return line;
}

}  // namespace

EventLog::EventLog(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw IoError("cannot open --events-file '" + path + "': " + std::strerror(errno));
}

EventLog::~EventLog() {
  if (fd_ >= 0) ::close(fd_);
}

void EventLog::emit(const std::string& event, std::initializer_list<std::pair<const char*, EventValue>> fields) {
  write_line(encode(event, fields));
}

void EventLog::emit(const std::string& event, const std::vector<std::pair<std::string, EventValue>>& fields) {
  write_line(encode(event, fields));
}

void EventLog::write_line(const std::string& line) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failed_) return;
  // O_APPEND and one write per line: a reader never sees half a line
  // (short writes to a regular file only happen when the disk is full).
  std::size_t done = 0;
  while (done < line.size()) {
    ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      failed_ = true;
      spdlog::warn("--events-file '{}': write failed ({}); no more events are recorded", path_,
                   n < 0 ? std::strerror(errno) : "nothing written");
      return;
    }
    done += static_cast<std::size_t>(n);
  }
}

std::unique_ptr<EventLog> open_event_log(const std::string* path) {
  if (!path) return nullptr;
  return std::make_unique<EventLog>(*path);
}

}  // namespace hvd::launcher
