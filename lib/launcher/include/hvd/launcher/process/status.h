#pragma once
/// Plain-words readings of worker exit statuses for error messages.
#include <string>

namespace hvd::launcher {

/// "exited with code 3", "killed by SIGKILL (status 137; often the
/// out-of-memory killer)", "command not found (status 127)", ...
/// `status` is as a shell reports it (128+N for signal N); `signal` is the
/// terminating signal or 0.
std::string describe_status(int status, int signal);

}  // namespace hvd::launcher
