#include <nlohmann/json.hpp>

#include "../test_util.h"
#include "hvd/launcher/plan/worker_env.h"

using namespace hvd::launcher;
using hvd_test::invalid_message;
using hvd_test::parse_ok;
using hvd_test::plan_of;

TEST_CASE("plan: default host is localhost with -np slots", "[plan]") {
  auto o = parse_ok({"-np", "3", "python", "t.py"});
  auto plan = plan_of(o, {{"PATH", "/bin"}}, "/work");
  REQUIRE(plan.hosts.size() == 1);
  CHECK(plan.hosts[0].name == "localhost");
  CHECK(plan.hosts[0].slots == 3);
  REQUIRE(plan.workers.size() == 3);
  for (int r = 0; r < 3; ++r) {
    const auto& w = plan.workers[static_cast<size_t>(r)];
    CHECK(w.slot.rank == r);
    CHECK(w.argv == std::vector<std::string>{"python", "t.py"});
    CHECK(w.cwd == "/work");
    CHECK(w.env.at("PATH") == "/bin");
    CHECK(w.env.at("HOROVOD_RANK") == std::to_string(r));
    CHECK(w.env.at("HOROVOD_SIZE") == "3");
  }
}

TEST_CASE("plan: hosts from -H and hostfile - unused hosts are left out", "[plan]") {
  auto o = parse_ok({"-np", "3", "-H", "a:2,b:2,c:2", "cmd"});
  auto plan = plan_of(o, {}, "/");
  REQUIRE(plan.hosts.size() == 2);
  CHECK(plan.hosts[1].name == "b");
  CHECK(plan.workers[2].slot.hostname == "b");
  CHECK(plan.workers[2].env.at("HOROVOD_HOSTNAME") == "b");

  hvd_test::TempFile hf("# two nodes\nn1 slots=1\nn2 slots=1\n");
  auto o2 = parse_ok({"-np", "2", "--hostfile", hf.path(), "cmd"});
  auto plan2 = plan_of(o2, {}, "/");
  CHECK(plan2.workers[1].slot.hostname == "n2");
}

TEST_CASE("plan: make_plan places ranks on the HostSpecs it is given, never on text", "[plan]") {
  auto o = parse_ok({"-np", "3", "cmd"});  // no -H: the hosts below decide
  auto plan = make_plan(o, {HostSpec{"x", 1}, HostSpec{"y", 2}}, {}, "/");
  REQUIRE(plan.hosts.size() == 2);
  CHECK(plan.workers[0].slot.hostname == "x");
  CHECK(plan.workers[2].slot.hostname == "y");
  CHECK(invalid_message([&] { make_plan(o, {HostSpec{"x", 1}}, {}, "/"); }) == "-np 3 but only 1 slot on 1 host (x:1)");
}

TEST_CASE("plan: the plan groups its ranks by host once, index for index with its hosts", "[plan]") {
  auto o = parse_ok({"-np", "5", "cmd"});
  auto plan = make_plan(o, {HostSpec{"a", 2}, HostSpec{"unused", 0}, HostSpec{"b", 3}, HostSpec{"c", 4}}, {}, "/");
  REQUIRE(plan.hosts.size() == 2);  // "unused" has no slot, c gets no rank
  REQUIRE(plan.host_ranks.size() == plan.hosts.size());
  CHECK(plan.hosts[0].name == "a");
  CHECK(plan.host_ranks[0] == std::vector<int>{0, 1});
  CHECK(plan.hosts[1].name == "b");
  CHECK(plan.host_ranks[1] == std::vector<int>{2, 3, 4});
  for (std::size_t i = 0; i < plan.hosts.size(); ++i) {
    for (const int r : plan.host_ranks[i]) CHECK(plan.workers.at(static_cast<std::size_t>(r)).slot.hostname == plan.hosts[i].name);
  }

  // mpirun mode past the slots: ranks go round the hosts again, and each
  // host's list still holds exactly its ranks, ascending.
  auto o2 = parse_ok({"-np", "5", "cmd"});
  auto round = make_plan(o2, {HostSpec{"a", 1}, HostSpec{"b", 1}}, {}, "/", SlotCheck::Mpirun);
  REQUIRE(round.host_ranks.size() == 2);
  CHECK(round.host_ranks[0] == std::vector<int>{0, 2, 4});
  CHECK(round.host_ranks[1] == std::vector<int>{1, 3});
}

