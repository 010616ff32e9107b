// The shared-directory registry and its host source (discovery/shared_dir/)
// over a temporary directory and a fake clock.
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <set>
#include <sstream>
#include <thread>

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

TEST_CASE("shared_dir: the status names the tokens of the workers the job listed", "[shared_dir]") {
  // A worker whose whole job formed and ended between two of its looks never
  // saw MAIN.json: it finds the job's status by its own run's token.
  Fixture f;
  SharedDirHostSource source(f.registry, HostSpec{"10.0.0.2", 1});
  f.registry.register_worker("w1", HostSpec{"10.0.0.3", 1}, "tok-w1");
  f.registry.register_worker("w2", HostSpec{"10.0.0.4", 1});  // a file without a token (an older hvdrun)
  REQUIRE(source.discover().hosts.size() == 3);
  f.registry.unregister_worker("w1");
  CHECK(source.discover().hosts.size() == 2);
  CHECK(source.tokens_seen() == std::set<std::string>{"tok-w1"});  // listed once is enough
  f.registry.write_status("run1", 3, source.tokens_seen());
  const auto ended = f.registry.read_status_naming("tok-w1");
  REQUIRE(ended);
  CHECK(ended->first == "run1");
  CHECK(ended->second == 3);
  CHECK(f.registry.read_status("run1") == 3);
  CHECK_FALSE(f.registry.read_status_naming("tok-other"));  // a later worker run is not named
  CHECK_FALSE(f.registry.read_status_naming(""));
  // The status of a job of 4096 workers (the most a listing looks at) with
  // their 8-hex-digit tokens is still a file a reader accepts (<= 64 KiB).
  std::set<std::string> many;
  for (int i = 0; i < 4096; ++i) many.insert(fmt::format("{:08x}", 0x10000000 + i));
  f.registry.write_status("run2", 5, many);
  CHECK(fs::file_size(f.registry.dir() + "/MAIN_status.json") < 65536);
  CHECK(f.registry.read_status("run2") == 5);
  const auto last = f.registry.read_status_naming(fmt::format("{:08x}", 0x10000000 + 4095));
  REQUIRE(last);
  CHECK(last->second == 5);
  // A status without "workers" (an older hvdrun's) names nobody.
  f.root.write("job/hvdrun/MAIN_status.json", "{\"run\": \"run0\", \"status\": 0}");
  CHECK_FALSE(f.registry.read_status_naming("tok-w1"));
  f.root.write("job/hvdrun/MAIN_status.json", "{\"run\": \"run0\", \"status\": 0, \"workers\": \"tok-w1\"}");
  CHECK_FALSE(f.registry.read_status_naming("tok-w1"));
}

TEST_CASE("shared_dir: an unwritable directory is an IoError naming it", "[shared_dir]") {
  Fixture f;
  Registry missing(f.root.path() + "/file/sub", std::chrono::seconds(10));
  f.root.write("file", "x");  // a file where the directory would be
  CHECK_THROWS_AS(missing.create_directories(), hvd::IoError);
  CHECK_THROWS_AS(missing.register_worker("a", HostSpec{"10.0.0.3", 1}), hvd::IoError);
}

// ---- files others may have written (issue 29 items 1, 2, 5; docs/design.md, "Security rules") ----

