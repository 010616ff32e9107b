// Files in directories other users may write (hvd/common/files.h;
// docs/design.md, "Security rules"), in a temporary directory.
#include "hvd/common/files.h"

#include "hvd/common/error.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace hvd;
namespace fs = std::filesystem;

namespace {

struct Dir {
  std::string path;
  Dir() {
    char tmpl[] = "/tmp/hvd_files_testXXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~Dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name, const std::string& text) const {
    std::ofstream(path + "/" + name) << text;
    return path + "/" + name;
  }
  std::string read(const std::string& name) const {
    std::ifstream in(path + "/" + name);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
};

}  // namespace

TEST_CASE("files: write_file_atomically never writes through a planted name and leaves no temporary",
          "[common][files]") {
  Dir d;
  const std::string victim = d.file("victim", "precious");
  fs::create_symlink(victim, d.path + "/out.json");  // the final name a link: replaced, not followed
  SharedDirectory dir = open_shared_directory(d.path);
  REQUIRE(dir.fd);
  write_file_atomically(dir.fd.get(), d.path, "out.json", "{}\n");
  CHECK(d.read("victim") == "precious");
  CHECK(fs::is_regular_file(fs::symlink_status(d.path + "/out.json")));
  CHECK(d.read("out.json") == "{}\n");
  int entries = 0;
  for (const auto& e : fs::directory_iterator(d.path)) entries += e.path().filename().string()[0] == '.';
  CHECK(entries == 0);
}

TEST_CASE("files: read_owned_file takes only this user's small regular files, without blocking", "[common][files]") {
  Dir d;
  SharedDirectory dir = open_shared_directory(d.path);
  REQUIRE(dir.fd);
  d.file("ok", "hello");
  OwnedFile f = read_owned_file(dir.fd.get(), "ok", 5);
  CHECK(f.status == OwnedFile::Status::Ok);
  CHECK(f.text == "hello");
  f = read_owned_file(dir.fd.get(), "ok", 4);
  CHECK(f.status == OwnedFile::Status::Refused);
  CHECK(f.why == "larger than 4 bytes");
  CHECK(read_owned_file(dir.fd.get(), "absent", 10).status == OwnedFile::Status::Absent);
  REQUIRE(::mkfifo((d.path + "/fifo").c_str(), 0644) == 0);
  CHECK(read_owned_file(dir.fd.get(), "fifo", 10).why == "a FIFO, not a regular file");
  fs::create_symlink("/dev/zero", d.path + "/zero");
  CHECK(read_owned_file(dir.fd.get(), "zero", 10).why == "a symbolic link, not a regular file");
  fs::create_directory(d.path + "/sub");
  CHECK(read_owned_file(dir.fd.get(), "sub", 10).why == "a directory, not a regular file");
  fs::create_hard_link(d.path + "/ok", d.path + "/twice");
  CHECK(read_owned_file(dir.fd.get(), "twice", 10).why.rfind("has 2 hard links", 0) == 0);
  if (::geteuid() == 0) {
    REQUIRE(::chown(d.file("theirs", "x").c_str(), 54321, 54321) == 0);
    CHECK(read_owned_file(dir.fd.get(), "theirs", 10).why ==
          "owned by uid 54321, not by this user (uid 0) or root: not trusted");
  }
}

TEST_CASE("files: open_shared_directory refuses what others could swap and flags the sticky case", "[common][files]") {
  Dir d;
  CHECK_FALSE(open_shared_directory(d.path + "/missing").fd);
  const std::string file = d.file("file", "x");
  CHECK_THROWS_AS(open_shared_directory(file), InvalidArgument);
  fs::create_directory(d.path + "/shared");
  SharedDirectory s = open_shared_directory(d.path + "/shared");
  CHECK(s.fd);
  CHECK_FALSE(s.world_writable);
  REQUIRE(::chmod((d.path + "/shared").c_str(), 01777) == 0);
  CHECK(open_shared_directory(d.path + "/shared").world_writable);
  REQUIRE(::chmod((d.path + "/shared").c_str(), 0777) == 0);
  CHECK_THROWS_WITH(open_shared_directory(d.path + "/shared"),
                    "the shared directory " + d.path +
                        "/shared is writable by every user and has no sticky bit: another user could replace its "
                        "files; chmod 1777 or 0755 it");
  REQUIRE(::chmod((d.path + "/shared").c_str(), 0755) == 0);
  REQUIRE(::chmod(d.path.c_str(), 0777) == 0);  // above it
  CHECK_THROWS_AS(open_shared_directory(d.path + "/shared"), InvalidArgument);
  REQUIRE(::chmod(d.path.c_str(), 0700) == 0);
  if (::geteuid() == 0) {
    REQUIRE(::chown((d.path + "/shared").c_str(), 54321, 54321) == 0);
    CHECK_THROWS_WITH(open_shared_directory(d.path + "/shared"),
                      Catch::Contains("is owned by uid 54321, not by this user (uid 0) or root"));
  }
}

TEST_CASE("files: open_output_file creates or truncates a regular file and refuses anything else at once",
          "[common][files]") {
  Dir d;
  std::string why;
  int fd = open_output_file(d.path + "/new", why);
  REQUIRE(fd >= 0);
  CHECK((::fcntl(fd, F_GETFL) & O_NONBLOCK) == 0);
  CHECK((::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
  ::close(fd);
  d.file("old", "0123456789");
  fd = open_output_file(d.path + "/old", why);
  REQUIRE(fd >= 0);
  ::close(fd);
  CHECK(d.read("old").empty());
  REQUIRE(::mkfifo((d.path + "/fifo").c_str(), 0644) == 0);
  CHECK(open_output_file(d.path + "/fifo", why) == -1);
  CHECK(why == "is a FIFO, not a regular file");
  const std::string victim = d.file("victim", "precious");
  fs::create_symlink(victim, d.path + "/link");
  CHECK(open_output_file(d.path + "/link", why) == -1);
  CHECK(why == "is a symbolic link, not a regular file");
  fs::create_hard_link(victim, d.path + "/hard");
  CHECK(open_output_file(d.path + "/hard", why) == -1);
  CHECK(why.rfind("has 2 hard links", 0) == 0);
  CHECK(d.read("victim") == "precious");
  CHECK(open_output_file(d.path + "/no/such/dir", why) == -1);
  CHECK(why == "cannot be created: No such file or directory");
}
