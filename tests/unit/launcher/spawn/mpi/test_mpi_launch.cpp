// The pure half of hvdrun --mpi: implementation detection, mpirun command
// lines for Open MPI / MPICH / Intel MPI, shell splitting, exported env.
#include "hvd/common/error.h"
#include "hvd/launcher/spawn/mpi/mpi_launch.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>

#include <algorithm>

using namespace hvd::launcher;

namespace {

JobPlan plan_for(const std::vector<std::pair<std::string, int>>& hosts, int np) {
  JobPlan plan;
  for (const auto& [name, slots] : hosts) plan.hosts.push_back({name, slots});
  int rank = 0;
  for (const auto& [name, slots] : hosts) {
    for (int s = 0; s < slots && rank < np; ++s, ++rank) {
      WorkerSpec w;
      w.slot.hostname = name;
      w.slot.rank = rank;
      w.slot.local_rank = s;
      plan.workers.push_back(w);
    }
  }
  return plan;
}

/// What make_plan gives under mpirun for more ranks than slots: the extra
/// ranks go round the hosts again.
JobPlan make_plan_beyond_slots(const std::vector<std::pair<std::string, int>>& hosts, int np) {
  JobPlan plan = plan_for(hosts, np);
  for (int rank = static_cast<int>(plan.workers.size()); rank < np; ++rank) {
    WorkerSpec w;
    w.slot.hostname = hosts[static_cast<std::size_t>(rank) % hosts.size()].first;
    w.slot.rank = rank;
    plan.workers.push_back(w);
  }
  return plan;
}

Options basic_options() {
  Options o;
  o.engine = Engine::Mpi;
  o.command = {"python3", "train.py", "--lr", "0.1"};
  return o;
}

MpiInfo info_for(MpiImpl impl) {
  MpiInfo i;
  i.impl = impl;
  i.version_line = "test";
  return i;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& w : v) s += (s.empty() ? "" : " ") + w;
  return s;
}

bool has_seq(const std::vector<std::string>& v, const std::vector<std::string>& seq) {
  return std::search(v.begin(), v.end(), seq.begin(), seq.end()) != v.end();
}

}  // namespace

TEST_CASE("mpi: detect_mpi_impl classifies version outputs", "[mpi]") {
  CHECK(detect_mpi_impl("mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n") ==
        MpiImpl::OpenMpi);
  CHECK(detect_mpi_impl("mpirun (OpenRTE) 3.1.0\n") == MpiImpl::OpenMpi);
  CHECK(detect_mpi_impl("HYDRA build details:\n    Version:    4.0.2\n") == MpiImpl::Mpich);
  CHECK(detect_mpi_impl("Configure options: 'MPICHLIB_CFLAGS=-g'") == MpiImpl::Mpich);
  CHECK(detect_mpi_impl("Intel(R) MPI Library for Linux* OS, Version 2021.6 Build 20220227\n") == MpiImpl::IntelMpi);
  CHECK(detect_mpi_impl("mpirun (IBM Spectrum MPI) 10.3.0.0\n") == MpiImpl::Unknown);
  CHECK(detect_mpi_impl("") == MpiImpl::Unknown);
  CHECK(detect_mpi_impl("srun: unrecognized option") == MpiImpl::Unknown);
}

TEST_CASE("mpi: Open MPI command line has horovodrun's defaults", "[mpi]") {
  Options o = basic_options();
  JobPlan plan = plan_for({{"h1", 2}, {"h2", 2}}, 4);
  auto cmd = build_mpirun_command(info_for(MpiImpl::OpenMpi), o, plan, {{"HOROVOD_X", "1"}, {"A_VAR", "v"}}, false);
  CHECK(joined(cmd) ==
        "mpirun --tag-output -np 4 -H h1:2,h2:2 -bind-to none -map-by slot -mca pml ob1 -mca btl ^openib "
        "-x A_VAR -x HOROVOD_X python3 train.py --lr 0.1");
  auto root = build_mpirun_command(info_for(MpiImpl::OpenMpi), o, plan, {}, true);
  CHECK(root.at(1) == "--allow-run-as-root");
}

