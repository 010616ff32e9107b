#pragma once
/// The worker side of the launcher<->worker contract (hvd/common/job_env.h
/// names the variables; docs/collective.md lists their meaning): Settings
/// and a Context from the environment hvdrun sets.
///
/// Its own unit (src/init_env.cpp) because two others build on it: the
/// process-wide API (hvd.h, src/hvd.cpp: hvd::init) and elastic membership
/// (elastic_member.h: member_options_from_env). It uses neither of them, so
/// the dependencies go one way: hvd.cpp -> elastic_member.cpp -> init_env.cpp,
/// and hvd.cpp -> init_env.cpp.
#include "hvd/collective/context.h"

#include <memory>
#include <string>

namespace hvd::collective {

/// Reads the environment hvdrun sets:
/// all of HOROVOD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE, _CROSS_RANK,
/// _CROSS_SIZE present -> that job; none present -> a job of size 1; some
/// present or any garbage -> hvd::InvalidArgument naming the variable.
Settings settings_from_env();

/// settings_from_env(), then the store from HOROVOD_GLOO_RENDEZVOUS_ADDR/
/// _PORT (size > 1) and Context::create. Without the placement variables,
/// an MPI launcher's (mpi_env.h) if present. `comm_prefix` names the
/// communicator generation in the store (every rank must pass the same).
std::unique_ptr<Context> context_from_env(const std::string& comm_prefix = "gen0/");

}  // namespace hvd::collective
