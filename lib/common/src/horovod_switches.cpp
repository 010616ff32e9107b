#include "hvd/common/horovod_switches.h"

#include <strings.h>

#include <cstdlib>

#include "hvd/common/job_env.h"

namespace hvd::horovod_switches {

namespace {

enum class When {
  On,        ///< Horovod's switch reading is on (strtol > 0)
  Off,       ///< set with strtol(value) == 0 (Horovod turns a default-on switch off so)
  NonEmpty,  ///< any non-empty value
  NotGloo,   ///< non-empty and not "gloo" (Horovod compares without case)
};

struct Switch {
  const char* variable;
  When when;
  const char* why;
};

constexpr Switch kSwitches[] = {
    {job_env::kController, When::NotGloo,
     "the collective library coordinates through hvdrun's store and its own links (as Horovod's gloo controller); it "
     "does not use MPI"},
    {job_env::kCpuOperations, When::NotGloo,
     "the collective library's CPU operations run over its own TCP and shared-memory links (as Horovod's gloo); it "
     "has no MPI or oneCCL operations"},
    {"HOROVOD_CCL_CACHE", When::On, "the collective library has no oneCCL operations"},
    {"HOROVOD_ADASUM_MPI_CHUNK_SIZE", When::NonEmpty,
     "Adasum runs over the collective library's own links, not MPI, so there is no MPI chunk size"},
    {"HOROVOD_DISABLE_GROUP_FUSION", When::On,
     "a grouped op is one op per tensor in the collective library, fused with any others by the fusion threshold "
     "(the results are the same)"},
    {"HOROVOD_BATCH_D2D_MEMCOPIES", When::Off,
     "the collective library's CUDA path always packs and unpacks its fusion buffer with batched-copy kernels"},
    {"HOROVOD_ENABLE_ASYNC_COMPLETION", When::On,
     "device-buffer handles of the collective library complete after a host-side wait for its stream "
     "(docs/cuda.md)"},
    {"HOROVOD_ENABLE_XLA_OPS", When::On, "there is no TensorFlow binding, so there are no XLA ops"},
};

bool asks(When when, const std::string& v) {
  switch (when) {
    case When::On:
      return switched_on(v);
    case When::Off:
      return std::strtol(v.c_str(), nullptr, 10) == 0;
    case When::NonEmpty:
      return !v.empty();
    case When::NotGloo:
      return !v.empty() && ::strcasecmp(v.c_str(), "gloo") != 0;
  }
  return false;
}

}  // namespace

bool switched_on(const std::optional<std::string>& value) {
  return value && std::strtol(value->c_str(), nullptr, 10) > 0;
}

bool set_by_hvdrun(const std::string& variable) {
  return variable == job_env::kController || variable == job_env::kCpuOperations;
}

std::vector<Unhonoured> unhonoured(const Lookup& get) {
  std::vector<Unhonoured> out;
  for (const Switch& s : kSwitches) {
    const auto value = get(s.variable);
    if (value && asks(s.when, *value)) out.push_back({s.variable, *value, s.why});
  }
  return out;
}

}  // namespace hvd::horovod_switches
