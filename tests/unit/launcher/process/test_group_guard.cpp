// GroupGuard with real processes: firing kills the guarded group and removes
// the paths it was given (mpirun's session directory); a dismissed guard
// removes nothing; unsafe paths are refused.
#include "hvd/launcher/process/group_guard.h"

#include "hvd/common/error.h"

#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

using namespace hvd::launcher;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

/// A process group led by `sleep 30`, and a session-like directory tree
/// "<tmp>/ompi.x.0/pid.N/0/file" for the guard to remove.
struct Fixture {
  Subprocess leader;
  fs::path top, session;
  Fixture() {
    SpawnOptions so;
    so.argv = {"sleep", "30"};
    so.new_process_group = true;
    leader = Subprocess::spawn(so);
    char tmpl[] = "/tmp/hvd-guard-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    top = fs::path(tmpl) / "ompi.x.0";
    session = top / ("pid." + std::to_string(leader.pid()));
    fs::create_directories(session / "0");
    std::ofstream(session / "0" / "file") << "x";
  }
  ~Fixture() {
    if (leader.valid() && !leader.reaped()) leader.kill_group_and_reap();
    std::error_code ec;
    fs::remove_all(top.parent_path(), ec);
  }
};

}  // namespace

TEST_CASE("a fired guard kills the group and removes its paths, and their parent when left empty", "[guard]") {
  Fixture f;
  GroupGuard g = GroupGuard::start(f.leader.pid(), 0ms, {}, {f.session.string()});
  g.fire(5s);
  CHECK_FALSE(g.active());
  REQUIRE(f.leader.reap_until(hvd::Deadline::after(5s)).has_value());
  CHECK(WIFSIGNALED(f.leader.wait_status()));
  CHECK_FALSE(fs::exists(f.session));
  CHECK_FALSE(fs::exists(f.top));  // emptied, so removed too
  CHECK(fs::exists(f.top.parent_path()));  // but nothing above it
}

TEST_CASE("a fired guard keeps a parent directory that other sessions still use", "[guard]") {
  Fixture f;
  fs::create_directories(f.top / "pid.1");
  GroupGuard g = GroupGuard::start(f.leader.pid(), 0ms, {}, {f.session.string()});
  g.fire(5s);
  REQUIRE(f.leader.reap_until(hvd::Deadline::after(5s)).has_value());
  CHECK_FALSE(fs::exists(f.session));
  CHECK(fs::exists(f.top / "pid.1"));
}

TEST_CASE("a dismissed guard neither kills nor removes", "[guard]") {
  Fixture f;
  GroupGuard g = GroupGuard::start(f.leader.pid(), 0ms, {}, {f.session.string()});
  g.dismiss();
  ::usleep(200 * 1000);
  CHECK(::kill(f.leader.pid(), 0) == 0);
  CHECK(fs::exists(f.session / "0" / "file"));
}

TEST_CASE("the guard refuses paths it should never remove", "[guard]") {
  Fixture f;
  for (const std::string bad : {"/", "relative/dir", "/tmp/../etc", "/tmp/x/..", ""}) {
    CHECK_THROWS_AS(GroupGuard::start(f.leader.pid(), 0ms, {}, {bad}), hvd::Error);
  }
}
