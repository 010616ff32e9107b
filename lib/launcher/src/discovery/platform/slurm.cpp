// Slurm allocations (docs/platforms.md#slurm).
#include <fmt/format.h>

#include <cctype>
#include <cstdlib>

#include "hvd/common/error.h"
#include "hvd/launcher/discovery/platform/platform.h"

namespace hvd::launcher::platform {

namespace {

constexpr size_t kMaxHosts = 65536;

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

/// The numbers of one bracket group: "01-04,07" -> {"01","02","03","04","07"}.
std::vector<std::string> expand_ranges(const std::string& group, const std::string& origin, const std::string& item) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = group.find(',', start);
    const std::string range = group.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t dash = range.find('-');
    const std::string lo = range.substr(0, dash);
    const std::string hi = dash == std::string::npos ? lo : range.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi) || lo.size() > 9 || hi.size() > 9) {
      throw InvalidArgument(fmt::format("{}: '{}': range '{}' is not N or N-M (whole numbers)", origin, item, range));
    }
    const long a = std::strtol(lo.c_str(), nullptr, 10);
    const long b = std::strtol(hi.c_str(), nullptr, 10);
    if (b < a) throw InvalidArgument(fmt::format("{}: '{}': range '{}' runs backwards", origin, item, range));
    if (static_cast<size_t>(b - a) + out.size() >= kMaxHosts) {
      throw InvalidArgument(fmt::format("{}: '{}': more than {} hosts", origin, item, kMaxHosts));
    }
    // Zero padding: the width of the lower bound when it has leading zeros.
    const int width = lo.size() > 1 && lo[0] == '0' ? static_cast<int>(lo.size()) : 0;
    for (long n = a; n <= b; ++n) out.push_back(fmt::format("{:0{}d}", n, width));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

/// One top-level item: "gpu-[1-2]", "r[1-2]n[01-02]", "login".
void expand_item(const std::string& item, const std::string& origin, std::vector<std::string>& out) {
  std::vector<std::string> partial = {""};
  size_t i = 0;
  while (i < item.size()) {
    const size_t open = item.find('[', i);
    const std::string literal = item.substr(i, open == std::string::npos ? std::string::npos : open - i);
    if (literal.find(']') != std::string::npos) {
      throw InvalidArgument(fmt::format("{}: '{}': ']' without '['", origin, item));
    }
    for (auto& p : partial) p += literal;
    if (open == std::string::npos) break;
    const size_t close = item.find(']', open);
    if (close == std::string::npos) throw InvalidArgument(fmt::format("{}: '{}': '[' without ']'", origin, item));
    const std::string group = item.substr(open + 1, close - open - 1);
    if (group.find('[') != std::string::npos) {
      throw InvalidArgument(fmt::format("{}: '{}': nested '['", origin, item));
    }
    const auto numbers = expand_ranges(group, origin, item);
    std::vector<std::string> next;
    if (partial.size() * numbers.size() + out.size() > kMaxHosts) {
      throw InvalidArgument(fmt::format("{}: '{}': more than {} hosts", origin, item, kMaxHosts));
    }
    for (const auto& p : partial) {
      for (const auto& n : numbers) next.push_back(p + n);
    }
    partial = std::move(next);
    i = close + 1;
  }
  for (auto& p : partial) {
    if (p.empty()) throw InvalidArgument(fmt::format("{}: empty host name", origin));
    out.push_back(std::move(p));
  }
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& text, const std::string& origin) {
  std::vector<std::string> out;
  std::string item;
  int depth = 0;
  auto flush = [&](bool at_end) {
    if (item.empty()) {
      throw InvalidArgument(
          fmt::format("{}: empty host entry {} in '{}'", origin, at_end ? "at the end" : "before a ','", text));
    }
    expand_item(item, origin, out);
    item.clear();
  };
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      throw InvalidArgument(fmt::format("{}: unexpected whitespace in '{}'", origin, text));
    }
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      flush(false);
      continue;
    }
    item += c;
  }
  flush(true);
  return out;
}

