// Line splitting and output routing: whole lines, prefixes, files, tails.
#include "hvd/launcher/supervise/output.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

using hvd::launcher::LineSplitter;
using hvd::launcher::OutputOptions;
using hvd::launcher::OutputRouter;
using hvd::launcher::Stream;

namespace {

struct Collected {
  std::vector<std::pair<std::string, bool>> lines;
  LineSplitter::Emit emit() {
    return [this](std::string_view line, bool terminated) { lines.emplace_back(std::string(line), terminated); };
  }
};

void feed(LineSplitter& s, const std::string& text, Collected& c) { s.feed(text.data(), text.size(), c.emit()); }

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A temporary directory removed at scope exit.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/hvd_output_test_XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
};

/// Router writing to two temp files instead of stdout/stderr.
struct Files {
  TempDir dir;
  int out_fd, err_fd;
  Files() {
    out_fd = ::open((dir.path + "/out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    err_fd = ::open((dir.path + "/err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  ~Files() {
    ::close(out_fd);
    ::close(err_fd);
  }
  OutputOptions options(int n) {
    OutputOptions o;
    o.num_workers = n;
    o.stdout_fd = out_fd;
    o.stderr_fd = err_fd;
    return o;
  }
  std::string out() { return slurp(dir.path + "/out"); }
  std::string err() { return slurp(dir.path + "/err"); }
};

}  // namespace

TEST_CASE("LineSplitter joins lines split across chunks", "[output]") {
  LineSplitter s;
  Collected c;
  feed(s, "hel", c);
  CHECK(c.lines.empty());
  feed(s, "lo\nwor", c);
  REQUIRE(c.lines.size() == 1);
  CHECK(c.lines[0] == std::make_pair(std::string("hello\n"), true));
  feed(s, "ld\n\nx\n", c);
  REQUIRE(c.lines.size() == 4);
  CHECK(c.lines[1].first == "world\n");
  CHECK(c.lines[2].first == "\n");
  CHECK(c.lines[3].first == "x\n");
  CHECK(s.buffered() == 0);
}

TEST_CASE("LineSplitter keeps CRLF together and treats a lone CR as a line end", "[output]") {
  LineSplitter s;
  Collected c;
  feed(s, "a\r", c);
  CHECK(c.lines.empty());  // undecided: "\r\n" or a lone "\r"?
  feed(s, "\nb\r", c);
  REQUIRE(c.lines.size() == 1);
  CHECK(c.lines[0].first == "a\r\n");
  feed(s, "c", c);  // progress-bar redraw: "b\r" was a line
  REQUIRE(c.lines.size() == 2);
  CHECK(c.lines[1].first == "b\r");
  CHECK(c.lines[1].second);
  s.finish(c.emit());
  REQUIRE(c.lines.size() == 3);
  CHECK(c.lines[2] == std::make_pair(std::string("c"), false));
}

TEST_CASE("LineSplitter flushes an endless line in bounded chunks", "[output]") {
  LineSplitter s(1000);
  Collected c;
  std::string blob(4500, 'z');
  feed(s, blob, c);
  REQUIRE(c.lines.size() == 4);
  for (auto& [line, terminated] : c.lines) {
    CHECK(line.size() == 1000);
    CHECK_FALSE(terminated);
  }
  CHECK(s.buffered() == 500);
  feed(s, "\n", c);
  REQUIRE(c.lines.size() == 5);
  CHECK(c.lines[4].first.size() == 501);
}

TEST_CASE("LineSplitter finish emits a last line without newline", "[output]") {
  LineSplitter s;
  Collected c;
  feed(s, "done\nno newline", c);
  s.finish(c.emit());
  REQUIRE(c.lines.size() == 2);
  CHECK(c.lines[1] == std::make_pair(std::string("no newline"), false));
  s.finish(c.emit());
  CHECK(c.lines.size() == 2);
}

TEST_CASE("padded_rank matches horovodrun's rank directory names", "[output]") {
  using hvd::launcher::padded_rank;
  CHECK(padded_rank(0, 1) == "0");
  CHECK(padded_rank(3, 10) == "3");
  CHECK(padded_rank(3, 11) == "03");
  CHECK(padded_rank(10, 11) == "10");
  CHECK(padded_rank(7, 101) == "007");
}

TEST_CASE("asctime_now has Python's time.asctime shape", "[output]") {
  std::string t = hvd::launcher::asctime_now();
  REQUIRE(t.size() == 24);  // "Sun Nov 22 21:56:55 2026"
  CHECK(t[3] == ' ');
  CHECK(t[7] == ' ');
  CHECK(t[13] == ':');
  CHECK(t[16] == ':');
}

TEST_CASE("OutputRouter prefixes lines as horovodrun does and routes streams", "[output]") {
  Files f;
  {
    OutputRouter r(f.options(2));
    std::string a = "first\nsec";
    r.write(1, Stream::Stdout, a.data(), a.size());
    std::string e = "oops\n";
    r.write(0, Stream::Stderr, e.data(), e.size());
    std::string b = "ond\nlast";
    r.write(1, Stream::Stdout, b.data(), b.size());
    r.finish(1);
    r.finish(1);  // idempotent
  }
  CHECK(f.out() == "[1]<stdout>:first\n[1]<stdout>:second\n[1]<stdout>:last\n");
  CHECK(f.err() == "[0]<stderr>:oops\n");
}

TEST_CASE("OutputRouter puts the timestamp before the prefix", "[output]") {
  Files f;
  {
    OutputOptions o = f.options(1);
    o.timestamp = true;
    o.clock = [] { return std::string("Sun Nov 22 21:56:55 2026"); };
    OutputRouter r(o);
    std::string a = "hi\n";
    r.write(0, Stream::Stdout, a.data(), a.size());
  }
  CHECK(f.out() == "Sun Nov 22 21:56:55 2026[0]<stdout>:hi\n");
}

TEST_CASE("OutputRouter keeps the last stderr lines of each rank", "[output]") {
  Files f;
  OutputOptions o = f.options(2);
  o.stderr_tail_lines = 3;
  OutputRouter r(o);
  for (int i = 0; i < 10; ++i) {
    std::string line = "err " + std::to_string(i) + "\r\n";
    r.write(1, Stream::Stderr, line.data(), line.size());
  }
  std::string partial = "Traceback (partial";
  r.write(1, Stream::Stderr, partial.data(), partial.size());
  std::string out = "stdout is not in the tail\n";
  r.write(1, Stream::Stdout, out.data(), out.size());
  auto tail = r.stderr_tail(1);
  REQUIRE(tail.size() == 3);
  CHECK(tail[0] == "err 8");
  CHECK(tail[1] == "err 9");
  CHECK(tail[2] == "Traceback (partial");
  CHECK(r.stderr_tail(0).empty());
  r.finish(1);
  tail = r.stderr_tail(1);
  REQUIRE(tail.size() == 3);
  CHECK(tail[2] == "Traceback (partial");
}

TEST_CASE("OutputRouter forgets a finished rank: its tail and label, never a rank still writing", "[output]") {
  Files f;
  {
    OutputOptions o = f.options(2);
    o.stderr_tail_lines = 3;
    OutputRouter r(o);
    r.set_label(7, "w7");
    std::string partial = "Traceback (partial";
    r.write(7, Stream::Stderr, partial.data(), partial.size());
    r.forget(7);  // not finished: its output may still come
    REQUIRE(r.stderr_tail(7).size() == 1);
    std::string rest = " end)\n";
    r.write(7, Stream::Stderr, rest.data(), rest.size());
    r.finish(7);
    r.forget(7);
    CHECK(r.stderr_tail(7).empty());
    r.forget(7);  // idempotent
    r.set_label(8, "w8");
    r.forget(8);  // never wrote: its label goes
    std::string line = "late\n";
    r.write(8, Stream::Stdout, line.data(), line.size());
  }
  CHECK(f.err() == "[w7]<stderr>:Traceback (partial end)\n");
  CHECK(f.out() == "[8]<stdout>:late\n");
}

TEST_CASE("OutputRouter writes raw per-rank files in horovodrun's layout", "[output]") {
  Files f;
  TempDir outdir;
  std::string dir = outdir.path + "/nested/logs";
  {
    OutputOptions o = f.options(11);
    o.directory = dir;
    OutputRouter r(o);
    std::string a = "line one\npartial";
    r.write(10, Stream::Stdout, a.data(), a.size());
    std::string e = "bad\n";
    r.write(3, Stream::Stderr, e.data(), e.size());
    r.finish(10);
  }
  CHECK(slurp(dir + "/rank.10/stdout") == "line one\npartial");
  CHECK(slurp(dir + "/rank.03/stderr") == "bad\n");
  CHECK(slurp(dir + "/rank.00/stdout").empty());
  struct stat st;
  CHECK(::stat((dir + "/rank.00/stderr").c_str(), &st) == 0);
}

TEST_CASE("OutputRouter reports an unusable output directory", "[output]") {
  Files f;
  OutputOptions o = f.options(1);
  o.directory = "/proc/version/not_a_dir";
  CHECK_THROWS_WITH(OutputRouter(o), Catch::Contains("/proc/version"));
}

TEST_CASE("OutputRouter never interleaves lines from concurrent ranks", "[output]") {
  Files f;
  constexpr int kRanks = 4;
  constexpr int kLines = 2000;
  {
    OutputOptions o = f.options(kRanks);
    o.max_line = 1 << 20;
    OutputRouter r(o);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < kRanks; ++rank) {
      threads.emplace_back([&r, rank] {
        std::string all;
        for (int i = 0; i < kLines; ++i) {
          all += "rank" + std::to_string(rank) + " line " + std::to_string(i) + " " +
                 std::string(static_cast<std::size_t>(i % 97), 'x') + "\n";
        }
        std::mt19937 gen(static_cast<unsigned>(rank));
        std::uniform_int_distribution<std::size_t> len(1, 300);
        for (std::size_t pos = 0; pos < all.size();) {
          std::size_t n = std::min(len(gen), all.size() - pos);
          r.write(rank, Stream::Stdout, all.data() + pos, n);
          pos += n;
        }
        r.finish(rank);
      });
    }
    for (auto& t : threads) t.join();
  }
  std::istringstream in(f.out());
  std::string line;
  std::vector<int> next(kRanks, 0);
  int total = 0;
  while (std::getline(in, line)) {
    ++total;
    REQUIRE(line.size() > 12);
    int rank = line[1] - '0';
    REQUIRE(rank >= 0);
    REQUIRE(rank < kRanks);
    std::string expect = "[" + std::to_string(rank) + "]<stdout>:rank" + std::to_string(rank) + " line " +
                         std::to_string(next[rank]) + " " + std::string(static_cast<std::size_t>(next[rank] % 97), 'x');
    REQUIRE(line == expect);
    ++next[rank];
  }
  CHECK(total == kRanks * kLines);
}

TEST_CASE("OutputRouter never blocks on a stdout nobody reads - it drops whole lines and counts them", "[output]") {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  Files f;
  OutputOptions o = f.options(2);
  o.stdout_fd = p[1];
  o.max_buffered_bytes = 256 * 1024;
  o.close_stall = std::chrono::milliseconds(200);
  auto router = std::make_unique<OutputRouter>(o);
  const std::string line = std::string(99, 'x') + "\n";
  std::string chunk;
  for (int i = 0; i < 100; ++i) chunk += line;  // 100 lines
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 500; ++i) router->write(0, Stream::Stdout, chunk.data(), chunk.size());  // 5.6 MB prefixed
  // stderr is unaffected by the blocked stdout.
  std::string e = "still here\n";
  router->write(1, Stream::Stderr, e.data(), e.size());
  router->finish(0);
  router->finish(1);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  auto dropped = router->dropped(Stream::Stdout);
  // The pipe (64 KiB) and the queue (256 KiB) hold the rest.
  CHECK(dropped.bytes >= 5600000u - 64 * 1024 - 256 * 1024 - 2 * 11200);
  // Whole chunks of whole lines: 100 lines of "[0]<stdout>:" + 99 x + "\n".
  CHECK(dropped.bytes % 11200 == 0);
  CHECK(dropped.lines == dropped.bytes / 112);
  CHECK(router->dropped(Stream::Stderr).bytes == 0);
  // Closing gives up on the stalled stream within close_stall.
  const auto t1 = std::chrono::steady_clock::now();
  router.reset();
  CHECK(std::chrono::steady_clock::now() - t1 < std::chrono::seconds(1));
  CHECK(f.err() == "[1]<stderr>:still here\n");
  // What did reach the pipe is whole prefixed lines.
  ::close(p[1]);
  std::string got;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<std::size_t>(n));
  ::close(p[0]);
  REQUIRE(!got.empty());
  std::istringstream in(got);
  std::string l;
  std::size_t whole = 0;
  while (std::getline(in, l)) {
    if (in.eof()) break;  // the pipe's last, partial write
    CHECK(l == "[0]<stdout>:" + std::string(99, 'x'));
    ++whole;
  }
  CHECK(whole > 0);
}

TEST_CASE("OutputRouter delivers everything to a slow but live reader when it closes", "[output]") {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  Files f;
  OutputOptions o = f.options(1);
  o.stdout_fd = p[1];
  std::string got;
  std::thread reader([&] {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(p[0], buf, sizeof buf)) > 0) {
      got.append(buf, static_cast<std::size_t>(n));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  {
    OutputRouter r(o);
    std::string chunk;
    for (int i = 0; i < 1000; ++i) chunk += "line " + std::to_string(i) + "\n";
    for (int i = 0; i < 100; ++i) r.write(0, Stream::Stdout, chunk.data(), chunk.size());  // ~0.9 MB
    CHECK(r.dropped(Stream::Stdout).bytes == 0);
  }
  ::close(p[1]);
  reader.join();
  ::close(p[0]);
  CHECK(std::count(got.begin(), got.end(), '\n') == 100000);
}
