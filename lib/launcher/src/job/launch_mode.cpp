// Who starts the workers: hvdrun or mpirun (the rule is in launch_mode.h).
#include "hvd/launcher/job/launch_mode.h"

#include "hvd/common/env.h"
#include "hvd/common/error.h"
#include "hvd/launcher/process/shell.h"

#include <fmt/format.h>

#include <sys/stat.h>
#include <unistd.h>

#include <sstream>

namespace hvd::launcher {

namespace {

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : sep) + item;
  return out;
}

bool has_words(const std::optional<std::string>& text, const char* flag) {
  return text && !split_shell_words(*text, flag).empty();
}

/// The one line for --mpi-args that reach no mpirun: why, what hvdrun
/// applies itself, what is ignored. Folds the applied flags into `d`.
void without_mpirun(LaunchDecision& d, const std::vector<std::string>& words, const std::string& why, bool elastic) {
  MpiArgsWithoutMpirun asked = interpret_mpi_args_without_mpirun(words);
  std::vector<std::string> applied;
  std::vector<std::string> ignored;
  if (asked.display_map) {
    if (elastic) {
      ignored.push_back("--display-map");  // placement is decided per world, at run time
    } else {
      d.display_map = true;
      applied.push_back("--display-map");
    }
  }
  if (asked.timestamp_output) {
    d.options.prefix_output_with_timestamp = true;
    applied.push_back("--timestamp-output");
  }
  if (asked.tag_output) applied.push_back("--tag-output");
  // --allow-run-as-root: hvdrun runs as root without being asked.
  for (const auto& word : asked.ignored) ignored.push_back(shell_quote(word));
  if (applied.empty() && ignored.empty()) return;
  std::string line = fmt::format("--mpi-args not passed to mpirun: {}", why);
  if (!applied.empty()) line += fmt::format("; hvdrun applies {} itself", join(applied, ", "));
  if (ignored.empty()) {
    d.info.push_back(line);
  } else {
    d.warnings.push_back(line + fmt::format("; ignored: {}", join(ignored, " ")));
  }
}

bool executable_in_path(const std::string& name) {
  std::stringstream path(env::get_or("PATH", ""));
  std::string dir;
  while (std::getline(path, dir, ':')) {
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace

LaunchDecision decide_launch(const Options& options, const std::function<MpirunProbe()>& probe) {
  LaunchDecision d;
  d.options = options;
  const bool elastic = options.elastic.enabled;
  // Both are split now, so a bad quote is a usage error in every mode.
  const std::vector<std::string> words =
      options.mpi_args ? split_shell_words(*options.mpi_args) : std::vector<std::string>{};
  const bool binding_given = has_words(options.binding_args, "--binding-args");
  if (options.engine == Engine::Mpi) {
    d.mode = LaunchMode::Mpirun;
  } else if (!words.empty()) {
    std::string why;
    if (elastic) {
      why = "elastic jobs start their workers through hvdrun (horovodrun runs them with Gloo too)";
    } else if (options.engine == Engine::Gloo) {
      why = "the Gloo controller is chosen (--gloo), so hvdrun starts the workers";
    } else {
      MpirunProbe found = probe();
      if (found.info) {
        d.mode = LaunchMode::Mpirun;
        d.mpirun = found.info;
        d.info.push_back(
            fmt::format("--mpi-args given and {} is installed: mpirun starts the workers, as horovodrun does on an "
                        "MPI install (--gloo keeps hvdrun's own spawning)",
                        mpi_impl_name(found.info->impl)));
      } else {
        why = found.problem + ", so hvdrun starts the workers";
      }
    }
    if (d.mode == LaunchMode::Own) without_mpirun(d, words, why, elastic);
  }
  if (d.mode == LaunchMode::Own && binding_given) {
    d.warnings.push_back(
        "--binding-args only applies when mpirun starts the workers (--mpi, or --mpi-args with an mpirun "
        "installed); ignored");
  }
  return d;
}

MpirunProbe probe_installed_mpirun() {
  MpirunProbe out;
  if (!executable_in_path("mpirun")) {
    out.problem = "no mpirun on PATH";
    return out;
  }
  try {
    MpiInfo info = identify_mpirun("mpirun");
    if (info.impl == MpiImpl::Unknown) {
      out.problem = fmt::format("the installed mpirun ('{}') is not one hvdrun supports", info.version_line);
    } else {
      out.info = info;
    }
  } catch (const Error& e) {
    out.problem = e.what();
  }
  return out;
}

}  // namespace hvd::launcher