namespace {

/// Runs `fn` on a thread of its own; false when it has not returned within
/// `limit` (then `unblock` lets it finish, and it is waited for).
template <typename Fn>
bool returns_within(std::chrono::seconds limit, Fn fn, const std::function<void()>& unblock) {
  auto done = std::async(std::launch::async, std::move(fn));
  if (done.wait_for(limit) == std::future_status::ready) {
    done.get();
    return true;
  }
  unblock();
  done.wait();
  return false;
}

/// Opens the FIFO `path` for writing and closes it: a reader blocked in
/// open() then reads end-of-file.
void release_fifo_reader(const std::string& path) {
  for (int i = 0; i < 100; ++i) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      ::close(fd);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool has_line(const std::vector<std::string>& lines, const std::string& start, const std::string& part) {
  return std::any_of(lines.begin(), lines.end(),
                     [&](const std::string& l) { return l.rfind(start, 0) == 0 && l.find(part) != std::string::npos; });
}

}  // namespace

TEST_CASE("shared_dir: symbolic links planted at temporary names never redirect a write", "[shared_dir][security]") {
  // The writer used to create .<name>.<pid>.<n>.tmp without O_EXCL|O_NOFOLLOW:
  // a link planted at that name made it overwrite the link's target.
  Fixture f;
  const std::string victim = f.root.write("victim", "precious\n");
  const std::string dir = f.registry.dir();
  size_t planted = 0;
  for (const char* name : {"MAIN.json", "WORKER_w.json", "MAIN_status.json"}) {
    for (int n = 0; n < 1024; ++n) {
      fs::create_symlink(victim, fmt::format("{}/.{}.{}.{}.tmp", dir, name, ::getpid(), n));
      ++planted;
    }
  }
  f.registry.write_leader("10.0.0.2", "run1");
  f.registry.register_worker("w", HostSpec{"10.0.0.3", 1});
  f.registry.write_status("run1", 0);
  CHECK(read_all(victim) == "precious\n");
  REQUIRE(f.registry.read_leader());
  CHECK(f.registry.read_leader()->address == "10.0.0.2");
  CHECK(f.registry.list_workers().workers.size() == 1);
  CHECK(f.registry.read_status("run1") == 0);
  CHECK(f.files().size() == planted + 3);  // no temporary of its own left
}

TEST_CASE(
    "shared_dir: a FIFO, a symbolic link, a hard link or an oversized file is ignored with one line and never "
    "blocks",
    "[shared_dir][security]") {
  Fixture f;
  const std::string d = "job/hvdrun/";
  const std::string dir = f.registry.dir();
  const std::string good = R"({"address": "10.0.0.3", "slots": 1, "heartbeat": 1000})";
  REQUIRE(::mkfifo((dir + "/WORKER_a.json").c_str(), 0644) == 0);
  REQUIRE(::mkfifo((dir + "/MAIN.json").c_str(), 0644) == 0);
  REQUIRE(::mkfifo((dir + "/MAIN_status.json").c_str(), 0644) == 0);
  fs::create_symlink(f.root.write("elsewhere.json", R"({"address": "10.0.0.4", "slots": 1, "heartbeat": 1000})"),
                     dir + "/WORKER_b.json");
  f.root.write(d + "WORKER_c.json", good);
  fs::create_hard_link(f.root.write("other.json", R"({"address": "10.0.0.5", "slots": 1, "heartbeat": 1000})"),
                       dir + "/WORKER_d.json");
  f.root.write(d + "WORKER_e.json",
               std::string(70000, ' ') + R"({"address": "10.0.0.6", "slots": 1, "heartbeat": 1000})");

  WorkerListing l;
  CHECK(returns_within(
      std::chrono::seconds(5), [&] { l = f.registry.list_workers(); },
      [&] { release_fifo_reader(dir + "/WORKER_a.json"); }));
  REQUIRE(l.workers.size() == 1);
  CHECK(l.workers[0].host.name == "10.0.0.3");
  INFO(fmt::format("{}", fmt::join(l.ignored, "\n")));
  CHECK(l.ignored.size() == 4);
  CHECK(has_line(l.ignored, "WORKER_a.json: ", "a FIFO, not a regular file"));
  CHECK(has_line(l.ignored, "WORKER_b.json: ", "a symbolic link, not a regular file"));
  CHECK(has_line(l.ignored, "WORKER_d.json: ", "2 hard links"));
  CHECK(has_line(l.ignored, "WORKER_e.json: ", "larger than 65536 bytes"));

  std::string problem;
  std::optional<Leader> leader;
  CHECK(returns_within(
      std::chrono::seconds(5), [&] { leader = f.registry.read_leader(&problem); },
      [&] { release_fifo_reader(dir + "/MAIN.json"); }));
  CHECK_FALSE(leader);
  CHECK(problem.find("MAIN.json: a FIFO, not a regular file") != std::string::npos);
  std::optional<int> status;
  CHECK(returns_within(
      std::chrono::seconds(5), [&] { status = f.registry.read_status("run1"); },
      [&] { release_fifo_reader(dir + "/MAIN_status.json"); }));
  CHECK_FALSE(status);
}

TEST_CASE("shared_dir: a heartbeat from the future beyond the clock skew bound is stale", "[shared_dir][security]") {
  Fixture f;  // now = 1000, stale after 10 s: the clocks may differ by as much
  const std::string d = "job/hvdrun/";
  f.root.write(d + "WORKER_far.json", R"({"address": "10.0.0.3", "slots": 1, "heartbeat": 1000001000})");
  f.root.write(d + "WORKER_near.json", R"({"address": "10.0.0.4", "slots": 1, "heartbeat": 1005})");
  const WorkerListing l = f.registry.list_workers();
  REQUIRE(l.workers.size() == 1);
  CHECK(l.workers[0].host.name == "10.0.0.4");  // 5 s ahead: within the skew
  REQUIRE(l.ignored.size() == 1);
  CHECK(l.ignored[0].rfind("WORKER_far.json: stale (its heartbeat is 1000000000 s in the future", 0) == 0);

  f.root.write(d + "MAIN.json", R"({"address": "10.0.0.2", "run": "r", "heartbeat": 1000001000})");
  auto leader = f.registry.read_leader();
  REQUIRE(leader);
  CHECK(f.registry.stale(*leader));
  f.root.write(d + "MAIN.json", R"({"address": "10.0.0.2", "run": "r", "heartbeat": 1009})");
  CHECK_FALSE(f.registry.stale(*f.registry.read_leader()));
}

TEST_CASE("shared_dir: files of another user are not trusted", "[shared_dir][security]") {
  if (::geteuid() != 0) {
    WARN("not root: cannot give a file to another uid; skipped");
    return;
  }
  Fixture f;
  const std::string d = "job/hvdrun/";
  const uid_t other = 54321;  // no such user is needed: chown takes any uid
  for (const auto& [name, text] : std::vector<std::pair<std::string, std::string>>{
           {"WORKER_x.json", R"({"address": "10.0.0.3", "slots": 1, "heartbeat": 1000})"},
           {"MAIN.json", R"({"address": "10.0.0.2", "run": "forged", "heartbeat": 1000})"},
           {"MAIN_status.json", R"({"run": "forged", "status": 42})"}}) {
    REQUIRE(::chown(f.root.write(d + name, text).c_str(), other, other) == 0);
  }
  const WorkerListing l = f.registry.list_workers();
  CHECK(l.workers.empty());
  REQUIRE(l.ignored.size() == 1);
  CHECK(l.ignored[0] == "WORKER_x.json: owned by uid 54321, not by this user (uid 0) or root: not trusted");
  std::string problem;
  CHECK_FALSE(f.registry.read_leader(&problem));
  CHECK(problem == "MAIN.json: owned by uid 54321, not by this user (uid 0) or root: not trusted");
  CHECK_FALSE(f.registry.read_status("forged"));
}

TEST_CASE("shared_dir: a directory every user can write is refused without the sticky bit", "[shared_dir][security]") {
  Fixture f;
  const std::string dir = f.registry.dir();
  REQUIRE(::chmod(dir.c_str(), 0777) == 0);
  const std::string why = hvd_test::invalid_message([&] { f.registry.create_directories(); });
  CHECK(why == "the shared directory " + dir +
                   " is writable by every user and has no sticky bit: another user could replace its files; chmod "
                   "1777 or 0755 it");
  CHECK_THROWS_AS(f.registry.register_worker("w", HostSpec{"10.0.0.3", 1}), hvd::InvalidArgument);
  CHECK_THROWS_AS(f.registry.list_workers(), hvd::InvalidArgument);
  // Above it likewise: its parent could rename it away.
  REQUIRE(::chmod(dir.c_str(), 0755) == 0);
  REQUIRE(::chmod((f.root.path() + "/job").c_str(), 0777) == 0);
  CHECK(hvd_test::invalid_message([&] { f.registry.create_directories(); }).find(f.root.path() + "/job is writable") !=
        std::string::npos);
  REQUIRE(::chmod((f.root.path() + "/job").c_str(), 0755) == 0);
  // With the sticky bit (as /tmp): allowed, with a warning (once).
  REQUIRE(::chmod(dir.c_str(), 01777) == 0);
  CHECK_NOTHROW(f.registry.create_directories());
  CHECK_NOTHROW(f.registry.register_worker("w", HostSpec{"10.0.0.3", 1}));
  CHECK(f.registry.list_workers().workers.size() == 1);
}