TEST_CASE("mpi: Open MPI: ssh, interfaces, output, mpi-args", "[mpi]") {
  Options o = basic_options();
  o.ssh_port = 2222;
  o.ssh_identity_file = "/keys/id rsa";
  o.network_interfaces = {"eth0", "eth1"};
  o.output_filename = "/tmp/out";
  o.prefix_output_with_timestamp = true;
  o.mpi_args = "--mca btl_tcp_links 2 -x 'FOO=a b'";
  auto cmd = build_mpirun_command(info_for(MpiImpl::OpenMpi), o, plan_for({{"h1", 1}}, 1), {}, false);
  CHECK(has_seq(cmd, {"-mca", "plm_rsh_args", "-p 2222 -i '/keys/id rsa'"}));
  CHECK(has_seq(cmd, {"-mca", "btl_tcp_if_include", "eth0,eth1"}));
  CHECK(has_seq(cmd, {"--output-filename", "/tmp/out"}));
  CHECK(has_seq(cmd, {"--timestamp-output"}));
  CHECK(has_seq(cmd, {"--mca", "btl_tcp_links", "2", "-x", "FOO=a b", "python3"}));
}

TEST_CASE("mpi: Open MPI on 64+ hosts disables tree spawn", "[mpi]") {
  std::vector<std::pair<std::string, int>> hosts;
  for (int i = 0; i < 64; ++i) hosts.emplace_back("n" + std::to_string(i), 1);
  auto cmd = build_mpirun_command(info_for(MpiImpl::OpenMpi), basic_options(), plan_for(hosts, 64), {}, false);
  CHECK(has_seq(cmd, {"-mca", "plm_rsh_no_tree_spawn", "true", "-mca", "plm_rsh_num_concurrent", "64"}));
  auto small = build_mpirun_command(info_for(MpiImpl::OpenMpi), basic_options(), plan_for({{"a", 1}}, 1), {}, false);
  CHECK_FALSE(has_seq(small, {"plm_rsh_no_tree_spawn"}));
}

TEST_CASE("mpi: only hosts that get ranks are listed, with the ranks they get", "[mpi]") {
  auto cmd =
      build_mpirun_command(info_for(MpiImpl::OpenMpi), basic_options(), plan_for({{"a", 4}, {"b", 4}}, 5), {}, false);
  CHECK(has_seq(cmd, {"-np", "5", "-H", "a:4,b:1"}));
}

TEST_CASE("mpi: more ranks than slots hand the slots as given to mpirun (--oversubscribe decides)", "[mpi]") {
  // The plan of `-np 3 -H a:2 --mpi-args --oversubscribe` (SlotCheck::Mpirun).
  Options o = basic_options();
  o.mpi_args = "--oversubscribe";
  auto cmd = build_mpirun_command(info_for(MpiImpl::OpenMpi), o, make_plan_beyond_slots({{"a", 2}}, 3), {}, false);
  CHECK(has_seq(cmd, {"-np", "3", "-H", "a:2"}));
  CHECK(std::find(cmd.begin(), cmd.end(), "--oversubscribe") != cmd.end());
}

