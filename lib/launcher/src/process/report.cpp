#include "hvd/launcher/process/report.h"

#include <cstdio>

namespace hvd::launcher {

void report_error(const std::string& message) {
  const std::string line = kErrorPrefix + message + "\n";
  std::fputs(line.c_str(), stderr);
}

void report_internal_error(const std::string& message) {
  const std::string line = "hvdrun: internal error: " + message + "\n";
  std::fputs(line.c_str(), stderr);
}

}  // namespace hvd::launcher
