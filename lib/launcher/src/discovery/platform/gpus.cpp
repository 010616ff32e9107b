// This machine's NVIDIA GPU count for platforms that give slots per GPU
// (docs/platforms.md#vertex-ai).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>

#include "hvd/launcher/discovery/platform/platform.h"

namespace hvd::launcher::platform {

namespace {

/// How many devices CUDA_VISIBLE_DEVICES makes visible: its entries up to
/// the first invalid one (CUDA ignores the rest); "" and "NoDevFiles" none.
int visible_entries(const std::string& value) {
  int n = 0;
  size_t start = 0;
  while (start <= value.size()) {
    const size_t comma = value.find(',', start);
    std::string item = value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.front()))) item.erase(0, 1);
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.back()))) item.pop_back();
    const bool index = !item.empty() && std::all_of(item.begin(), item.end(),
                                                    [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    const bool uuid = item.rfind("GPU-", 0) == 0 || item.rfind("MIG-", 0) == 0;
    if (!index && !uuid) break;
    ++n;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return n;
}

}  // namespace

GpuCount count_nvidia_gpus(const Environment& ctx) {
  GpuCount out;
  const std::string dir = "/proc/driver/nvidia/gpus";
  std::error_code ec;
  int present = 0;
  for (std::filesystem::directory_iterator it(ctx.path(dir), ec), end; !ec && it != end; it.increment(ec)) ++present;
  out.count = present;
  out.evidence.push_back(fmt::format("{} ({} GPU{})", dir, present, present == 1 ? "" : "s"));
  if (auto visible = ctx.get("CUDA_VISIBLE_DEVICES")) {
    out.count = std::min(present, visible_entries(*visible));
    out.evidence.push_back("CUDA_VISIBLE_DEVICES=" + *visible);
  }
  return out;
}

}  // namespace hvd::launcher::platform
