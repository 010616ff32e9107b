// --check-build's output (job/check_build.cpp).
#include "hvd/launcher/job/check_build.h"

#include <catch2/catch.hpp>

#include <string>

using namespace hvd::launcher;

TEST_CASE("check-build lists what hvdrun provides", "[check_build]") {
  std::string s = render_check_build();
  CHECK(s.find("Available Controllers:") != std::string::npos);
  CHECK(s.find("[X] Gloo") != std::string::npos);
  CHECK(s.find("[ ] MPI\n") != std::string::npos);
  CHECK(s.find("[X] elastic mode") != std::string::npos);
  // Ticks follow the build, never more.
  BuiltComponents none;
  std::string bare = render_check_build(none);
  CHECK(bare.find("    [ ] PyTorch\n") != std::string::npos);
  CHECK(bare.find("    [ ] CUDA\n") != std::string::npos);
  CHECK(bare.find("    [ ] NCCL\n") != std::string::npos);
  BuiltComponents all{true, true, true};
  std::string full = render_check_build(all);
  CHECK(full.find("[X] PyTorch (hvdcomm.torch") != std::string::npos);
  CHECK(full.find("[X] CUDA (component built") != std::string::npos);
  CHECK(full.find("[X] NCCL (device allreduce/broadcast for ranks on distinct GPUs") != std::string::npos);
  BuiltComponents cuda_only{true, true, false};
  CHECK(render_check_build(cuda_only).find("[ ] NCCL (not found at build time") != std::string::npos);
  BuiltComponents nccl_no_cuda{true, false, true};
  CHECK(render_check_build(nccl_no_cuda).find("    [ ] NCCL\n") != std::string::npos);
}
