// hvdrun: parse, call the launcher library, map the outcome to an exit code.
#include "hvd/common/error.h"
#include "hvd/launcher/spawn/agent.h"
#include "hvd/launcher/job/launcher.h"
#include "hvd/launcher/options/cli.h"
#include "hvd/launcher/spawn/mpi/mpi_launch.h"

#include <cstdio>
#include <cstring>
#include <exception>

namespace hl = hvd::launcher;

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--agent") == 0) return hl::agent_main(argc, argv);
  try {
    hl::ParseOutcome parsed = hl::parse_command_line(argc, argv);
    if (!parsed.options) {
      std::fputs(parsed.message.c_str(), parsed.message_to_stdout ? stdout : stderr);
      return parsed.exit_code;
    }
    const hl::Options& options = *parsed.options;
    if (options.check_build) {
      std::fputs(hl::render_check_build().c_str(), stdout);
      return hl::exit_code::kOk;
    }
    if (options.elastic.host_discovery_script) {
      if (options.dry_run != hl::DryRunFormat::None) {
        std::fputs("hvdrun: error: --dry-run does not apply to elastic jobs: placement is decided at run time "
                   "from the discovery script\n", stderr);
        return hl::exit_code::kUsage;
      }
      return hl::run_elastic_job(options);
    }
    hl::JobPlan plan = hl::make_plan(options);
    if (options.engine == hl::Engine::Mpi) return hl::run_mpi_mode(options, plan);
    if (options.dry_run != hl::DryRunFormat::None) {
      std::fputs(hl::render_dry_run(plan, options, options.dry_run).c_str(), stdout);
      return hl::exit_code::kOk;
    }
    return hl::run_job(options, plan);
  } catch (const hvd::InvalidArgument& e) {
    std::fprintf(stderr, "hvdrun: error: %s\n", e.what());
    return hl::exit_code::kUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hvdrun: internal error: %s\n", e.what());
    return hl::exit_code::kInternal;
  }
}
