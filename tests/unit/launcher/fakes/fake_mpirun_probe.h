#pragma once
/// An mpirun probe for decide_launch (job/launch_mode.h) that counts its
/// calls and finds Open MPI 4.1.4, or no mpirun. Shared by the launch-mode
/// and job-mode tests.
#include "hvd/launcher/job/launch_mode.h"

#include <functional>

namespace hvd::launcher::fakes {

struct FakeProbe {
  bool installed = true;
  int calls = 0;
  std::function<MpirunProbe()> fn() {
    return [this] {
      ++calls;
      MpirunProbe p;
      if (installed) {
        MpiInfo info;
        info.impl = MpiImpl::OpenMpi;
        info.version_line = "mpirun (Open MPI) 4.1.4";
        p.info = info;
      } else {
        p.problem = "no mpirun on PATH";
      }
      return p;
    };
  }
};

}  // namespace hvd::launcher::fakes
