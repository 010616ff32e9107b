// Golden mpirun command lines: every tests/golden/mpi/<case>.case is rendered
// with render_mpi_dry_run from a recorded `mpirun --version` output and
// compared with <case>.expected (HVD_UPDATE_GOLDEN=1 rewrites them).
#include "hvd/common/error.h"
#include "hvd/launcher/spawn/mpi/mpi_launch.h"

#include <catch2/catch.hpp>

#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

using namespace hvd::launcher;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  DIR* d = opendir(HVD_MPI_GOLDEN_DIR);
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.size() > 5 && n.substr(n.size() - 5) == ".case") names.push_back(n.substr(0, n.size() - 5));
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::string render_case(const std::string& text) {
  Options o;
  o.engine = Engine::Mpi;
  MpiInfo info;
  JobPlan plan;
  std::map<std::string, std::string> env;
  bool root = false;
  int np = 0;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto colon = line.find(": ");
    REQUIRE(colon != std::string::npos);
    std::string key = line.substr(0, colon), value = line.substr(colon + 2);
    if (key == "version") {
      std::string out = read_file(std::string(HVD_MPI_GOLDEN_DIR) + "/" + value);
      info.impl = detect_mpi_impl(out);
      info.version_line = mpi_version_line(out);
    } else if (key == "hosts") {
      std::stringstream hs(value);
      std::string item;
      while (std::getline(hs, item, ',')) {
        auto c = item.rfind(':');
        plan.hosts.push_back({item.substr(0, c), std::stoi(item.substr(c + 1))});
      }
    } else if (key == "np") {
      np = std::stoi(value);
    } else if (key == "root") {
      root = value == "1";
    } else if (key == "ssh_port") {
      o.ssh_port = std::stoi(value);
    } else if (key == "identity") {
      o.ssh_identity_file = value;
    } else if (key == "iface") {
      std::stringstream is(value);
      std::string nic;
      while (std::getline(is, nic, ',')) o.network_interfaces.push_back(nic);
    } else if (key == "output") {
      o.output_filename = value;
    } else if (key == "timestamp") {
      o.prefix_output_with_timestamp = value == "1";
    } else if (key == "mpi_args") {
      o.mpi_args = value;
    } else if (key == "binding") {
      o.binding_args = value;
    } else if (key == "export") {
      auto eq = value.find('=');
      env[value.substr(0, eq)] = value.substr(eq + 1);
    } else if (key == "command") {
      o.command = split_shell_words(value);
    } else {
      FAIL("unknown key " << key);
    }
  }
  // Fill hosts slot by slot, as horovodrun's placement does.
  int rank = 0;
  for (const auto& h : plan.hosts) {
    for (int s = 0; s < h.slots && rank < np; ++s, ++rank) {
      WorkerSpec w;
      w.slot.hostname = h.name;
      w.slot.rank = rank;
      w.slot.local_rank = s;
      plan.workers.push_back(w);
    }
  }
  try {
    return render_mpi_dry_run(info, o, plan, env, root);
  } catch (const hvd::InvalidArgument& e) {
    return std::string("error: ") + e.what() + "\n";
  }
}

}  // namespace

TEST_CASE("mpi: golden mpirun command lines", "[mpi][golden]") {
  auto names = case_names();
  REQUIRE(names.size() >= 5);
  const bool update = std::getenv("HVD_UPDATE_GOLDEN") != nullptr;
  for (const auto& name : names) {
    SECTION(name) {
      std::string base = std::string(HVD_MPI_GOLDEN_DIR) + "/" + name;
      std::string got = render_case(read_file(base + ".case"));
      if (update) {
        std::ofstream(base + ".expected") << got;
        continue;
      }
      std::ifstream expected_in(base + ".expected");
      INFO("missing " << base << ".expected: run with HVD_UPDATE_GOLDEN=1 and review");
      REQUIRE(expected_in.good());
      std::stringstream s;
      s << expected_in.rdbuf();
      CHECK(got == s.str());
    }
  }
}