TEST_CASE("mpi: MPICH uses Hydra flags and -genvlist", "[mpi]") {
  Options o = basic_options();
  o.ssh_port = 2222;
  o.network_interfaces = {"eth0"};
  auto cmd = build_mpirun_command(info_for(MpiImpl::Mpich), o, plan_for({{"h1", 2}, {"h2", 1}}, 3),
                                  {{"HVDRUN_SECRET", "s3cr3t"}, {"B", "2"}}, true);
  // MPICH's Hydra has no -bootstrap-exec-args (Intel MPI's): the ssh words
  // go in mpirun's HYDRA_LAUNCHER_EXTRA_ARGS, not on the command line.
  CHECK(joined(cmd) ==
        "mpirun -l -np 3 -hosts h1:2,h2:1 -bind-to none -map-by slot -launcher ssh "
        "-iface eth0 -genvlist B,HVDRUN_SECRET python3 train.py --lr 0.1");
  o.ssh_identity_file = "/home/u/.ssh/id_ed25519";
  CHECK(mpirun_launcher_env(info_for(MpiImpl::Mpich), o) ==
        std::map<std::string, std::string>{{"HYDRA_LAUNCHER_EXTRA_ARGS", "-p 2222 -i /home/u/.ssh/id_ed25519"}});
  CHECK(mpirun_launcher_env(info_for(MpiImpl::IntelMpi), o).empty());
  CHECK(mpirun_launcher_env(info_for(MpiImpl::OpenMpi), o).empty());
  CHECK(mpirun_launcher_env(info_for(MpiImpl::Mpich), basic_options()).empty());
  // A value hvdrun inherits is kept, before -p/-i.
  ::setenv("HYDRA_LAUNCHER_EXTRA_ARGS", "-o StrictHostKeyChecking=no", 1);
  CHECK(mpirun_launcher_env(info_for(MpiImpl::Mpich), o) ==
        std::map<std::string, std::string>{
            {"HYDRA_LAUNCHER_EXTRA_ARGS", "-o StrictHostKeyChecking=no -p 2222 -i /home/u/.ssh/id_ed25519"}});
  ::unsetenv("HYDRA_LAUNCHER_EXTRA_ARGS");
  // Hydra splits that variable at blanks: a path with one is refused.
  o.ssh_identity_file = "/home/u/my keys/id";
  CHECK_THROWS_WITH(mpirun_launcher_env(info_for(MpiImpl::Mpich), o),
                    Catch::Contains("must not contain one"));
}

TEST_CASE("mpi: MPICH gets -localhost with the store's address when ranks are on other hosts", "[mpi]") {
  const JobPlan plan = plan_for({{"h1", 1}, {"h2", 1}}, 2);
  auto line = [&](const std::string& addr, const Options& o) {
    return joined(build_mpirun_command(info_for(MpiImpl::Mpich), o, plan, {{"HOROVOD_GLOO_RENDEZVOUS_ADDR", addr}},
                                       false));
  };
  CHECK(line("198.18.0.1", basic_options()).find("-map-by slot -localhost 198.18.0.1 -genvlist") != std::string::npos);
  CHECK(line("127.0.0.1", basic_options()).find("-localhost") == std::string::npos);  // every rank here
  Options own = basic_options();
  own.mpi_args = "-localhost node0";
  CHECK(line("198.18.0.1", own).find("-localhost 198.18.0.1") == std::string::npos);  // the user's wins
  CHECK(line("198.18.0.1", own).find("-localhost node0") != std::string::npos);
  // Open MPI and Intel MPI: not theirs.
  for (auto impl : {MpiImpl::OpenMpi}) {
    CHECK(joined(build_mpirun_command(info_for(impl), basic_options(), plan,
                                      {{"HOROVOD_GLOO_RENDEZVOUS_ADDR", "198.18.0.1"}}, false))
              .find("-localhost") == std::string::npos);
  }
}

TEST_CASE("mpi: --ssh-strict-host-key-checking reaches the MPI's ssh", "[mpi]") {
  Options o = basic_options();
  o.ssh_strict_host_key_checking = true;
  const JobPlan plan = plan_for({{"h1", 1}, {"h2", 1}}, 2);
  CHECK(joined(build_mpirun_command(info_for(MpiImpl::OpenMpi), o, plan, {}, false))
            .find("-mca plm_rsh_args -o StrictHostKeyChecking=yes") != std::string::npos);
  CHECK(mpirun_launcher_env(info_for(MpiImpl::Mpich), o) ==
        std::map<std::string, std::string>{{"HYDRA_LAUNCHER_EXTRA_ARGS", "-o StrictHostKeyChecking=yes"}});
  CHECK(joined(build_mpirun_command(info_for(MpiImpl::Mpich), o, plan, {}, false)).find("-launcher ssh") !=
        std::string::npos);
  CHECK(joined(build_mpirun_command(info_for(MpiImpl::IntelMpi), o, plan, {}, false))
            .find("-bootstrap-exec-args -o StrictHostKeyChecking=yes") != std::string::npos);
}

