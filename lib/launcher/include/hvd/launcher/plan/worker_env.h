#pragma once
/// The environment each worker starts with.
///
/// Workers get the launcher's environment minus what must not cross hosts
/// (the host's identity, the SSH session, the X display, shell internals,
/// exported bash functions) and minus loader-injection variables such as
/// LD_PRELOAD unless --forward-loader-env; then the tuning HOROVOD_*
/// variables from the flags/config file, -x exports, and finally each rank's
/// HOROVOD_RANK/SIZE/LOCAL_*/CROSS_*/HOSTNAME. The environment is carried to
/// workers as JSON (agent.h), so names with dots and multi-line values need
/// no quoting and arrive intact.
///
/// The rendezvous variables (store address/port, job secret) are not part of
/// the plan: JobServices, which owns the store, adds them once the store is
/// listening, so a dry run can never print a secret.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hvd/launcher/options/options.h"
#include "hvd/launcher/plan/job_plan.h"
#include "hvd/launcher/process/environment.h"  // EnvMap

namespace hvd::launcher {

/// False for variables that must not be copied from the launcher to workers.
/// Loader-injection variables (LD_PRELOAD, LD_AUDIT, ...) are forwarded only
/// when `forward_loader_env`.
bool is_forwardable(const std::string& name, bool forward_loader_env);

/// The HOROVOD_* (and NCCL_*) variables that the tuning flags and config file
/// ask for, formatted as horovodrun formats them (fusion threshold in bytes,
/// booleans as 1/0). Unset options produce no variable.
EnvMap tuning_env(const Options& options);

/// One line per feature that the tuning flags, their config keys or
/// HOROVOD_* variables the user sets for workers (hvdrun's environment, -x)
/// ask for and the collective library does not have yet: autotune,
/// timeline, hierarchical allreduce/allgather, torus allreduce, more than
/// one NCCL stream. Each line names what asked ("--autotune
/// (autotune.enabled)", "HOROVOD_TIMELINE=t.json") and why it has no
/// effect. The variables are still exported (unmodified Horovod workers
/// read them). Empty when nothing such is asked. Pure.
std::vector<std::string> ineffective_setting_warnings(const Options& options, const EnvMap& launcher_env);

/// Everything every rank gets: filtered launcher environment, then
/// PYTHONUNBUFFERED, HOROVOD_START_TIMEOUT, HOROVOD_CONTROLLER,
/// HOROVOD_CPU_OPERATIONS, HOROVOD_GLOO_IFACE (when --network-interface is
/// given), tuning variables, then -x exports in order. `-x NAME` whose NAME
/// is not in `launcher_env` logs a warning and is skipped. Malformed -x
/// entries throw InvalidArgument.
EnvMap build_common_env(const EnvMap& launcher_env, const Options& options);

/// `common` plus this rank's HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK,
/// HOROVOD_LOCAL_SIZE, HOROVOD_CROSS_RANK, HOROVOD_CROSS_SIZE,
/// HOROVOD_HOSTNAME.
EnvMap add_slot_env(EnvMap common, const SlotAssignment& slot, std::size_t total);

/// build_common_env + add_slot_env for one rank (convenience for callers
/// that plan a single worker).
EnvMap build_worker_env(const EnvMap& launcher_env, const SlotAssignment& slot, const Options& options,
                        std::size_t total);

/// HOROVOD_GLOO_RENDEZVOUS_ADDR, HOROVOD_GLOO_RENDEZVOUS_PORT and the job
/// secret (hvd::kSecretEnv): what a worker needs to reach the store.
EnvMap rendezvous_env(const std::string& addr, uint16_t port, const std::string& secret);

/// Adds rendezvous_env() to every worker of `plan` (JobServices::add_rendezvous_env).
void add_rendezvous_env(JobPlan& plan, const std::string& addr, uint16_t port, const std::string& secret);

/// True for variable names whose values must never be printed (the job
/// secret, anything named like a password, token or key).
bool is_secret_name(const std::string& name);

}  // namespace hvd::launcher