TEST_CASE("plan: usage problems surface as one-line InvalidArgument", "[plan]") {
  CHECK(invalid_message([] {
          plan_of(parse_ok({"-np", "5", "-H", "a:2,b:2", "cmd"}), {}, "/");
        }) == "-np 5 but only 4 slots on 2 hosts (a:2, b:2)");
  CHECK(invalid_message([] {
          plan_of(parse_ok({"-np", "2", "-H", "a:x", "cmd"}), {}, "/");
        }) == "'a:x': slot count 'x' is not a number");
  CHECK(invalid_message([] {
          plan_of(parse_ok({"-np", "2", "--hostfile", "/nonexistent/hf", "cmd"}), {}, "/");
        }) == "cannot read hostfile '/nonexistent/hf': No such file or directory");
}

TEST_CASE("plan: the real environment and working directory are used by default", "[plan]") {
  setenv("HVD_PLAN_TEST_VAR", "a.b\nc", 1);
  const auto o = parse_ok({"-np", "1", "cmd"});
  auto plan = make_plan(o, hvd_test::hosts_of(o));
  CHECK(plan.workers[0].env.at("HVD_PLAN_TEST_VAR") == "a.b\nc");
  char buf[4096];
  REQUIRE(getcwd(buf, sizeof(buf)) != nullptr);
  CHECK(plan.workers[0].cwd == buf);
  unsetenv("HVD_PLAN_TEST_VAR");
}

TEST_CASE("dry run: json parses back and never shows secrets or the inherited env", "[plan][dryrun]") {
  auto o = parse_ok(
      {"-np", "3", "-H", "a:2,b:1", "-x", "MY_TOKEN=abc", "-x", "VISIBLE=1", "--dry-run=json", "python", "it's.py"});
  auto plan = plan_of(o, {{"HOME", "/root"}, {"API_PASSWORD", "pw"}}, "/w");
  auto j = nlohmann::json::parse(render_dry_run(plan, o, DryRunFormat::Json));
  CHECK(j["np"] == 3);
  REQUIRE(j["hosts"].size() == 2);
  CHECK(j["hosts"][0]["name"] == "a");
  CHECK(j["hosts"][0]["slots"] == 2);
  REQUIRE(j["workers"].size() == 3);
  const auto& w2 = j["workers"][2];
  CHECK(w2["rank"] == 2);
  CHECK(w2["host"] == "b");
  CHECK(w2["local_rank"] == 0);
  CHECK(w2["local_size"] == 1);
  CHECK(w2["cross_rank"] == 1);
  CHECK(w2["cross_size"] == 2);
  CHECK(w2["command"] == nlohmann::json::array({"python", "it's.py"}));
  CHECK(w2["cwd"] == "/w");
  CHECK(w2["env"]["HOROVOD_RANK"] == "2");
  CHECK(w2["env"]["VISIBLE"] == "1");
  CHECK(w2["env"]["MY_TOKEN"] == "<hidden>");
  CHECK_FALSE(w2["env"].contains("HOME"));
  CHECK_FALSE(w2["env"].contains("API_PASSWORD"));
  // Even after run_job adds the secret, a rendering would not show it.
  add_rendezvous_env(plan, "127.0.0.1", 1234, "topsecret");
  std::string text = render_dry_run(plan, o, DryRunFormat::Text) + render_dry_run(plan, o, DryRunFormat::Json);
  CHECK(text.find("topsecret") == std::string::npos);
  CHECK(text.find("abc") == std::string::npos);
}
