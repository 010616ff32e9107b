"""python.install: `cmake --install` of the build tree into a temporary
prefix, then the installed tree is used without the build tree:

* bin/hvdrun, and bin/horovodrun, a symbolic link that resolves to the
  installed hvdrun (not to the build tree); both run `--version`;
* libhvd_collective.so (+ the MPI bootstrap plug-in when built) in LIBDIR,
  c_api.h in include/hvd/collective; a C program compiled against them runs
  a size-1 allreduce;
* with PYTHONPATH = <prefix>/<python dir> only (no LD_LIBRARY_PATH),
  `import hvdcomm.torch` loads the installed _core and the installed
  libhvd_collective.so (checked in /proc/self/maps) and a size-1
  allreduce works;
* hvdcomm.runner.run (horovod.run) from the installed tree starts the
  installed bin/hvdrun (found through the installed _build_info.py) and
  runs 2 ranks that import the installed package;
* the `horovod` shim is absent after a plain install (unless the build has
  HVD_INSTALL_HOROVOD_COMPAT=ON) and importable after
  `cmake --install --component horovod_compat`;
* the docs in share/doc/hvdrun, the man pages hvdrun.1 (every flag of
  `hvdrun --help`) and horovodrun.1 in share/man/man1;
* the install ends with the `export PATH=...` / `export PYTHONPATH=...`
  lines for the prefix used, and the README's quick start runs with exactly
  those lines in a shell: `horovodrun -np 2 -H localhost:2` of a
  horovod.torch script (issue 33 item 4).

usage: install_test.py CMAKE BUILD_DIR PYTHON PY_DIR LIBDIR CC MPI_PLUGIN(0|1) COMPAT_DEFAULT(0|1)
The temporary prefix is removed whatever happens. Exit 77 (skip) only for
the torch part when PYTHON lacks torch, after everything else passed."""
import os
import shutil
import subprocess
import sys
import tempfile

cmake, build, py, py_dir, libdir, cc, mpi_plugin, compat_default = sys.argv[1:9]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def run(cmd, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, **kw)
    if p.returncode != 0:
        print(f"$ {' '.join(cmd)}\n{p.stdout}", flush=True)
    return p


def clean_env(**extra):
    """No hvdrun job variables (a size-1 job), no library search path, no
    user site: only what the installed tree provides."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HOROVOD_", "HVD", "OMPI_", "PMI_", "PMIX_"))
           and k not in ("LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME")}
    env["PYTHONNOUSERSITE"] = "1"
    env.update(extra)
    return env


PY_CHECK = r"""
import os, sys
prefix = os.path.realpath(sys.argv[1])
import hvdcomm.torch as hvd
import hvdcomm._core as core
import hvdcomm.torch.compression, hvdcomm.torch.functions, hvdcomm.torch.mpi_ops, hvdcomm.torch.optimizer
import hvdcomm.torch.elastic.sampler, hvdcomm.torch.elastic.state
import torch
for m in (hvd, core, hvd.mpi_ops, hvd.compression, hvd.functions, hvd.optimizer, hvd.elastic.state,
          hvd.elastic.sampler):
    assert os.path.realpath(m.__file__).startswith(prefix + os.sep), m.__file__
