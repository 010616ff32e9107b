// --check-build's output (job/check_build.cpp).
#include "hvd/launcher/job/check_build.h"

#include <catch2/catch.hpp>

#include <string>

using namespace hvd::launcher;

TEST_CASE("check-build lists what hvdrun provides", "[check_build]") {
  WorkerPython can;  // the worker interpreter imports horovod.torch
  can.interpreter = "python3";
  can.imports_torch_binding = true;
  can.module_path = "/opt/hvd/lib/python3.11/dist-packages/horovod/torch/__init__.py";
  WorkerPython cannot;
  cannot.interpreter = "python3";
  cannot.problem = "ModuleNotFoundError: No module named 'horovod'";
  BuiltComponents all{true, true, true};
  std::string s = render_check_build(all, can);
  CHECK(s.find("Available Controllers:") != std::string::npos);
  CHECK(s.find("[X] Gloo") != std::string::npos);
  CHECK(s.find("[ ] MPI\n") != std::string::npos);
  CHECK(s.find("[X] elastic mode") != std::string::npos);
  // Ticks follow the build, never more.
  BuiltComponents none;
  std::string bare = render_check_build(none, cannot);
  CHECK(bare.find("    [ ] PyTorch\n") != std::string::npos);
  CHECK(bare.find("    [ ] CUDA\n") != std::string::npos);
  CHECK(bare.find("    [ ] NCCL\n") != std::string::npos);
  CHECK(s.find("[X] PyTorch (python3 imports horovod.torch from /opt/hvd/lib/python3.11/dist-packages/horovod/torch/"
               "__init__.py)") != std::string::npos);
  CHECK(s.find("[X] CUDA (component built") != std::string::npos);
  CHECK(s.find("[X] NCCL (device allreduce/broadcast for ranks on distinct GPUs") != std::string::npos);
  // Built, but the interpreter that runs the workers cannot import it: not
  // ticked, and the line says why (horovodrun's check_build asks its Python).
  std::string unusable = render_check_build(all, cannot);
  CHECK(unusable.find("[ ] PyTorch (built, but python3 cannot import horovod.torch: ModuleNotFoundError: No module "
                      "named 'horovod'; set PYTHONPATH") != std::string::npos);
  CHECK(unusable.find("[X] PyTorch") == std::string::npos);
  BuiltComponents cuda_only{true, true, false};
  CHECK(render_check_build(cuda_only, can).find("[ ] NCCL (not found at build time") != std::string::npos);
  BuiltComponents nccl_no_cuda{true, false, true};
  CHECK(render_check_build(nccl_no_cuda, can).find("    [ ] NCCL\n") != std::string::npos);
}

TEST_CASE("check-build asks the worker interpreter on PATH", "[check_build]") {
  // This machine's python3 (or python) answers, whatever it can import.
  const WorkerPython py = probe_worker_python();
  CHECK((py.interpreter == "python3" || py.interpreter == "python" || py.interpreter.empty()));
  CHECK(py.imports_torch_binding != !py.problem.empty());
}
