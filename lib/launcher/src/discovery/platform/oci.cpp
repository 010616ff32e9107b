// OCI Data Science's variables (docs/platforms.md#oci-data-science).
#include "hvd/launcher/discovery/platform/oci.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <regex>

#include "hvd/common/error.h"
#include "hvd/common/net.h"
#include "hvd/launcher/process/shell.h"

namespace hvd::launcher::platform {

namespace {

long whole_number(const std::string& name, const std::string& text, long min, long max) {
  errno = 0;
  char* end = nullptr;
  const long n = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || n < min || n > max) {
    throw InvalidArgument(fmt::format("{}='{}' is not a whole number in [{}, {}]", name, text, min, max));
  }
  return n;
}

/// A variable that is set and not empty (ADS writes unset optional values
/// as empty strings).
std::optional<std::string> value(const Environment& ctx, const char* name, OciConfig& c) {
  auto v = ctx.get(name);
  if (!v || v->empty()) return std::nullopt;
  c.evidence.push_back(fmt::format("{}={}", name, *v));
  return v;
}

/// GPUs the way the shape shows them: /dev/nvidia0, /dev/nvidia1, ...
int gpu_devices(const Environment& ctx) {
  namespace fs = std::filesystem;
  std::error_code ec;
  int n = 0;
  static const std::regex device("nvidia[0-9]+");
  for (const auto& e : fs::directory_iterator(ctx.path("/dev"), ec)) {
    if (std::regex_match(e.path().filename().string(), device)) ++n;
  }
  return n;
}

}  // namespace

std::string OciConfig::job_dir() const { return work_dir + "/" + job_id + "/hvdrun"; }

std::optional<OciConfig> parse_oci_env(const Environment& ctx) {
  const auto mode = ctx.get("OCI__MODE");
  if (!mode) return std::nullopt;
  OciConfig c;
  c.evidence.push_back("OCI__MODE=" + *mode);
  if (*mode == "MAIN") {
    c.mode = OciConfig::Mode::Main;
  } else if (*mode == "WORKER") {
    c.mode = OciConfig::Mode::Worker;
  } else {
    throw InvalidArgument(fmt::format(
        "OCI__MODE='{}' is not MAIN or WORKER (a Horovod cluster has one MAIN job run and WORKER runs)", *mode));
  }
  if (auto v = value(ctx, "OCI__WORKER_COUNT", c)) {
    c.worker_count = static_cast<int>(whole_number("OCI__WORKER_COUNT", *v, 0, 65535));
  }
  if (auto v = value(ctx, "SLOTS", c)) {
    c.slots = static_cast<int>(whole_number("SLOTS", *v, 1, 65536));
  } else if (int gpus = gpu_devices(ctx); gpus > 0) {
    c.slots = gpus;
    c.evidence.push_back(fmt::format("{} /dev/nvidiaN devices", gpus));
  }
  const auto min_text = value(ctx, "MIN_NP", c);
  const auto max_text = value(ctx, "MAX_NP", c);
  if (min_text) {
    c.min_np = static_cast<int>(whole_number("MIN_NP", *min_text, 1, 65536));
  } else {
    c.min_np = static_cast<int>(std::min<long>(65536, long(c.worker_count.value_or(0) + 1) * c.slots));
  }
  c.max_np = max_text ? static_cast<int>(whole_number("MAX_NP", *max_text, 1, 65536)) : c.min_np;
  if (c.min_np > c.max_np) {
    throw InvalidArgument(fmt::format("MIN_NP={} is greater than MAX_NP={}", c.min_np, c.max_np));
  }
  if (auto v = value(ctx, "START_TIMEOUT", c)) {
    c.start_timeout = std::chrono::seconds(whole_number("START_TIMEOUT", *v, 1, 1000000));
  }
  if (auto v = value(ctx, "WORKER_PORT", c))
    c.worker_port = static_cast<int>(whole_number("WORKER_PORT", *v, 1, 65535));
  if (auto v = value(ctx, "HOROVOD_ARGS", c)) {
    c.horovod_args = *v;
    c.horovod_args_words = split_shell_words(*v, "HOROVOD_ARGS");
  }

  const auto work_dir = value(ctx, "OCI__WORK_DIR", c);
  if (!work_dir) {
    throw InvalidArgument(
        "OCI__WORK_DIR is not set: hvdrun's OCI runs meet in a directory every run of the job sees (a File "
        "Storage mount, or the compose file's shared volume); set OCI__WORK_DIR to its path");
  }
  if (work_dir->find("://") != std::string::npos) {
    throw InvalidArgument(fmt::format(
        "OCI__WORK_DIR='{}' is a URI: hvdrun needs a mounted directory every run of the job sees (mount the "
        "bucket or a File Storage share in the job and set OCI__WORK_DIR to its path in the runtime's env)",
        *work_dir));
  }
  if (work_dir->front() != '/') {
    throw InvalidArgument(fmt::format("OCI__WORK_DIR='{}' is not an absolute path", *work_dir));
  }
  c.work_dir = *work_dir;
  while (c.work_dir.size() > 1 && c.work_dir.back() == '/') c.work_dir.pop_back();
  const auto job = ctx.get("JOB_OCID");
  c.job_id = job && !job->empty() ? *job : "Undefined";
  if (c.job_id.find('/') != std::string::npos || c.job_id == "." || c.job_id == "..") {
    throw InvalidArgument(fmt::format("JOB_OCID='{}' cannot name a directory", c.job_id));
  }
  if (job && !job->empty()) c.evidence.push_back("JOB_OCID=" + *job);
  const auto run = ctx.get("JOB_RUN_OCID");
  c.run_id = run && !run->empty() ? *run : fmt::format("{}-{}", net::local_hostname(), ::getpid());
  std::replace(c.run_id.begin(), c.run_id.end(), '/', '_');

  const auto timeline = value(ctx, "ENABLE_TIMELINE", c);
  if (timeline && *timeline != "0" && *timeline != "1") {
    throw InvalidArgument(fmt::format("ENABLE_TIMELINE='{}' is not 0 or 1", *timeline));
  }
  const auto sync_dir = value(ctx, "OCI__SYNC_DIR", c);
  if (timeline && *timeline == "1") c.timeline_file = (sync_dir ? *sync_dir : c.job_dir()) + "/timeline.json";

  if (auto script = value(ctx, "OCI__ENTRY_SCRIPT", c)) {
    const bool python = script->size() > 3 && script->compare(script->size() - 3, 3, ".py") == 0;
    if (python) c.entry_command.push_back("python3");
    c.entry_command.push_back(*script);
    if (auto args = value(ctx, "OCI__ENTRY_SCRIPT_ARGS", c)) {
      for (auto& w : split_shell_words(*args, "OCI__ENTRY_SCRIPT_ARGS")) c.entry_command.push_back(std::move(w));
    }
  } else if (ctx.get("OCI__ENTRY_SCRIPT_ARGS")) {
    c.ignored.push_back("OCI__ENTRY_SCRIPT_ARGS ignored: OCI__ENTRY_SCRIPT is not set");
  }
  for (const char* name : {"OCI__START_ARGS", "OCI__ENTRY_SCRIPT_KWARGS"}) {
    if (auto v = ctx.get(name); v && !v->empty()) {
      c.ignored.push_back(fmt::format(
          "{}='{}' ignored: hvdrun takes its flags from HOROVOD_ARGS and the command from OCI__ENTRY_SCRIPT and "
          "OCI__ENTRY_SCRIPT_ARGS",
          name, *v));
    }
  }
  if (c.mode == OciConfig::Mode::Worker) {
    if (c.entry_command.size() || c.timeline_file || min_text || max_text || c.worker_count) {
      // Not an error: ADS gives every run the same variables.
      c.notes.push_back(
          "WORKER: MIN_NP, MAX_NP, OCI__WORKER_COUNT, ENABLE_TIMELINE and the entry script are the MAIN's to use; "
          "this run registers its address and SLOTS and serves its sshd");
    }
  }
  return c;
}