hvd.init()
assert hvd.is_initialized() and hvd.size() == 1 and hvd.rank() == 0 and hvd.is_homogeneous()
out = hvd.allreduce(torch.arange(4, dtype=torch.float32), op=hvd.Sum, name="installed")
assert torch.equal(out, torch.arange(4, dtype=torch.float32)), out
libs = {l.split()[-1] for l in open("/proc/self/maps") if "libhvd_collective" in l}
assert libs and all(os.path.realpath(l).startswith(prefix + os.sep) for l in libs), libs
hvd.shutdown()
print("installed hvdcomm ok:", sorted(libs))
"""

RUN_CHECK = r"""
import os, sys
prefix = os.path.realpath(sys.argv[1])
import hvdcomm, hvdcomm.runner as runner
assert os.path.realpath(runner.__file__).startswith(prefix + os.sep), runner.__file__
hvdrun = runner.find_hvdrun()
assert os.path.realpath(hvdrun) == os.path.join(prefix, "bin", "hvdrun"), hvdrun
out = runner.run(os.getcwd, num_proc=2)
assert out == [os.getcwd()] * 2, out
print("installed hvdcomm.runner ok:", hvdcomm.__version__, hvdrun)
"""

C_CHECK = r"""
#include "hvd/collective/c_api.h"
#include <stdio.h>
int main(void) {
  float in[3] = {1, 2, 3}, out[3] = {0, 0, 0};
  if (hvd_init() != HVD_OK || hvd_size() != 1) { fprintf(stderr, "init: %s\n", hvd_last_error()); return 1; }
  if (hvd_allreduce("c", in, out, 3, HVD_FLOAT32, HVD_SUM) != HVD_OK || out[2] != 3.0f) {
    fprintf(stderr, "allreduce: %s\n", hvd_last_error()); return 1;
  }
  hvd_shutdown();
  puts("installed C ABI ok");
  return 0;
}
"""

prefix = tempfile.mkdtemp(prefix="hvd-install-test-")
torch_missing = False
try:
    p = run([cmake, "--install", build, "--prefix", prefix])
    check(p.returncode == 0, "cmake --install <build> --prefix <tmp>")
    if p.returncode != 0:
        raise SystemExit(1)
    exports = [l.split("--   ", 1)[1] for l in p.stdout.splitlines() if l.startswith("--   export ")]
    check(f'export PATH="{prefix}/bin:$PATH"' in exports, f"the install prints the PATH line: {exports}")
    check(f'export PYTHONPATH="{os.path.join(prefix, py_dir)}${{PYTHONPATH:+:$PYTHONPATH}}"' in exports,
          f"the install prints the PYTHONPATH line: {exports}")
    doc = os.path.join(prefix, "share", "doc", "hvdrun")
    check(all(os.path.isfile(os.path.join(doc, f)) for f in ("README.md", "LICENSE", "docs/cli.md",
                                                               "docs/python.md", "docs/exit-codes.md")),
          "README, LICENSE and docs/ installed in share/doc/hvdrun")
    man = os.path.join(prefix, "share", "man", "man1")
    if os.path.isfile(os.path.join(man, "hvdrun.1")):
        with open(os.path.join(man, "hvdrun.1")) as f:
            page = f.read().replace("\\-", "-")
        import re
        flags = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", run([os.path.join(prefix, "bin", "hvdrun"),
                                                                   "--help"], env=clean_env()).stdout))
        missing_flags = sorted(f for f in flags if f not in page)
        check(len(flags) > 40 and not missing_flags, f"hvdrun.1 lists every flag of --help (missing: {missing_flags})")
        with open(os.path.join(man, "horovodrun.1")) as f:
            check(f.read().strip() == ".so man1/hvdrun.1", "horovodrun.1 points at hvdrun.1")
    else:
        check(False, "share/man/man1/hvdrun.1 installed")
    lib = os.path.join(prefix, libdir)
    site = os.path.join(prefix, py_dir)
    hvdrun = os.path.join(prefix, "bin", "hvdrun")
    horovodrun = os.path.join(prefix, "bin", "horovodrun")
    check(os.path.isfile(hvdrun) and os.access(hvdrun, os.X_OK), "bin/hvdrun installed")
    check(os.path.islink(horovodrun) and os.path.realpath(horovodrun) == os.path.realpath(hvdrun),
          "bin/horovodrun installed: a link to the installed bin/hvdrun")
    for program in (hvdrun, horovodrun):
        p = run([program, "--version"], env=clean_env(), cwd=prefix)
        check(p.returncode == 0 and p.stdout.startswith("hvdrun "), f"bin/{os.path.basename(program)} --version runs")
    p = run([horovodrun, "--help"], env=clean_env(), cwd=prefix)
    check(p.returncode == 0 and "Usage: horovodrun -np N" in p.stdout, "bin/horovodrun --help names horovodrun")
    check(os.path.isfile(os.path.join(lib, "libhvd_collective.so")), f"{libdir}/libhvd_collective.so installed")
    check(os.path.isfile(os.path.join(prefix, "include/hvd/collective/c_api.h")),
          "include/hvd/collective/c_api.h installed")
    if mpi_plugin == "1":
        check(os.path.isfile(os.path.join(lib, "libhvd_mpi_bootstrap.so")),
              f"{libdir}/libhvd_mpi_bootstrap.so installed next to the library")
    cores = [f for f in os.listdir(os.path.join(site, "hvdcomm")) if f.startswith("_core") and f.endswith(".so")] \
        if os.path.isdir(os.path.join(site, "hvdcomm")) else []
    check(len(cores) == 1, f"{py_dir}/hvdcomm/_core*.so installed")
    py_files = ["hvdcomm/__init__.py", "hvdcomm/_build_info.py", "hvdcomm/elastic.py"] + [
        f"hvdcomm/runner/{m}.py" for m in ("__init__", "channel", "serialize", "task")] + [
        f"hvdcomm/torch/{m}.py" for m in ("__init__", "mpi_ops", "compression", "functions", "optimizer",
                                          "sync_batch_norm", "elastic/__init__", "elastic/state", "elastic/sampler")]
    missing = [f for f in py_files if not os.path.isfile(os.path.join(site, f))]
    check(not missing, f"pure-Python files installed (missing: {missing})")
    compat_dir = os.path.join(site, "horovod")
    if compat_default == "1":
        check(os.path.isfile(os.path.join(compat_dir, "torch/__init__.py")),
              "horovod shim installed (HVD_INSTALL_HOROVOD_COMPAT=ON)")
    else:
        check(not os.path.exists(compat_dir), "horovod shim not installed without HVD_INSTALL_HOROVOD_COMPAT")

    # A C user: compile against the installed header, link the installed library.
    src = os.path.join(prefix, "c_check.c")
    exe = os.path.join(prefix, "c_check")
    with open(src, "w") as f:
        f.write(C_CHECK)
    p = run([cc, "-std=c99", "-I", os.path.join(prefix, "include"), src, "-o", exe,
             "-L", lib, "-lhvd_collective", f"-Wl,-rpath,{lib}"])
    check(p.returncode == 0, "a C program compiles and links against the installed header and library")
    if p.returncode == 0:
        p = run([exe], env=clean_env(), cwd=prefix)
        check(p.returncode == 0 and "ok" in p.stdout, "it runs a size-1 allreduce")

    # horovod.run from the installed tree: its _build_info names the
    # installed bin/hvdrun, and the workers import the installed package.
    p = run([py, "-c", RUN_CHECK, prefix], env=clean_env(PYTHONPATH=site), cwd=prefix)
    check(p.returncode == 0, "hvdcomm.runner.run from the installed tree starts <prefix>/bin/hvdrun, 2 ranks")

    if run([py, "-c", "import torch"], env=clean_env()).returncode != 0:
        torch_missing = True
    else:
        # cwd = the prefix, so neither '' nor the build tree is on sys.path.
        p = run([py, "-c", PY_CHECK, prefix], env=clean_env(PYTHONPATH=site), cwd=prefix)
        check(p.returncode == 0, "import hvdcomm.torch from the installed site dir only; size-1 allreduce")
        if p.returncode == 0:
            print(p.stdout.strip())
        shim = "import horovod.torch as hvd, torch; hvd.init(); " \
               "assert hvd.allreduce(torch.ones(2), name='s').tolist() == [1.0, 1.0]; " \
               "from horovod.torch.mpi_ops import allreduce_async; " \
               "from horovod.torch.optimizer import DistributedOptimizer; " \
               "from horovod.torch.compression import Compression; " \
               "from horovod.torch.functions import broadcast_object; " \
               "from horovod.torch.elastic.state import TorchState; " \
               "from horovod.torch.elastic.sampler import ElasticSampler; " \
               "assert allreduce_async is hvd.allreduce_async and TorchState is hvd.elastic.TorchState; " \
               "import horovod, hvdcomm, hvdcomm.runner; from horovod.runner import run; " \
               "from horovod.common.util import split_list; from horovod.common.elastic import run_fn; " \
               "assert horovod.__version__ == hvdcomm.__version__ and horovod.run is run is hvdcomm.runner.run; " \
               "print('shim ok')"
        if compat_default != "1":
            p = run([cmake, "--install", build, "--prefix", prefix, "--component", "horovod_compat"])
            check(p.returncode == 0, "cmake --install --component horovod_compat")
            check(os.path.isfile(os.path.join(compat_dir, "torch/__init__.py")), "horovod shim installed on request")
        p = run([py, "-c", shim], env=clean_env(PYTHONPATH=site), cwd=prefix)
        check(p.returncode == 0 and "shim ok" in p.stdout, "import horovod.torch from the installed shim works")
        # The README's quick start with exactly the lines the install printed.
        train = os.path.join(prefix, "train.py")
        with open(train, "w") as f:
            f.write("import horovod.torch as hvd, torch\nhvd.init()\n"
                    "t = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)\n"
                    "print(f'rank {hvd.rank()} of {hvd.size()}: sum {t.item()}')\n")
        env = clean_env()
        env["PATH"] = ":".join(d for d in env.get("PATH", "/usr/bin:/bin").split(":")
                               if not os.path.isfile(os.path.join(d, "hvdrun")))  # no other hvdrun
        p = run(["sh", "-c", "\n".join(exports + [f"horovodrun -np 2 -H localhost:2 {py} {train}"])], env=env,
                cwd=prefix)
        check(p.returncode == 0 and "[0]<stdout>:rank 0 of 2: sum 3.0" in p.stdout
              and "[1]<stdout>:rank 1 of 2: sum 3.0" in p.stdout,
              f"the printed PATH/PYTHONPATH lines, then horovodrun -np 2 of a horovod.torch script:\n{p.stdout}")
finally:
    shutil.rmtree(prefix, ignore_errors=True)
check(not os.path.exists(prefix), "temporary prefix removed")
if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
if torch_missing:
    print(f"SKIP: {py} cannot import torch (install python3-torch); the C and file checks passed")
    sys.exit(77)
print("install ok")
