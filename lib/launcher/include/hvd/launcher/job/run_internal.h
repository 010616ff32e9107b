#pragma once
/// Internals shared by the "run" half of the launcher (agent, local spawner,
/// run_job). Not part of the library's public surface.
#include "hvd/launcher/options/options.h"
#include "hvd/launcher/spawn/spawner.h"

#include <memory>
#include <string>
#include <vector>

namespace hvd::launcher {

/// The spawner for one host: a local spawner (agents forked here) when
/// `local`, else an SSH spawner configured from the SSH options.
std::unique_ptr<Spawner> make_spawner_for(const Options& options, bool local);

class OutputRouter;
class EventLog;
/// --events-file opened (null when not given, or after printing
/// "hvdrun: error: cannot open --events-file ..." when it cannot be opened).
std::unique_ptr<EventLog> open_events(const Options& options);

/// The job's output router from --output-filename and
/// --prefix-output-with-timestamp. An unusable directory prints
/// "hvdrun: error: --output-filename: ..." and returns null (exit 2).
std::unique_ptr<OutputRouter> open_output(const Options& options, int num_workers, bool lazy_worker_dirs);

}  // namespace hvd::launcher