TEST_CASE("mpi: options an mpirun cannot carry out are named, one line each", "[mpi]") {
  Options o = basic_options();
  CHECK(mpi_unapplied_options(info_for(MpiImpl::Mpich), o).empty());
  o.prefix_output_with_timestamp = true;
  o.network_interfaces = {"eth0", "ib0"};
  CHECK(mpi_unapplied_options(info_for(MpiImpl::OpenMpi), o).empty());  // --timestamp-output, btl_tcp_if_include
  const auto lines = mpi_unapplied_options(info_for(MpiImpl::Mpich), o);
  REQUIRE(lines.size() == 2);
  CHECK_THAT(lines[0], Catch::StartsWith("--prefix-output-with-timestamp: MPICH's mpirun has no option"));
  CHECK(lines[1] == "--network-interface: MPICH's mpirun takes one interface (-iface eth0); ib0 ignored");
  CHECK(mpi_unapplied_options(info_for(MpiImpl::IntelMpi), o).size() == 2);
  Options k = basic_options();
  k.ssh_keepalive = std::chrono::seconds(7);
  const auto keep = mpi_unapplied_options(info_for(MpiImpl::OpenMpi), k);
  REQUIRE(keep.size() == 1);
  CHECK_THAT(keep[0], Catch::StartsWith("--ssh-keepalive 7: it paces hvdrun's own SSH connections"));
}

TEST_CASE("mpi: the version line of Hydra's --version", "[mpi]") {
  CHECK(mpi_version_line("HYDRA build details:\n    Version:                                 4.0.2\n"
                         "    Release Date:                            Thu Apr  7 12:34:45 CDT 2022\n") ==
        "HYDRA 4.0.2");
  CHECK(mpi_version_line("mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n") ==
        "mpirun (Open MPI) 4.1.4");
  CHECK(mpi_version_line("HYDRA build details:\n") == "HYDRA build details:");
}

TEST_CASE("mpi: --output-filename directories made before mpirun", "[mpi]") {
  CHECK(mpi_output_directories(info_for(MpiImpl::OpenMpi), "/o", 3) == std::vector<std::string>{"/o"});
  CHECK(mpi_output_directories(info_for(MpiImpl::Mpich), "/o", 3) ==
        std::vector<std::string>{"/o/rank.0", "/o/rank.1", "/o/rank.2"});
  CHECK(mpi_output_directories(info_for(MpiImpl::IntelMpi), "/o", 1) == std::vector<std::string>{"/o/rank.0"});
}

TEST_CASE("mpi: Intel MPI uses -ppn and rejects uneven slots", "[mpi]") {
  auto cmd = build_mpirun_command(info_for(MpiImpl::IntelMpi), basic_options(), plan_for({{"h1", 2}, {"h2", 2}}, 4),
                                  {{"X", "1"}}, false);
  CHECK(joined(cmd) == "mpirun -l -np 4 -ppn 2 -hosts h1,h2 -genvlist X python3 train.py --lr 0.1");
  CHECK_THROWS_AS(build_mpirun_command(info_for(MpiImpl::IntelMpi), basic_options(),
                                       plan_for({{"h1", 2}, {"h2", 1}}, 3), {}, false),
                  hvd::InvalidArgument);
}

TEST_CASE("mpi: secret values never reach the command line", "[mpi]") {
  std::map<std::string, std::string> env = {{"HVDRUN_SECRET", "topsecretvalue"}, {"X", "plainvalue"}};
  for (auto impl : {MpiImpl::OpenMpi, MpiImpl::Mpich, MpiImpl::IntelMpi}) {
    auto cmd = build_mpirun_command(info_for(impl), basic_options(), plan_for({{"h", 2}}, 2), env, false);
    std::string line = joined(cmd);
    CHECK(line.find("topsecretvalue") == std::string::npos);
    CHECK(line.find("plainvalue") == std::string::npos);
    CHECK(line.find("HVDRUN_SECRET") != std::string::npos);
    std::string dry = render_mpi_dry_run(info_for(impl), basic_options(), plan_for({{"h", 2}}, 2), env, false);
    CHECK(dry.find("topsecretvalue") == std::string::npos);
    CHECK(dry.find("X=plainvalue") != std::string::npos);
  }
}

