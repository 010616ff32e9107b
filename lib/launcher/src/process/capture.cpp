#include "hvd/launcher/process/capture.h"

#include "hvd/common/error.h"
#include "hvd/launcher/process/subprocess.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hvd::launcher {

Captured run_captured(const std::vector<std::string>& argv, Deadline deadline, const std::string& what,
                      std::size_t max_output, const std::optional<std::vector<std::string>>& env) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw IoError(fmt::format("pipe: {}", std::strerror(errno)));
  UniqueFd read_end(out[0]), write_end(out[1]);
  SpawnOptions so;
  so.argv = argv;
  so.env = env;
  so.stdout_fd = ChildFd::from(write_end.get());
  so.stderr_fd = ChildFd::from(write_end.get());
  Subprocess proc = Subprocess::spawn(so);  // SpawnError to the caller
  write_end.reset();
  Captured result;
  for (;;) {
    pollfd p{read_end.get(), POLLIN, 0};
    int r = ::poll(&p, 1, deadline.poll_timeout_ms());
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 || deadline.expired()) {
      proc.kill_group_and_reap();
      throw TimeoutError(fmt::format("{} did not finish in time", what));
    }
    char buf[4096];
    ssize_t n = ::read(read_end.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (result.output.size() < max_output) {
      result.output.append(buf, std::min(static_cast<std::size_t>(n), max_output - result.output.size()));
    }
  }
  // The output is closed; a well-behaved command exits now. Bound it anyway.
  std::optional<int> status = proc.reap_until(deadline);
  if (!status) {
    proc.kill_group_and_reap();
    throw TimeoutError(fmt::format("{} did not exit in time", what));
  }
  result.wait_status = *status;
  return result;
}

}  // namespace hvd::launcher
