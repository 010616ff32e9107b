// The shared-directory registry and its host source (discovery/shared_dir/)
// over a temporary directory and a fake clock.
#include <catch2/catch.hpp>

#include <filesystem>

#include "../../test_util.h"
#include "hvd/launcher/discovery/shared_dir/registry.h"

using namespace hvd::launcher;
using namespace hvd::launcher::shared_dir;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  hvd_test::TempDir root;
  double now = 1000.0;
  Registry registry{root.path() + "/job/hvdrun", std::chrono::seconds(10), [this] { return now; }};
  Fixture() { registry.create_directories(); }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(registry.dir())) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

}  // namespace

TEST_CASE("shared_dir: register, list, unregister", "[shared_dir]") {
  Fixture f;
  CHECK(f.registry.list_workers().workers.empty());
  f.registry.register_worker("run-b", HostSpec{"10.0.0.3", 2});
  f.registry.register_worker("run-a", HostSpec{"10.0.0.4", 1});
  CHECK(f.files() == std::vector<std::string>{"WORKER_run-a.json", "WORKER_run-b.json"});  // no temporary left
  WorkerListing l = f.registry.list_workers();
  CHECK(l.ignored.empty());
  REQUIRE(l.workers.size() == 2);
  CHECK(l.workers[0].host == HostSpec{"10.0.0.4", 1});
  CHECK(l.workers[0].file == "WORKER_run-a.json");
  CHECK(l.workers[1].host == HostSpec{"10.0.0.3", 2});
  f.registry.unregister_worker("run-a");
  f.registry.unregister_worker("run-a");  // twice is fine
  l = f.registry.list_workers();
  REQUIRE(l.workers.size() == 1);
  CHECK(l.workers[0].host.name == "10.0.0.3");
}

TEST_CASE("shared_dir: a stale entry is ignored with one line, a refreshed one comes back", "[shared_dir]") {
  Fixture f;
  f.registry.register_worker("old", HostSpec{"10.0.0.3", 1});
  f.now += 11;
  f.registry.register_worker("new", HostSpec{"10.0.0.4", 1});
  WorkerListing l = f.registry.list_workers();
  REQUIRE(l.workers.size() == 1);
  CHECK(l.workers[0].host.name == "10.0.0.4");
  REQUIRE(l.ignored.size() == 1);
  CHECK(l.ignored[0].rfind("WORKER_old.json: stale (its heartbeat is 11 s old", 0) == 0);
  f.registry.register_worker("old", HostSpec{"10.0.0.3", 1});  // the heartbeat
  CHECK(f.registry.list_workers().workers.size() == 2);
}

TEST_CASE("shared_dir: garbage entries are ignored with one line each and other files are not entries",
          "[shared_dir]") {
  Fixture f;
  const std::string d = "job/hvdrun/";
  f.root.write(d + "WORKER_a.json", "not json");
  f.root.write(d + "WORKER_b.json", R"({"address": "10.0.0.5", "slots": 0, "heartbeat": 1000})");
  f.root.write(d + "WORKER_c.json", R"({"slots": 1, "heartbeat": 1000})");
  f.root.write(d + "WORKER_d.json", R"({"address": "bad host", "slots": 1, "heartbeat": 1000})");
  f.root.write(d + "WORKER_e.json", R"({"address": "10.0.0.6", "slots": 1})");
  f.root.write(d + "WORKER_f.json", R"([1, 2])");
  f.root.write(d + "WORKER_g.json", R"({"address": "fd00::7", "slots": 3, "heartbeat": 999.5})");
  f.root.write(d + "notes.txt", "hello");
  f.root.write(d + ".WORKER_h.json.1.2.tmp", "{");
  const WorkerListing l = f.registry.list_workers();
  REQUIRE(l.workers.size() == 1);
  CHECK(l.workers[0].host == HostSpec{"fd00::7", 3});
  CHECK(l.ignored == std::vector<std::string>{
                         "WORKER_a.json: not JSON",
                         "WORKER_b.json: no 'slots' count from 1 to 65536",
                         "WORKER_c.json: no 'address' string",
                         "WORKER_d.json: address 'bad host': " + *try_parse_host_entry("bad host").error,
                         "WORKER_e.json: no 'heartbeat' time",
                         "WORKER_f.json: not a JSON object",
                     });
}