std::vector<int> expand_tasks_per_node(const std::string& text, const std::string& origin) {
  std::vector<int> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    std::string count = item;
    std::string repeat = "1";
    const size_t paren = item.find('(');
    if (paren != std::string::npos) {
      count = item.substr(0, paren);
      if (item.size() < paren + 4 || item.compare(paren, 2, "(x") != 0 || item.back() != ')') {
        throw InvalidArgument(fmt::format("{}='{}': '{}' is not N or N(xM)", origin, text, item));
      }
      repeat = item.substr(paren + 2, item.size() - paren - 3);
    }
    if (!all_digits(count) || !all_digits(repeat) || count.size() > 6 || repeat.size() > 6) {
      throw InvalidArgument(fmt::format("{}='{}': '{}' is not N or N(xM)", origin, text, item));
    }
    const int n = std::atoi(count.c_str());
    const int r = std::atoi(repeat.c_str());
    if (n < 1 || r < 1) throw InvalidArgument(fmt::format("{}='{}': '{}' has a zero count", origin, text, item));
    if (out.size() + static_cast<size_t>(r) > kMaxHosts) {
      throw InvalidArgument(fmt::format("{}='{}': more than {} nodes", origin, text, kMaxHosts));
    }
    out.insert(out.end(), static_cast<size_t>(r), n);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::optional<PlatformDescription> detect_slurm(const Environment& ctx) {
  const auto job_id = ctx.get("SLURM_JOB_ID");
  if (!job_id) return std::nullopt;
  PlatformDescription p;
  p.name = "slurm";
  p.evidence.push_back("SLURM_JOB_ID=" + *job_id);
  std::string list_name = "SLURM_JOB_NODELIST";
  auto list = ctx.get(list_name);
  if (!list) {
    list_name = "SLURM_NODELIST";
    list = ctx.get(list_name);
  }
  if (!list || list->empty()) {
    throw InvalidArgument("SLURM_JOB_ID is set but SLURM_JOB_NODELIST is empty or unset: not inside an allocation?");
  }
  p.evidence.push_back(list_name + "=" + *list);
  const std::vector<std::string> names = expand_hostlist(*list, list_name);
  for (size_t i = 0; i < names.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (names[i] == names[j])
        throw InvalidArgument(fmt::format("{}: node '{}' is listed twice", list_name, names[i]));
    }
  }

  std::vector<int> slots(names.size(), 1);
  if (auto tasks = ctx.get("SLURM_TASKS_PER_NODE")) {
    slots = expand_tasks_per_node(*tasks, "SLURM_TASKS_PER_NODE");
    if (slots.size() != names.size()) {
      throw InvalidArgument(fmt::format("SLURM_TASKS_PER_NODE='{}' gives {} nodes but {} lists {}", *tasks,
                                        slots.size(), list_name, names.size()));
    }
    p.evidence.push_back("SLURM_TASKS_PER_NODE=" + *tasks);
  } else if (auto per_node = ctx.get("SLURM_NTASKS_PER_NODE")) {
    const auto one = expand_tasks_per_node(*per_node, "SLURM_NTASKS_PER_NODE");
    if (one.size() != 1) {
      throw InvalidArgument(fmt::format("SLURM_NTASKS_PER_NODE='{}' is not one whole number", *per_node));
    }
    slots.assign(names.size(), one.front());
    p.evidence.push_back("SLURM_NTASKS_PER_NODE=" + *per_node);
  }
  // In an srun step hvdrun must run once per node: a second hvdrun on a node
  // would lead (or follow) a copy of the whole job of its own. Inside an
  // allocation srun inherits SLURM_NTASKS and, without -n, ignores
  // --ntasks-per-node=1 (it only warns).
  if (auto step = ctx.get("SLURM_STEP_TASKS_PER_NODE")) {
    for (int n : expand_tasks_per_node(*step, "SLURM_STEP_TASKS_PER_NODE")) {
      if (n > 1) {
        throw InvalidArgument(fmt::format(
            "srun started {} hvdruns on one node (SLURM_STEP_TASKS_PER_NODE={}), and each would run a copy of the "
            "job: run one per node, e.g. srun -n \"$SLURM_JOB_NUM_NODES\" --ntasks-per-node=1 hvdrun ... "
            "(docs/platforms.md#slurm)",
            n, *step));
      }
    }
  }
  for (size_t i = 0; i < names.size(); ++i) p.hosts.push_back(HostSpec{names[i], slots[i]});
  p.leader = names.front();
  if (auto node = ctx.get("SLURMD_NODENAME"); node && !node->empty()) {
    p.this_host = *node;
    p.evidence.push_back("SLURMD_NODENAME=" + *node);
  }
  return p;
}

}  // namespace hvd::launcher::platform
