// Every --dry-run is rendered from a DryRunReport in one place
// (job/dry_run_report.cpp): the platform block goes with any body, the
// elastic look and the OCI WORKER's registration as they always printed.
#include "hvd/launcher/job/dry_run_report.h"
#include "hvd/launcher/process/report.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "../fakes/scripted_host_source.h"

using namespace hvd::launcher;

namespace {

platform::PlatformDescription slurm() {
  platform::PlatformDescription p;
  p.name = "slurm";
  p.hosts = {{"n1", 1}, {"n2", 1}};
  p.this_host = "n1";
  p.leader = "n1";
  p.evidence = {"SLURM_JOB_ID=1"};
  return p;
}

ElasticLook look() {
  fakes::ScriptedHostSource source({{"h1", 2}, {"h2", 1}});
  return look_once(source, 4);
}

}  // namespace

TEST_CASE("dry run report: an elastic look, in text and JSON", "[dry_run]") {
  DryRunReport r;
  r.elastic = look();
  CHECK(render_dry_run_report(r, DryRunFormat::Text) ==
        "# elastic job: hosts from scripted hosts\n"
        "hosts: h1:2, h2:1\n"
        "slots: 3 (-np 4: not enough yet, the job would wait)\n");
  const auto j = nlohmann::json::parse(render_dry_run_report(r, DryRunFormat::Json));
  CHECK(j["source"] == "scripted hosts");
  CHECK(j["hosts"] == nlohmann::json::array({"h1:2", "h2:1"}));
  CHECK(j["slots"] == 3);
  CHECK(j["np"] == 4);
  CHECK(j["pods"].empty());
  CHECK_FALSE(j.contains("platform"));
}

TEST_CASE("dry run report: a failed look is exit 3 with the source's reason", "[dry_run]") {
  fakes::ScriptedHostSource source({});
  source.set_error("discovery script exited with code 1");
  try {
    look_once(source, 1);
    FAIL("a failed look was not an error");
  } catch (const JobError& e) {
    CHECK(e.code() == exit_code::kLaunch);
    CHECK(std::string(e.what()) == "discovery script exited with code 1");
  }
}

TEST_CASE("dry run report: the platform block goes with every body, first in text, an object in JSON", "[dry_run]") {
  const auto p = slurm();
  DryRunReport elastic;
  elastic.platform = &p;
  elastic.elastic = look();
  const std::string text = render_dry_run_report(elastic, DryRunFormat::Text);
  CHECK(text.rfind(platform::render_platform(p), 0) == 0);
  CHECK(text.find("# elastic job: hosts from scripted hosts\n") != std::string::npos);
  auto j = nlohmann::json::parse(render_dry_run_report(elastic, DryRunFormat::Json));
  CHECK(j["platform"]["name"] == "slurm");
  CHECK(j["slots"] == 3);
  DryRunReport mpirun;
  mpirun.platform = &p;
  mpirun.mpirun = "{\"command\": [\"mpirun\"]}\n";
  j = nlohmann::json::parse(render_dry_run_report(mpirun, DryRunFormat::Json));
  CHECK(j["command"] == nlohmann::json::array({"mpirun"}));
  CHECK(j["platform"]["leader"] == "n1");
  DryRunReport alone;
  alone.platform = &p;
  j = nlohmann::json::parse(render_dry_run_report(alone, DryRunFormat::Json));
  CHECK(j.size() == 1);
  CHECK(j["platform"]["this_host"] == "n1");
  CHECK(render_dry_run_report(alone, DryRunFormat::Text) == platform::render_platform(p));
}

TEST_CASE("dry run report: an OCI WORKER's registration", "[dry_run]") {
  DryRunReport r;
  r.oci_header = "platform: oci\n";
  r.oci_worker = OciWorkerDryRun{"10.0.0.5", 2, "/work/x"};
  CHECK(render_dry_run_report(r, DryRunFormat::Text) == "platform: oci\nwould register 10.0.0.5:2 in /work/x\n");
  CHECK(
      render_dry_run_report(r, DryRunFormat::Json) ==
      "{\"platform\": \"oci\", \"mode\": \"WORKER\", \"address\": \"10.0.0.5\", \"slots\": 2, \"dir\": \"/work/x\"}\n");
  r.oci_worker->dir = "/work/a \"quoted\" dir";  // escaped, so the line stays JSON
  CHECK(nlohmann::json::parse(render_dry_run_report(r, DryRunFormat::Json))["dir"] == "/work/a \"quoted\" dir");
}
