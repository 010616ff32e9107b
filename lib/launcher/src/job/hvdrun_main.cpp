// hvdrun's whole main(): the early modes, parse, resolve the job once, run
// its mode's row, map the outcome to an exit code (docs/exit-codes.md).
// apps/hvdrun/main.cpp only calls hvdrun_main.
#include "hvd/launcher/job/hvdrun_main.h"

#include "hvd/common/error.h"
#include "hvd/common/text.h"
#include "hvd/launcher/job/modes.h"
#include "hvd/launcher/options/cli.h"
#include "hvd/launcher/process/report.h"

#include <cstdio>
#include <exception>

namespace hvd::launcher {

int exit_code_for(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const JobError& e) {
    report_error(e.what());
    return e.code();
  } catch (const InvalidArgument& e) {
    // One line whatever outside text the message quotes (docs/security.md).
    report_error(one_line(e.what()));
    return exit_code::kUsage;
  } catch (const std::exception& e) {
    report_internal_error(e.what());
    return exit_code::kInternal;
  } catch (...) {
    report_internal_error("unknown exception");
    return exit_code::kInternal;
  }
}

int hvdrun_main(int argc, char** argv) {
  try {
    for (const auto& mode : early_modes()) {
      if (auto code = mode.run(argc, argv)) return *code;
    }
    ParseOutcome parsed = parse_command_line(argc, argv);
    if (!parsed.options) {
      std::fputs(parsed.message.c_str(), parsed.message_to_stdout ? stdout : stderr);
      return parsed.exit_code;
    }
    JobDecision decision = resolve_job(std::move(*parsed.options), Environment::current(), probe_installed_mpirun);
    return job_mode(decision.mode).run(decision);
  } catch (...) {
    return exit_code_for(std::current_exception());
  }
}

}  // namespace hvd::launcher
