// horovodrun's argparse habits on hvdrun's command line (cli.cpp
// resolve_option): unambiguous prefixes of long options, prefixes of the
// single-dash long names, exact names beating longer ones, ambiguity as a
// usage error. The expected outcomes are argparse's (Python 3.11
// _parse_optional) for horovodrun 0.28.1's option strings, checked by hand
// against argparse.
#include "options_test_util.h"

using namespace hvd::launcher;
using hvd_test::DiscoveryScript;
using hvd_test::parse;
using hvd_test::parse_ok;
using hvd_test::TempFile;
using hvd_test::usage_error;

TEST_CASE("abbrev: -n is -np, as argparse reads a prefix of a single-dash name", "[cli][abbrev]") {
  auto o = parse_ok({"-n", "4", "--hostfile", "hosts", "python", "train.py"});
  CHECK(o.num_proc == std::optional<int>(4));
  CHECK(o.hostfile == std::optional<std::string>("hosts"));
  CHECK(o.command == std::vector<std::string>{"python", "train.py"});
  CHECK(parse_ok({"-c"}).check_build);  // -cb
  // argparse splits "=" only off exact single-dash names.
  CHECK(parse_ok({"-np=3", "cmd"}).num_proc == std::optional<int>(3));
  CHECK(usage_error({"-n=3", "cmd"}).find("-n=3") != std::string::npos);
}

TEST_CASE("abbrev: unambiguous prefixes of long options, with a separate or attached value", "[cli][abbrev]") {
  CHECK(parse_ok({"--num-p", "4", "cmd"}).num_proc == std::optional<int>(4));
  CHECK(parse_ok({"--num-p=4", "cmd"}).num_proc == std::optional<int>(4));
  CHECK(parse_ok({"-np", "1", "--fusion", "32", "cmd"}).tuning.fusion_threshold_mb == std::optional<double>(32));
  CHECK(parse_ok({"-np", "1", "--no-stall", "cmd"}).tuning.no_stall_check == std::optional<bool>(true));
  CHECK(parse_ok({"-np", "1", "--verb", "cmd"}).verbose);
  CHECK(parse_ok({"-np", "1", "--start=45", "cmd"}).start_timeout == std::chrono::seconds(45));
  CHECK(parse_ok({"-np", "1", "--prefix-output", "cmd"}).prefix_output_with_timestamp);

  TempFile config("params:\n  cache_capacity: 7\n", ".yaml");
  auto c = parse_ok({"-np", "1", "--config", config.path(), "cmd"});
  CHECK(c.config_file == std::optional<std::string>(config.path()));
  CHECK(c.tuning.cache_capacity == std::optional<long>(7));
  CHECK(parse_ok({"-np", "1", "--conf=" + config.path(), "cmd"}).tuning.cache_capacity == std::optional<long>(7));
}

TEST_CASE("abbrev: --slots is --slots-per-host (elastic mode)", "[cli][abbrev][elastic]") {
  DiscoveryScript script;
  auto o = parse_ok({"-np", "2", "--host-disc", script.path(), "--slots", "2", "cmd"});
  CHECK(o.elastic.host_discovery_script == std::optional<std::string>(script.path()));
  CHECK(o.elastic.slots_per_host == std::optional<int>(2));
  // Without a script (and without a platform's hosts: --hosts-from none), the message names the flag in full.
  CHECK(usage_error({"-np", "2", "--hosts-from", "none", "--slots", "2", "cmd"}) ==
        "--slots-per-host needs --host-discovery-script or --min-np (elastic mode)");
}

TEST_CASE("abbrev: an exact name wins over the longer names it begins", "[cli][abbrev]") {
  // --network-interface is also a prefix of --network-interfaces.
  CHECK(parse_ok({"-np", "1", "--network-interface", "lo", "cmd"}).network_interfaces ==
        std::vector<std::string>{"lo"});
  CHECK(parse_ok({"-np", "1", "--network-interface=lo", "cmd"}).network_interfaces == std::vector<std::string>{"lo"});
  // --mpi begins --mpi-args and --mpi-threads-disable.
  CHECK(parse_ok({"-np", "1", "--mpi", "cmd"}).engine == Engine::Mpi);
  // --autotune begins the other autotune flags; --stall-check the stall times.
  CHECK(parse_ok({"-np", "1", "--autotune", "cmd"}).tuning.autotune == std::optional<bool>(true));
  CHECK(parse_ok({"-np", "1", "--stall-check", "cmd"}).tuning.no_stall_check == std::optional<bool>(false));
  // --hosts begins nothing else, and -H is not a prefix of -hostfile.
  CHECK(parse_ok({"--hosts", "localhost:2", "-np", "2", "cmd"}).hosts == "localhost:2");
  CHECK(parse_ok({"--hosts=localhost:2", "-np", "2", "cmd"}).hosts == "localhost:2");
  // A one-letter option with its value attached stays one (-Hhost:2, -p22).
  auto o = parse_ok({"-Hlocalhost:2", "-p22", "-np", "2", "cmd"});
  CHECK(o.hosts == "localhost:2");
  CHECK(o.ssh_port == std::optional<int>(22));
}

