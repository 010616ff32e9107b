#pragma once
/// hvdrun's one way of telling the user that something failed.
///
/// Every error hvdrun reports is ONE line on stderr, "hvdrun: error:
/// MESSAGE" (docs/exit-codes.md). Code that decides the job cannot go on
/// throws JobError with the exit code; it is printed once, where it is
/// caught: hvdrun_main's exit_code_for (job/hvdrun_main.h) or
/// JobServices::run, which also closes the job (job_end event, store
/// stopped). Code that goes on after an error (the Supervisor's launch
/// failures, an elastic job that gives up) calls report_error itself.
#include "hvd/common/error.h"

#include <string>

namespace hvd::launcher {

/// What every error line starts with (a platform leader strips it from a
/// follower's last line before quoting it).
inline constexpr const char* kErrorPrefix = "hvdrun: error: ";

/// Prints "hvdrun: error: MESSAGE" and a newline on stderr, in one write.
void report_error(const std::string& message);

/// Prints "hvdrun: internal error: MESSAGE" (a bug in hvdrun: exit 70).
void report_internal_error(const std::string& message);

/// An error that ends hvdrun with `code()` (docs/exit-codes.md) after
/// report_error(what()).
class JobError : public hvd::Error {
 public:
  JobError(int code, const std::string& message) : hvd::Error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

}  // namespace hvd::launcher