TEST_CASE("mpi: bad input is refused with InvalidArgument", "[mpi]") {
  Options o = basic_options();
  CHECK_THROWS_AS(build_mpirun_command(info_for(MpiImpl::Unknown), o, plan_for({{"h", 1}}, 1), {}, false),
                  hvd::InvalidArgument);
  o.mpi_args = "-x 'unterminated";
  CHECK_THROWS_AS(build_mpirun_command(info_for(MpiImpl::OpenMpi), o, plan_for({{"h", 1}}, 1), {}, false),
                  hvd::InvalidArgument);
  Options no_cmd = basic_options();
  no_cmd.command.clear();
  CHECK_THROWS_AS(build_mpirun_command(info_for(MpiImpl::OpenMpi), no_cmd, plan_for({{"h", 1}}, 1), {}, false),
                  hvd::InvalidArgument);
}

TEST_CASE("mpi: split_shell_words follows POSIX quoting", "[mpi]") {
  using V = std::vector<std::string>;
  CHECK(split_shell_words("") == V{});
  CHECK(split_shell_words("  -a  b ") == V{"-a", "b"});
  CHECK(split_shell_words("-x 'A=1 2' \"B=\\\"q\\\"\" C\\ D") == V{"-x", "A=1 2", "B=\"q\"", "C D"});
  CHECK(split_shell_words("''") == V{""});
  CHECK(split_shell_words("a'b'\"c\"") == V{"abc"});
  CHECK_THROWS_AS(split_shell_words("\"open"), hvd::InvalidArgument);
}

TEST_CASE("mpi: shell_quote round-trips through split_shell_words", "[mpi]") {
  for (std::string w : {"plain", "", "a b", "it's", "$HOME", "^openib", "x\"y"}) {
    CHECK(split_shell_words(shell_quote(w)) == std::vector<std::string>{w});
  }
}

TEST_CASE("mpi: mpi_job_env exports the job-wide environment, never per-rank or MPI runtime variables", "[mpi]") {
  Options o = basic_options();
  o.env_exports = {"NCCL_DEBUG", "FOO=bar", "MISSING", "OMPI_MCA_wanted"};
  o.tuning.cycle_time_ms = 5;
  std::map<std::string, std::string> launcher = {
      {"PATH", "/bin"},  {"NCCL_DEBUG", "INFO"},   {"HOSTNAME", "here"},          {"OMPI_COMM_WORLD_RANK", "3"},
      {"PMI_RANK", "1"}, {"OMPI_MCA_wanted", "1"}, {"HVDRUN_SECRET", "inherited"}};
  auto env = mpi_job_env(o, launcher);
  CHECK(env.at("PATH") == "/bin");
  CHECK(env.count("HOSTNAME") == 0);
  CHECK(env.count("OMPI_COMM_WORLD_RANK") == 0);
  CHECK(env.count("PMI_RANK") == 0);
  CHECK(env.at("OMPI_MCA_wanted") == "1");
  CHECK(env.count("HVDRUN_SECRET") == 0);
  CHECK(env.at("NCCL_DEBUG") == "INFO");
  CHECK(env.at("FOO") == "bar");
  CHECK(env.count("MISSING") == 0);
  CHECK(env.count("HOROVOD_CYCLE_TIME") == 1);
  CHECK(env.count("HOROVOD_RANK") == 0);
  CHECK(env.count("HOROVOD_LOCAL_RANK") == 0);
  // As horovodrun --mpi: no controller choice (Horovod workers take MPI's),
  // unless the user exports one.
  CHECK(env.count("HOROVOD_CONTROLLER") == 0);
  CHECK(env.count("HOROVOD_CPU_OPERATIONS") == 0);
  CHECK(env.count("HOROVOD_GLOO_RENDEZVOUS_ADDR") == 0);  // added per job by run_mpi_job (JobServices), not here
  o.env_exports.push_back("HOROVOD_CONTROLLER=mpi");
  CHECK(mpi_job_env(o, launcher).at("HOROVOD_CONTROLLER") == "mpi");
}

