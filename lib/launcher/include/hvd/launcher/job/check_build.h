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

/// What the interpreter that runs a `python train.py` worker can import,
/// as horovodrun's check_build asks its own interpreter: `python3` from
/// PATH (else `python`) runs `import horovod.torch` (check_build.cpp).
struct WorkerPython {
  std::string interpreter;  ///< "python3", or "" when neither is on PATH
  bool imports_torch_binding = false;
  std::string module_path;  ///< horovod/torch/__init__.py as imported
  std::string problem;  ///< why not: the import's error line, a timeout, ...
};
WorkerPython probe_worker_python();

/// --check-build's text: PyTorch is ticked only when the worker interpreter
/// imports horovod.torch (a binding built but not importable is named, with
/// why and where to look).
std::string render_check_build(const BuiltComponents& built, const WorkerPython& python);
/// This build, this machine's worker interpreter.
std::string render_check_build();

}  // namespace hvd::launcher