TEST_CASE("abbrev: an ambiguous prefix is a usage error naming every match", "[cli][abbrev]") {
  // horovodrun 0.28.1 refuses these too: --num-nccl-streams, --hostfile and
  // --host-discovery-script exist there as well (hvdrun also names its --hosts-from).
  CHECK(usage_error({"--num", "4", "cmd"}) == "ambiguous option: --num could match --num-proc, --num-nccl-streams");
  CHECK(usage_error({"-np", "2", "--host", "localhost:2", "cmd"}) ==
        "ambiguous option: --host could match --hosts, --hostfile, --host-discovery-script, --hosts-from");
  CHECK(usage_error({"-np", "2", "--host=localhost:2", "cmd"}) ==
        "ambiguous option: --host could match --hosts, --hostfile, --host-discovery-script, --hosts-from");
  CHECK(usage_error({"-np", "1", "--network", "lo", "cmd"}) ==
        "ambiguous option: --network could match --network-interface, --network-interfaces");
  // Opposite spellings of one row, and two names of one spelling, are
  // still two option strings to argparse.
  CHECK(usage_error({"-np", "1", "--log-with", "cmd"}) ==
        "ambiguous option: --log-with could match --log-without-timestamp, --log-with-timestamp");
  CHECK(usage_error({"-np", "1", "--min-n", "1", "cmd"}) ==
        "ambiguous option: --min-n could match --min-np, --min-num-proc");
  // hvdrun's additions are named too.
  CHECK(usage_error({"-np", "1", "--ssh", "22", "cmd"}) ==
        "ambiguous option: --ssh could match --ssh-port, --ssh-identity-file, --ssh-strict-host-key-checking, "
        "--ssh-keepalive");
  // A single-dash word may be a one-letter option with a value attached and
  // a prefix of a single-dash name at once.
  CHECK(usage_error({"-np", "1", "-pre", "cmd"}) == "ambiguous option: -pre could match -prefix-timestamp, -p");
  CHECK(usage_error({"-np", "1", "-host", "h", "cmd"}) == "ambiguous option: -host could match -h, -hostfile");
}

TEST_CASE("abbrev: a prefix horovodrun accepts keeps its meaning despite hvdrun's additions", "[cli][abbrev]") {
  // horovodrun: --dis is --disable-cache; hvdrun also has --discovery-*.
  CHECK(parse_ok({"-np", "1", "--dis", "cmd"}).disable_cache);
  // horovodrun: --blacklist is --blacklist-cooldown-range; hvdrun also has
  // --blacklist-failures and --blacklist-window.
  DiscoveryScript script;
  auto o = parse_ok({"-np", "1", "--host-discovery-script", script.path(), "--blacklist", "10", "20", "cmd"});
  CHECK(o.elastic.blacklist_cooldown_range == std::optional<std::pair<int, int>>({10, 20}));
  // horovodrun: --f is --fusion-threshold-mb; hvdrun also has --forward-loader-env.
  auto f = parse_ok({"-np", "1", "--f", "8", "cmd"});
  CHECK(f.tuning.fusion_threshold_mb == std::optional<double>(8));
  CHECK_FALSE(f.forward_loader_env);
  // Among additions only, ambiguity stays an error.
  CHECK(usage_error({"-np", "1", "--disc", "1", "cmd"}) ==
        "ambiguous option: --disc could match --discovery-interval, --discovery-timeout");
  // A prefix of an addition alone is that addition.
  CHECK(parse_ok({"-np", "1", "--kill", "10", "cmd"}).kill_grace == std::chrono::milliseconds(10));
  CHECK(parse_ok({"-np", "1", "--dry=json", "cmd"}).dry_run == DryRunFormat::Json);
}

TEST_CASE("abbrev: nothing is rewritten once the worker command starts", "[cli][abbrev]") {
  auto o = parse_ok({"-n", "2", "python", "train.py", "--num-p", "3", "-n", "1", "--host", "x", "--", "-c"});
  CHECK(o.num_proc == std::optional<int>(2));
  CHECK(o.command ==
        std::vector<std::string>{"python", "train.py", "--num-p", "3", "-n", "1", "--host", "x", "--", "-c"});
  auto d = parse_ok({"-n", "1", "--", "--num", "-n"});
  CHECK(d.command == std::vector<std::string>{"--num", "-n"});
}

TEST_CASE("abbrev: a word that begins no option is left for the usual unknown-option error", "[cli][abbrev]") {
  const std::string m = usage_error({"-np", "1", "--nope", "cmd"});
  CHECK(m.find("--nope") != std::string::npos);
  CHECK(m.find("ambiguous") == std::string::npos);
}