PlatformFlags oci_flags(const OciConfig& c) {
  PlatformFlags out;
  if (!c.horovod_args_words.empty()) out.layers.push_back({"HOROVOD_ARGS", c.horovod_args_words});
  std::vector<std::string> v = {"--min-np",          std::to_string(c.min_np),
                                "--max-np",          std::to_string(c.max_np),
                                "--start-timeout",   std::to_string(c.start_timeout.count()),
                                "--elastic-timeout", std::to_string(c.start_timeout.count())};
  if (c.worker_port) {
    v.push_back("-p");
    v.push_back(std::to_string(*c.worker_port));
  }
  if (c.timeline_file) {
    v.push_back("--timeline-filename");
    v.push_back(*c.timeline_file);
  }
  out.layers.push_back({"the OCI variables (MIN_NP, MAX_NP, WORKER_PORT, START_TIMEOUT, ENABLE_TIMELINE)", v});
  out.default_command = c.entry_command;
  // A WORKER runs no command of its own (the MAIN starts its ranks over
  // SSH); the parser wants one, so it gets a placeholder it never runs.
  if (c.mode == OciConfig::Mode::Worker && out.default_command.empty()) out.default_command = {kWorkerPlaceholder};
  return out;
}

std::string render_oci(const OciConfig& c, const std::string& this_address) {
  const bool main = c.mode == OciConfig::Mode::Main;
  std::string out = "platform: oci\n";
  std::string read;
  for (const auto& e : c.evidence) read += (read.empty() ? "" : ", ") + e;
  out += fmt::format("  read from: {}\n", read);
  out += fmt::format("  this run: {} ({}), address {}, {} slot{}\n", c.run_id,
                     main ? "MAIN: runs the elastic job" : "WORKER: registers and serves its sshd", this_address,
                     c.slots, c.slots == 1 ? "" : "s");
  out += fmt::format("  shared directory: {}\n", c.job_dir());
  if (main) {
    out += fmt::format("  workers: {}, np {}..{}, start timeout {} s, sshd port {}\n",
                       c.worker_count ? std::to_string(*c.worker_count) : std::string("not given"), c.min_np, c.max_np,
                       c.start_timeout.count(),
                       c.worker_port ? std::to_string(*c.worker_port) : std::string("22 (WORKER_PORT unset)"));
    if (!c.horovod_args.empty()) out += fmt::format("  HOROVOD_ARGS: {}\n", c.horovod_args);
    if (!c.entry_command.empty()) out += fmt::format("  entry script: {}\n", shell_join(c.entry_command));
  } else {
    out += fmt::format("  waits up to {} s for the MAIN, then follows it to the job's end\n", c.start_timeout.count());
  }
  return out + "\n";
}

}  // namespace hvd::launcher::platform