TEST_CASE("mpi: JSON dry run carries the argv and hides secrets", "[mpi]") {
  std::map<std::string, std::string> env = {{"API_TOKEN", "tok123"}, {"X", "1"}};
  std::string j = render_mpi_dry_run(info_for(MpiImpl::OpenMpi), basic_options(), plan_for({{"h", 2}}, 2), env, false,
                                     DryRunFormat::Json);
  CHECK(j.find("\"engine\": \"mpi\"") != std::string::npos);
  CHECK(j.find("\"-np\",") != std::string::npos);
  CHECK(j.find("\"API_TOKEN\": \"<hidden>\"") != std::string::npos);
  CHECK(j.find("\"HVDRUN_SECRET\": \"<hidden>\"") != std::string::npos);
  CHECK(j.find("tok123") == std::string::npos);
}

TEST_CASE("mpi: --binding-args replace the default binding where it stands", "[mpi][binding]") {
  Options o = basic_options();
  o.binding_args = "-bind-to core -map-by 'ppr:2:socket'";
  const JobPlan plan = plan_for({{"h1", 2}, {"h2", 2}}, 4);
  auto ompi = build_mpirun_command(info_for(MpiImpl::OpenMpi), o, plan, {}, false);
  CHECK(joined(ompi) ==
        "mpirun --tag-output -np 4 -H h1:2,h2:2 -bind-to core -map-by ppr:2:socket -mca pml ob1 -mca btl ^openib "
        "python3 train.py --lr 0.1");
  auto mpich = build_mpirun_command(info_for(MpiImpl::Mpich), o, plan, {}, false);
  CHECK(joined(mpich) ==
        "mpirun -l -np 4 -hosts h1:2,h2:2 -bind-to core -map-by ppr:2:socket python3 train.py --lr 0.1");
  // Intel MPI has no default binding: the user's words are added after the hosts.
  auto impi = build_mpirun_command(info_for(MpiImpl::IntelMpi), o, plan, {}, false);
  CHECK(joined(impi) ==
        "mpirun -l -np 4 -ppn 2 -hosts h1,h2 -bind-to core -map-by ppr:2:socket python3 train.py --lr 0.1");
  for (auto* cmd : {&ompi, &mpich}) CHECK_FALSE(has_seq(*cmd, {"-bind-to", "none"}));
}

TEST_CASE("mpi: empty --binding-args keep the default binding, a bad quote is refused", "[mpi][binding]") {
  Options o = basic_options();
  o.binding_args = "  ";
  auto cmd = build_mpirun_command(info_for(MpiImpl::OpenMpi), o, plan_for({{"h", 1}}, 1), {}, false);
  CHECK(has_seq(cmd, {"-bind-to", "none", "-map-by", "slot"}));
  o.binding_args = "--rankfile 'my file";
  try {
    build_mpirun_command(info_for(MpiImpl::OpenMpi), o, plan_for({{"h", 1}}, 1), {}, false);
    FAIL("no exception");
  } catch (const hvd::InvalidArgument& e) {
    CHECK(std::string(e.what()).rfind("--binding-args '--rankfile 'my file': unterminated single quote", 0) == 0);
  }
}

TEST_CASE("mpi: --mpi-args without mpirun: output flags are sorted from the rest", "[mpi][mpi_args]") {
  using V = std::vector<std::string>;
  auto a = interpret_mpi_args_without_mpirun(
      split_shell_words("--mca orte_keep_fqdn_hostnames t --allow-run-as-root --display-map --tag-output "
                        "--timestamp-output"));
  CHECK(a.display_map);
  CHECK(a.tag_output);
  CHECK(a.timestamp_output);
  CHECK(a.allow_run_as_root);
  CHECK(a.ignored == V{"--mca", "orte_keep_fqdn_hostnames", "t"});
  // Open MPI's single-dash spellings and MPICH's rank labels.
  auto b = interpret_mpi_args_without_mpirun({"-display-map", "-timestamp-output", "-l", "-x", "FOO"});
  CHECK(b.display_map);
  CHECK(b.timestamp_output);
  CHECK(b.tag_output);
  CHECK_FALSE(b.allow_run_as_root);
  CHECK(b.ignored == V{"-x", "FOO"});
  CHECK(interpret_mpi_args_without_mpirun({"-prepend-rank"}).tag_output);
  // Values are not flags: "display-map" alone is an ignored word.
  auto c = interpret_mpi_args_without_mpirun({"display-map", "--display-mapx"});
  CHECK_FALSE(c.display_map);
  CHECK(c.ignored == V{"display-map", "--display-mapx"});
}
