// How outcomes that reach main() become exit codes (docs/exit-codes.md).
// The codes a real run produces are tested black-box in
// tests/integration/local/test_exit_codes.py; the internal-error code has no
// input that produces it (it marks a bug), so its mapping is tested here.
#include "hvd/common/error.h"
#include "hvd/launcher/job/hvdrun_main.h"
#include "hvd/launcher/options/options.h"
#include "hvd/launcher/process/report.h"

#include <catch2/catch.hpp>

#include <stdexcept>

using namespace hvd::launcher;

TEST_CASE("exit codes: an exception that reaches main is 70 (internal), a usage error 2", "[exit_codes]") {
  CHECK(exit_code_for(std::make_exception_ptr(std::runtime_error("boom"))) == exit_code::kInternal);
  CHECK(exit_code_for(std::make_exception_ptr(std::logic_error("bug"))) == 70);
  CHECK(exit_code_for(std::make_exception_ptr(42)) == 70);
  CHECK(exit_code_for(std::make_exception_ptr(hvd::InvalidArgument("bad -H"))) == exit_code::kUsage);
  CHECK(exit_code_for(std::make_exception_ptr(hvd::IoError("lost"))) == exit_code::kInternal);
}

TEST_CASE("exit codes: a JobError carries its own code (the modes' one error path)", "[exit_codes]") {
  CHECK(exit_code_for(std::make_exception_ptr(JobError(exit_code::kLaunch, "no route"))) == exit_code::kLaunch);
  CHECK(exit_code_for(std::make_exception_ptr(JobError(exit_code::kPlatformFollower, "no leader"))) ==
        exit_code::kPlatformFollower);
  CHECK(exit_code_for(std::make_exception_ptr(JobError(exit_code::kUsage, "both -H and --hosts-from oci"))) ==
        exit_code::kUsage);
}
