// Who starts the workers (job/launch_mode.h): --mpi, --mpi-args with and
// without an installed mpirun, --gloo, elastic mode, --binding-args. The
// mpirun probe is a fake, so no test needs MPI.
#include "hvd/common/error.h"
#include "hvd/launcher/job/launch_mode.h"

#include <catch2/catch.hpp>

#include "../fakes/fake_mpirun_probe.h"

using namespace hvd::launcher;

namespace {

constexpr const char* kGuideArgs =
    "--mca orte_keep_fqdn_hostnames t --allow-run-as-root --display-map --tag-output --timestamp-output";

using hvd::launcher::fakes::FakeProbe;

Options static_job(const char* mpi_args) {
  Options o;
  o.num_proc = 2;
  o.command = {"python", "train.py"};
  if (mpi_args) o.mpi_args = mpi_args;
  return o;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("launch mode: no --mpi-args, no --mpi: hvdrun starts the workers and says nothing", "[job][launch_mode]") {
  FakeProbe probe;
  auto d = decide_launch(static_job(nullptr), probe.fn());
  CHECK(d.mode == LaunchMode::Own);
  CHECK(probe.calls == 0);  // no mpirun --version for ordinary jobs
  CHECK(d.info.empty());
  CHECK(d.warnings.empty());
  CHECK_FALSE(d.display_map);
  // Empty --mpi-args ask nothing.
  d = decide_launch(static_job("  "), probe.fn());
  CHECK(d.mode == LaunchMode::Own);
  CHECK(probe.calls == 0);
  CHECK(d.warnings.empty());
}

TEST_CASE("launch mode: --mpi-args with an mpirun installed selects mpirun mode, with one info line",
          "[job][launch_mode]") {
  FakeProbe probe;
  auto d = decide_launch(static_job(kGuideArgs), probe.fn());
  CHECK(d.mode == LaunchMode::Mpirun);
  CHECK(probe.calls == 1);
  REQUIRE(d.mpirun);
  CHECK(d.mpirun->impl == MpiImpl::OpenMpi);
  REQUIRE(d.info.size() == 1);
  CHECK(contains(d.info[0], "--mpi-args given and Open MPI is installed: mpirun starts the workers"));
  CHECK(d.warnings.empty());
  // mpirun gets the words itself: nothing is folded into hvdrun's options.
  CHECK_FALSE(d.display_map);
  CHECK_FALSE(d.options.prefix_output_with_timestamp);
}

TEST_CASE("launch mode: --mpi always means mpirun, with no probe and no message", "[job][launch_mode]") {
  FakeProbe probe;
  Options o = static_job(kGuideArgs);
  o.engine = Engine::Mpi;
  auto d = decide_launch(o, probe.fn());
  CHECK(d.mode == LaunchMode::Mpirun);
  CHECK(probe.calls == 0);  // the job probes when it starts (exit 3 when missing)
  CHECK(d.info.empty());
  CHECK(d.warnings.empty());
}

TEST_CASE("launch mode: --mpi-args without an mpirun: hvdrun applies the output flags, ONE warning names the rest",
          "[job][launch_mode]") {
  FakeProbe probe;
  probe.installed = false;
  auto d = decide_launch(static_job(kGuideArgs), probe.fn());
  CHECK(d.mode == LaunchMode::Own);
  CHECK(d.display_map);
  CHECK(d.options.prefix_output_with_timestamp);
  CHECK(d.info.empty());
  REQUIRE(d.warnings.size() == 1);
  CHECK(d.warnings[0] ==
        "--mpi-args not passed to mpirun: no mpirun on PATH, so hvdrun starts the workers; hvdrun applies "
        "--display-map, --timestamp-output, --tag-output itself; ignored: --mca orte_keep_fqdn_hostnames t");
}

TEST_CASE("launch mode: --gloo keeps hvdrun's spawning without probing", "[job][launch_mode]") {
  FakeProbe probe;
  Options o = static_job("--tag-output -x 'A=b c'");
  o.engine = Engine::Gloo;
  auto d = decide_launch(o, probe.fn());
  CHECK(d.mode == LaunchMode::Own);
  CHECK(probe.calls == 0);
  REQUIRE(d.warnings.size() == 1);
  CHECK(contains(d.warnings[0], "the Gloo controller is chosen (--gloo)"));
  CHECK(contains(d.warnings[0], "hvdrun applies --tag-output itself; ignored: -x 'A=b c'"));
}

TEST_CASE("launch mode: only flags hvdrun applies: one info line, no warning", "[job][launch_mode]") {
  FakeProbe probe;
  probe.installed = false;
  auto d = decide_launch(static_job("--timestamp-output --tag-output"), probe.fn());
  CHECK(d.warnings.empty());
  REQUIRE(d.info.size() == 1);
  CHECK(contains(d.info[0], "hvdrun applies --timestamp-output, --tag-output itself"));
  CHECK(d.options.prefix_output_with_timestamp);
  // --allow-run-as-root alone needs nothing and says nothing.
  d = decide_launch(static_job("--allow-run-as-root"), probe.fn());
  CHECK(d.info.empty());
  CHECK(d.warnings.empty());
}

TEST_CASE("launch mode: elastic jobs never use mpirun, and --display-map is ignored there", "[job][launch_mode]") {
  FakeProbe probe;
  Options o;
  o.num_proc = 2;
  o.elastic.enabled = true;
  o.elastic.host_discovery_script = "./discover.sh";
  o.mpi_args = kGuideArgs;
  auto d = decide_launch(o, probe.fn());
  CHECK(d.mode == LaunchMode::Own);
  CHECK(probe.calls == 0);
  CHECK_FALSE(d.display_map);  // placement is decided per world at run time
  CHECK(d.options.prefix_output_with_timestamp);
  REQUIRE(d.warnings.size() == 1);
  CHECK(contains(d.warnings[0], "elastic jobs start their workers through hvdrun"));
  CHECK(contains(d.warnings[0], "ignored: --display-map --mca orte_keep_fqdn_hostnames t"));
  // Fixed-host fault tolerance (--min-np on -H hosts) is elastic mode too.
  Options fixed = static_job(kGuideArgs);
  fixed.hosts = "localhost:2";
  fixed.elastic.enabled = true;
  fixed.elastic.min_np = 1;
  d = decide_launch(fixed, probe.fn());
  CHECK(d.mode == LaunchMode::Own);
  CHECK(probe.calls == 0);
  REQUIRE(d.warnings.size() == 1);
  CHECK(contains(d.warnings[0], "elastic jobs start their workers through hvdrun"));
}

TEST_CASE("launch mode: --binding-args outside mpirun mode warn once, in mpirun mode not", "[job][launch_mode]") {
  FakeProbe probe;
  Options o = static_job(nullptr);
  o.binding_args = "-bind-to core";
  auto d = decide_launch(o, probe.fn());
  REQUIRE(d.warnings.size() == 1);
  CHECK(contains(d.warnings[0], "--binding-args only applies when mpirun starts the workers"));
  o.engine = Engine::Mpi;
  CHECK(decide_launch(o, probe.fn()).warnings.empty());
  o.engine = Engine::Native;
  o.mpi_args = "--report-bindings";
  d = decide_launch(o, probe.fn());
  CHECK(d.mode == LaunchMode::Mpirun);
  CHECK(d.warnings.empty());
  // Empty binding args ask for nothing.
  Options empty = static_job(nullptr);
  empty.binding_args = "";
  CHECK(decide_launch(empty, probe.fn()).warnings.empty());
}

TEST_CASE("launch mode: an unterminated quote in --mpi-args or --binding-args is a usage error", "[job][launch_mode]") {
  FakeProbe probe;
  CHECK_THROWS_AS(decide_launch(static_job("-x 'open"), probe.fn()), hvd::InvalidArgument);
  Options mpi = static_job(nullptr);
  mpi.engine = Engine::Mpi;
  mpi.binding_args = "--rankfile \"open";
  CHECK_THROWS_WITH(decide_launch(mpi, probe.fn()), Catch::Contains("--binding-args"));
}
