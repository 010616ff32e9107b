#include "hvd/common/error.h"

namespace hvd {

void throw_enforce(const char* file, int line, const std::string& what) {
  throw Error(fmt::format("{} ({}:{})", what, file, line));
}

}  // namespace hvd
