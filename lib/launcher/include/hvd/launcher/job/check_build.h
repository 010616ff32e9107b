#pragma once
/// --check-build output (what this build supports).
#include <string>

namespace hvd::launcher {

/// What was built beside hvdrun in this build tree (CMake passes it to
/// the launcher; hvdrun itself never links the collective library).
struct BuiltComponents {
  bool pytorch_binding = false;  ///< python/ hvdcomm.torch
  bool cuda = false;  ///< lib/collective/cuda (HVD_WITH_CUDA)
  bool nccl_found = false;  ///< libnccl seen at configure time (loaded at run time by the CUDA component)
};
/// This build's components (from compile definitions).
BuiltComponents built_components();
std::string render_check_build(const BuiltComponents& built);
std::string render_check_build();

}  // namespace hvd::launcher
