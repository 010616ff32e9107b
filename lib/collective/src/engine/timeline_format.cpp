#include "engine/timeline_format.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace hvd::collective::detail {

std::string timeline_quote(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

const char* timeline_op_name(OpType type) {
  switch (type) {
    case OpType::Allreduce: return "ALLREDUCE";
    case OpType::Allgather: return "ALLGATHER";
    case OpType::Broadcast: return "BROADCAST";
    case OpType::Alltoall: return "ALLTOALL";
    case OpType::Reducescatter: return "REDUCESCATTER";
    case OpType::Barrier: return "BARRIER";
    case OpType::Join: return "JOIN";
  }
  return "UNKNOWN";
}

std::string timeline_head(int64_t start_epoch_us) {
  return fmt::format(
      "[\n{{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"args\": {{\"name\": \"hvd timeline (rank 0)\", "
      "\"start_time_since_epoch_in_micros\": {}}}}},\n"
      "{{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": 0, \"args\": {{\"sort_index\": 0}}}}{}",
      start_epoch_us, kTimelineTail);
}

int TimelineFormatter::pid_of(const std::string& tensor, std::string& out, bool& fresh) {
  auto [it, inserted] = pids_.emplace(tensor, static_cast<int>(pids_.size()) + 1);
  fresh = inserted;
  if (fresh) {
    // Each tensor is a trace "process": its name and its place in the list.
    out += fmt::format(
        ",\n{{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": {0}, \"args\": {{\"name\": {1}}}}}"
        ",\n{{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": {0}, \"args\": {{\"sort_index\": {0}}}}}",
        it->second, timeline_quote(tensor));
  }
  return it->second;
}

TimelineItems TimelineFormatter::format(const std::vector<TimelineRecord>& batch) {
  TimelineItems out;
  std::string& items = out.text;
  std::vector<std::size_t>& starts = out.starts;
  items.reserve(batch.size() * 80);
  starts.reserve(batch.size());
  for (const TimelineRecord& r : batch) {
    starts.push_back(items.size());
    bool fresh = false;
    if (r.phase == 'i') {
      items += fmt::format(",\n{{\"ph\": \"i\", \"name\": {}, \"ts\": {}, \"pid\": 0, \"s\": \"g\"}}",
                           timeline_quote(r.name), r.ts_us);
    } else {
      const int pid = pid_of(r.tensor, items, fresh);
      items += fmt::format(",\n{{\"ph\": \"{}\"", r.phase);
      if (r.phase != 'E') items += fmt::format(", \"name\": {}", timeline_quote(r.name));
      items += fmt::format(", \"ts\": {}, \"pid\": {}, \"tid\": 0", r.ts_us, pid);
      if (r.phase == 'X') items += ", \"dur\": 0";
      if (!r.args.empty()) items += fmt::format(", \"args\": {{{}}}", r.args);
      items += "}";
    }
    if (items.size() - starts.back() > max_unit_) {
      // Larger than one write of the writer process (a megabyte of tensor
      // name or arguments): left out, and its tensor's pid given again.
      items.resize(starts.back());
      starts.pop_back();
      if (fresh) pids_.erase(r.tensor);
      ++out.too_big;
    }
  }
  return out;
}

std::vector<std::size_t> timeline_write_cuts(int64_t pos, std::size_t size, const std::vector<std::size_t>& starts) {
  std::vector<std::size_t> cuts;
  std::size_t from = 0;  // first byte not in a write yet
  for (std::size_t u = 0; u < starts.size(); ++u) {
    const std::size_t unit_end = u + 1 < starts.size() ? starts[u + 1] : size;
    const int64_t page_end = (pos / kTimelinePage + 1) * kTimelinePage;
    if (starts[u] > from && pos + static_cast<int64_t>(unit_end - from) + kTimelineTailLen > page_end) {
      cuts.push_back(starts[u]);
      pos += static_cast<int64_t>(starts[u] - from);
      from = starts[u];
    }
  }
  if (size > from) cuts.push_back(size);
  return cuts;
}

}  // namespace hvd::collective::detail
