// hvdrun's whole main(): parse, pick the mode, map the outcome to an exit
// code (docs/exit-codes.md). apps/hvdrun/main.cpp only calls hvdrun_main.
#include "hvd/common/error.h"
#include "hvd/common/text.h"
#include "hvd/launcher/discovery/choose.h"
#include "hvd/launcher/discovery/platform/platform.h"
#include "hvd/launcher/job/launch_mode.h"
#include "hvd/launcher/job/launcher.h"
#include "hvd/launcher/job/platform_follower.h"
#include "hvd/launcher/job/platform_leader.h"
#include "hvd/launcher/plan/worker_env.h"
#include "hvd/launcher/spawn/agent.h"
#include "hvd/launcher/spawn/local_spawner.h"
#include "hvd/launcher/spawn/mpi/mpi_launch.h"
#include "hvd/launcher/spawn/spawner_factory.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>

namespace hvd::launcher {

int exit_code_for(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const InvalidArgument& e) {
    // One line whatever outside text the message quotes (docs/security.md).
    std::fprintf(stderr, "hvdrun: error: %s\n", one_line(e.what()).c_str());
    return exit_code::kUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hvdrun: internal error: %s\n", e.what());
    return exit_code::kInternal;
  } catch (...) {
    std::fprintf(stderr, "hvdrun: internal error: unknown exception\n");
    return exit_code::kInternal;
  }
}

int hvdrun_main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--agent") == 0) return agent_main(argc, argv);
  // Internal: what a platform job's leader runs on its follower hosts (docs/platforms.md#followers).
  if (argc > 1 && std::strcmp(argv[1], "--follower-attach") == 0) return platform::follower_attach_main(argc, argv);
  if (argc > 1 && std::strcmp(argv[1], "--follower-status") == 0) return platform::follower_status_main(argc, argv);
  try {
    // OCI Data Science runs (OCI__MODE) add flags of their own: decided before parsing.
    if (auto code = run_oci_if_detected(argc, argv)) return *code;
    ParseOutcome parsed = parse_command_line(argc, argv);
    if (!parsed.options) {
      std::fputs(parsed.message.c_str(), parsed.message_to_stdout ? stdout : stderr);
      return parsed.exit_code;
    }
    if (parsed.options->check_build) {
      std::fputs(render_check_build().c_str(), stdout);
      return exit_code::kOk;
    }
    // Where the hosts come from: -H, --hostfile, a discovery script, the
    // Kubernetes pods, or a platform's hosts (--hosts-from; docs/platforms.md).
    const Environment platform_ctx = Environment::current();
    HostSourceChoice source = choose_host_source(*parsed.options, platform_ctx);
    parsed.options = std::move(source.options);
    // A platform machine that gets no ranks (Vertex's reduction servers and
    // evaluators): one line, exit 0, nothing started; its dry run shows only
    // the platform (no placement of its own) (docs/platforms.md#vertex-ai).
    if (source.platform && source.platform->unranked) {
      if (parsed.options->dry_run == DryRunFormat::Json) {
        nlohmann::json j;
        j["platform"] = nlohmann::json::parse(platform::render_platform_json(*source.platform));
        std::fputs((j.dump(2) + "\n").c_str(), stdout);
      } else if (parsed.options->dry_run == DryRunFormat::Text) {
        std::fputs(platform::render_platform(*source.platform).c_str(), stdout);
      } else {
        spdlog::warn("{}", source.platform->unranked_reason);
      }
      return exit_code::kOk;
    }
    for (const auto& line : source.info) spdlog::info("{}", line);
    for (const auto& line : source.warnings) spdlog::warn("{}", line);
    if (source.follower && parsed.options->dry_run == DryRunFormat::None) {
      // A machine no leader attaches to (Slurm outside an srun step, LSF's
      // compute hosts) would only wait for --start-timeout: one line now.
      std::string why;
      if (!platform::followers_expected(*source.platform, platform_ctx, &why)) {
        std::fprintf(stderr,
                     "hvdrun: error: this machine (%s) is not the %s job's leader, and no leader attaches to it: %s\n",
                     source.platform->this_host.c_str(), source.platform->name.c_str(), why.c_str());
        return exit_code::kPlatformFollower;
      }
      return platform::follow_leader(*parsed.options, *source.platform, platform_ctx);
    }
    // --dry-run of an elastic job looks once and shows what its host source
    // finds (run_elastic_job).
    const bool elastic = parsed.options->elastic.enabled;
    const LaunchDecision launch = decide_launch(*parsed.options, probe_installed_mpirun);
    for (const auto& line : launch.info) spdlog::info("{}", line);
    for (const auto& line : launch.warnings) spdlog::warn("{}", line);
    const Options& options = launch.options;
    for (const auto& line : ineffective_setting_warnings(options, current_environment())) spdlog::warn("{}", line);
    // The plan first: a usage error is reported before any follower is
    // attached. A static job's hosts are its source's first look (a fixed
    // list: -H, --hostfile, localhost:np or a platform's hosts).
    JobPlan plan;
    if (!elastic) {
      const DiscoveryResult hosts = source.source->discover();
      if (!hosts.ok()) throw InvalidArgument(*hosts.error);
      plan = make_plan(options, hosts.hosts, launch.mode == LaunchMode::Mpirun ? SlotCheck::Mpirun : SlotCheck::Hvdrun);
    }
    // A platform job's leader: attached to its followers while the job runs
    // and reports the job's status to them at the end.
    DefaultSpawnerFactory leader_spawners(options);
    std::unique_ptr<platform::PlatformLeader> leader;
    if (source.platform && options.dry_run == DryRunFormat::None) {
      std::string why;
      auto followers = platform::follower_hosts(*source.platform, platform_ctx, &why);
      if (!why.empty()) spdlog::info("{}: {}", source.platform->name, why);
      if (!followers.empty()) {
        leader = std::make_unique<platform::PlatformLeader>(leader_spawners, std::move(followers),
                                                            options.start_timeout, self_executable());
        if (int code = leader->attach()) return code;
      }
    }
    auto led = [&leader](int code) {
      if (leader) leader->report(code);
      return code;
    };
    if (elastic) return led(run_elastic_job(options, std::move(source.source)));
    if (launch.mode == LaunchMode::Mpirun && source.platform && options.dry_run == DryRunFormat::Text) {
      std::fputs(platform::render_platform(*source.platform).c_str(), stdout);
    }
    if (launch.mode == LaunchMode::Mpirun)
      return led(run_mpi_mode(options, plan, launch.mpirun ? &*launch.mpirun : nullptr));
    if (options.dry_run != DryRunFormat::None) {
      std::string text = render_dry_run(plan, options, options.dry_run);
      if (source.platform && options.dry_run == DryRunFormat::Json) {
        nlohmann::json j = nlohmann::json::parse(text);
        j["platform"] = nlohmann::json::parse(platform::render_platform_json(*source.platform));
        text = j.dump(2) + "\n";
      } else if (source.platform) {
        text = platform::render_platform(*source.platform) + text;
      }
      std::fputs(text.c_str(), stdout);
      return exit_code::kOk;
    }
    if (launch.display_map) {
      // Before any worker writes: the placement, as mpirun --display-map shows its map.
      std::fputs(render_placement_table(plan).c_str(), stdout);
      std::fflush(stdout);
    }
    return led(run_job(options, plan));
  } catch (...) {
    return exit_code_for(std::current_exception());
  }
}

}  // namespace hvd::launcher
