#pragma once
/// hvdrun's main(): apps/hvdrun/main.cpp only calls hvdrun_main. The modes
/// it dispatches to are rows of a table (job/modes.h).
#include <exception>

namespace hvd::launcher {

/// hvdrun's main(): an internal mode (the follower protocol),
/// an OCI run or a job; returns the exit code (docs/exit-codes.md). Never
/// calls exit().
int hvdrun_main(int argc, char** argv);

/// The exit code for an exception that reached main, reported in one line
/// on stderr (process/report.h): JobError -> its code, InvalidArgument ->
/// exit_code::kUsage, anything else -> kInternal ("internal error").
int exit_code_for(std::exception_ptr error);

}  // namespace hvd::launcher
