// SageMaker's custom MPI options (sagemaker_mpi_custom_mpi_options), split
// the way the SageMaker training toolkit splits them before it builds its
// mpirun command (docs/platforms.md#sagemaker).
#include <fmt/format.h>

#include <sstream>

#include "hvd/common/error.h"
#include "hvd/launcher/discovery/platform/platform.h"

namespace hvd::launcher::platform {

namespace {

constexpr const char* kOption = "--NCCL_DEBUG";

/// argparse (allow_abbrev) takes any prefix of a long option longer than
/// "--" as that option when it is the only one matching: here "--N" .. "--NCCL_DEBUG".
bool is_nccl_debug(const std::string& name) {
  return name.size() > 2 && std::string(kOption).compare(0, name.size(), name) == 0;
}

}  // namespace

CustomMpiOptions parse_custom_mpi_options(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> tokens;
  for (std::string t; in >> t;) tokens.push_back(t);
  CustomMpiOptions out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    const size_t eq = t.find('=');
    if (t.rfind("--", 0) == 0 && is_nccl_debug(t.substr(0, eq))) {
      if (eq != std::string::npos) {
        out.nccl_debug = t.substr(eq + 1);
      } else if (i + 1 < tokens.size() && tokens[i + 1].rfind('-', 0) != 0) {
        out.nccl_debug = tokens[++i];
      } else {
        throw InvalidArgument(
            fmt::format("sagemaker_mpi_custom_mpi_options '{}': {} expects a value (e.g. --NCCL_DEBUG WARN)", text, t));
      }
      continue;
    }
    out.mpirun_rest.push_back(t);
    if (t == "-x" && i + 1 < tokens.size() && tokens[i + 1].rfind('=', 0) != 0) {
      out.mpirun_rest.push_back(tokens[++i]);
      out.env_exports.push_back(tokens[i]);
      continue;
    }
    out.not_mapped.push_back(t);
  }
  return out;
}

std::string CustomMpiOptions::mpirun_args() const {
  std::string out = nccl_debug ? "-x NCCL_DEBUG=" + *nccl_debug : "";
  for (const auto& t : mpirun_rest) out += (out.empty() ? "" : " ") + t;
  return out;
}

}  // namespace hvd::launcher::platform
