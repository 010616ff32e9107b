#pragma once
/// The launcher library's entry points, in the order main() calls them
/// (the first, parse_command_line, lives in options/cli.h).
#include "hvd/launcher/elastic/elastic_driver.h"
#include "hvd/launcher/options/cli.h"  // parse_command_line: callers of this header still get it
#include "hvd/launcher/options/options.h"
#include "hvd/launcher/plan/job_plan.h"
#include "hvd/launcher/plan/plan.h"  // make_plan, render_dry_run: callers of this header still get them

#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace hvd::launcher {

/// hvdrun's main(): `hvdrun --agent` or a job; returns the exit code
/// (docs/exit-codes.md). Never calls exit().
int hvdrun_main(int argc, char** argv);

/// The exit code for an exception that reached main (one line on stderr):
/// InvalidArgument -> exit_code::kUsage, anything else -> kInternal.
int exit_code_for(std::exception_ptr error);

/// --check-build output (what this build supports).
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

/// Starts the job and supervises it to the end; returns hvdrun's exit code
/// (job/static_job.cpp). Never calls exit().
int run_job(const Options& options, const JobPlan& plan);

class HostSource;

/// Runs an elastic job to the end with hosts from `source`
/// (choose_host_source, or OCI's shared directory: job/oci_job.cpp):
/// discovery, membership changes, recovery (docs/elastic.md;
/// job/elastic_job.cpp); --dry-run looks once and prints what it finds.
/// Returns hvdrun's exit code. Never calls exit().
int run_elastic_job(const Options& options, std::unique_ptr<HostSource> source);

/// An OCI Data Science run (OCI__MODE), before anything else is parsed:
/// nullopt when OCI does not apply here (job/oci_job.h).
std::optional<int> run_oci_if_detected(int argc, char** argv);

}  // namespace hvd::launcher