TEST_CASE("shared_dir: one address registered twice keeps the newer entry", "[shared_dir]") {
  Fixture f;
  f.registry.register_worker("first", HostSpec{"10.0.0.3", 1});
  f.now += 1;
  f.registry.register_worker("second", HostSpec{"10.0.0.3", 2});
  const WorkerListing l = f.registry.list_workers();
  REQUIRE(l.workers.size() == 1);
  CHECK(l.workers[0].file == "WORKER_second.json");
  CHECK(l.workers[0].host.slots == 2);
  REQUIRE(l.ignored.size() == 1);
  CHECK(l.ignored[0].rfind("WORKER_first.json: address 10.0.0.3 is also registered by WORKER_second.json", 0) == 0);
}

TEST_CASE("shared_dir: the leader's marker, its staleness and the status of its run", "[shared_dir]") {
  Fixture f;
  std::string problem;
  CHECK_FALSE(f.registry.read_leader(&problem));
  CHECK(problem == "no MAIN.json");
  f.registry.write_leader("10.0.0.2", "run1");
  auto leader = f.registry.read_leader();
  REQUIRE(leader);
  CHECK(leader->address == "10.0.0.2");
  CHECK(leader->run == "run1");
  CHECK_FALSE(f.registry.stale(*leader));
  f.now += 10.5;
  CHECK(f.registry.stale(*leader));
  CHECK(f.registry.age(*leader) == Approx(10.5));
  f.registry.write_leader("10.0.0.2", "run1");
  CHECK_FALSE(f.registry.stale(*f.registry.read_leader()));

  CHECK_FALSE(f.registry.read_status("run1"));
  f.registry.write_status("run1", 3);
  CHECK(f.registry.read_status("run1") == 3);
  CHECK_FALSE(f.registry.read_status("run0"));  // an earlier run's status is not this run's
  f.registry.remove_leader();
  CHECK_FALSE(f.registry.read_leader());
  CHECK(f.registry.read_status("run1") == 3);  // the status stays
  f.root.write("job/hvdrun/MAIN.json", "{\"address\": 1}");
  CHECK_FALSE(f.registry.read_leader(&problem));
  CHECK(problem.rfind("MAIN.json is malformed", 0) == 0);
}

TEST_CASE("shared_dir: the host source lists this host first, then fresh workers", "[shared_dir]") {
  Fixture f;
  SharedDirHostSource source(f.registry, HostSpec{"10.0.0.2", 2});
  DiscoveryResult r = source.discover();
  REQUIRE(r.ok());
  CHECK(r.hosts == std::vector<HostSpec>{{"10.0.0.2", 2}});
  f.registry.register_worker("w1", HostSpec{"10.0.0.3", 1});
  f.registry.register_worker("self", HostSpec{"10.0.0.2", 1});  // this host's own address: not a second host
  f.root.write("job/hvdrun/WORKER_junk.json", "junk");
  r = source.discover();
  CHECK(r.hosts == std::vector<HostSpec>{{"10.0.0.2", 2}, {"10.0.0.3", 1}});
  f.registry.unregister_worker("w1");
  CHECK(source.discover().hosts == std::vector<HostSpec>{{"10.0.0.2", 2}});
  CHECK(source.describe().find(f.registry.dir()) != std::string::npos);
}

TEST_CASE("shared_dir: an unwritable directory is an IoError naming it", "[shared_dir]") {
  Fixture f;
  Registry missing(f.root.path() + "/file/sub", std::chrono::seconds(10));
  f.root.write("file", "x");  // a file where the directory would be
  CHECK_THROWS_AS(missing.create_directories(), hvd::IoError);
  CHECK_THROWS_AS(missing.register_worker("a", HostSpec{"10.0.0.3", 1}), hvd::IoError);
}
