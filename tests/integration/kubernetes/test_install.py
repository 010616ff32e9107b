#!/usr/bin/env python3
"""scripts/install.sh, the Dockerfile's install step, against the suite's own
build tree ($HVD_BUILD_DIR, default <repo>/build) into a temporary prefix:
the installed hvdrun/horovodrun run, the library and the MPI plug-in are
there, hvdcomm and the horovod package import from the prefix alone and load
the prefix's libhvd_collective, and a 2-rank job of the installed hvdrun
running `import horovod.torch` allreduces correctly. Plus the Kubernetes
helpers (hvd-entrypoint, hvd-discover-hosts) and the examples."""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
BUILD = os.environ.get("HVD_BUILD_DIR") or os.path.join(REPO, "build")
INSTALL = os.path.join(REPO, "scripts", "install.sh")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


class InstallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="hvd-install-")
        cls.prefix = os.path.join(cls.tmp, "prefix")
        r = subprocess.run([INSTALL, BUILD, cls.prefix], capture_output=True, text=True, timeout=120)
        cls.install = r
        cls.pydir = None
        for line in r.stdout.splitlines():
            if line.startswith("install.sh: installed into"):
                cls.pydir = line.rsplit(" in ", 1)[1].rstrip(")")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def env(self):
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONHOME")}
        env["PYTHONPATH"] = self.pydir
        env["PATH"] = os.path.join(self.prefix, "bin") + ":/usr/bin:/bin"
        return env

    def test_install_layout_and_binaries(self):
        self.assertEqual(self.install.returncode, 0, self.install.stderr)
        self.assertTrue(self.pydir and self.pydir.startswith(self.prefix), self.install.stdout[-500:])
        bin_ = os.path.join(self.prefix, "bin")
        r = subprocess.run([os.path.join(bin_, "hvdrun"), "--version"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0)
        self.assertRegex(r.stdout, r"^hvdrun \d+\.\d+\.\d+")
        self.assertEqual(os.readlink(os.path.join(bin_, "horovodrun")), "hvdrun")
        r2 = subprocess.run([os.path.join(bin_, "horovodrun"), "--version"], capture_output=True, text=True)
        self.assertEqual((r2.returncode, r2.stdout), (0, r.stdout))
        lib = os.path.join(self.prefix, "lib")
        self.assertTrue(os.path.isfile(os.path.join(lib, "libhvd_collective.so")))
        self.assertTrue(os.path.isfile(os.path.join(self.prefix, "include", "hvd", "collective", "c_api.h")))
        for tool in ("hvd-entrypoint", "hvd-discover-hosts"):
            path = os.path.join(bin_, tool)
            self.assertTrue(os.access(path, os.X_OK), path)
            r = subprocess.run([path, "--help"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
        r = subprocess.run([os.path.join(bin_, "hvd-entrypoint"), "nope"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(sorted(os.listdir(os.path.join(self.prefix, "share", "hvdrun", "examples", "python"))),
                         sorted(os.path.basename(p) for p in glob.glob(os.path.join(REPO, "examples", "python", "*.py"))))

    def test_python_packages_import_from_the_prefix(self):
        code = ("import hvdcomm, hvdcomm._core as c, horovod, horovod.torch; "
                "print(hvdcomm.__file__); print(horovod.__file__); print(c.__file__)")
        r = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=self.env(), cwd=self.tmp,
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        files = r.stdout.split()
        self.assertEqual(len(files), 3)
        for f in files:
            self.assertTrue(f.startswith(self.pydir), f)
        # The installed extension loads the installed library (RPATH $ORIGIN/...).
        ldd = subprocess.run(["ldd", files[2]], capture_output=True, text=True).stdout
        line = [x for x in ldd.splitlines() if "libhvd_collective.so" in x]
        self.assertEqual(len(line), 1, ldd)
        self.assertIn(os.path.realpath(os.path.join(self.prefix, "lib")), os.path.realpath(line[0].split("=>")[1].split()[0]))

    def test_installed_hvdrun_runs_a_horovod_torch_job(self):
        code = ("import torch, horovod.torch as hvd; hvd.init(); "
                "t = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum); "
                "print('rank', hvd.rank(), 'of', hvd.size(), 'sum', t.item())")
        r = subprocess.run([os.path.join(self.prefix, "bin", "horovodrun"), "-np", "2", "-H", "localhost:2", PYTHON,
                            "-c", code], capture_output=True, text=True, env=self.env(), cwd=self.tmp, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("rank 0 of 2 sum 3.0", r.stdout)
        self.assertIn("rank 1 of 2 sum 3.0", r.stdout)

    def test_dockerfile_runs_the_tested_scripts(self):
        # The Dockerfile's steps are the scripts this suite runs, in order,
        # with the arguments they take (test_container.py builds and runs the
        # image itself: label container). Two stages: the builder has the
        # toolchain; the runtime stage only the runtime packages and the
        # builder's staging root.
        with open(os.path.join(REPO, "conf", "docker", "Dockerfile")) as f:
            text = f.read().replace("\\\n", " ")
        self.assertIn("ARG BASE_IMAGE=debian:bookworm\n", text)
        builder, runtime = text.split("\nFROM ${BASE_IMAGE} AS builder\n", 1)[1].split("\nFROM ${BASE_IMAGE}\n", 1)

        def runs(stage):
            return [line[4:].strip() for line in stage.splitlines() if line.startswith("RUN ")]

        def scripts(stage):
            return [m for r in runs(stage) for m in re.findall(r"(?:scripts|conf/docker)/[\w./-]+\.sh", r)]
        for sc in scripts(builder):
            self.assertTrue(os.access(os.path.join(REPO, sc), os.X_OK), sc)
        self.assertEqual(scripts(builder), ["scripts/setup.sh", "conf/docker/install_cuda.sh", "scripts/install.sh"])
        self.assertIn("HVD_SKIP_K8S_TOOLS=1 HVD_SKIP_CONTAINER_ENGINE=1 HVD_SKIP_SLURM=1 HVD_SKIP_TEST_MPI=1 scripts/setup.sh",
                      runs(builder)[0])
        self.assertIn("DESTDIR=/opt/hvdrun/stage scripts/install.sh /tmp/hvdrun-build /usr/local", runs(builder)[2])
        # The build tree is removed in the RUN that made it (a later RUN would
        # leave it in a layer); the runtime stage never sees it anyway.
        self.assertIn("rm -rf /tmp/hvdrun-build", runs(builder)[2])
        # Package layers come before the source: only scripts/setup.sh and
        # install_cuda.sh are copied before them.
        copies = [line for line in builder.splitlines() if line.startswith("COPY ")]
        self.assertEqual(copies, ["COPY scripts/setup.sh scripts/fetch_k8s_tools.sh scripts/",
                                  "COPY conf/docker/install_cuda.sh conf/docker/", "COPY . ."])
        # Runtime: the package list, then the staging root; no compiler, no source.
        rt_copies = [line for line in runtime.splitlines() if line.startswith("COPY ")]
        self.assertEqual(rt_copies, ["COPY conf/docker/runtime-packages.txt /tmp/runtime-packages.txt",
                                     "COPY conf/docker/install_cuda.sh /tmp/install_cuda.sh",
                                     "COPY --from=builder /opt/hvdrun/stage/ /"])
        self.assertIn("runtime-packages.txt", runs(runtime)[0])
        self.assertEqual(runs(runtime)[-1], "ldconfig && hvd-entrypoint prepare-image")
        self.assertNotIn("setup.sh", runtime)
        with open(os.path.join(REPO, "conf", "docker", "runtime-packages.txt")) as f:
            pkgs = [ln.split("#")[0].strip() for ln in f if ln.split("#")[0].strip()]
        for p in pkgs:
            self.assertFalse(p.endswith("-dev") or p in ("build-essential", "cmake", "git", "g++", "gcc"), p)
        self.assertIn("python3-torch", pkgs)
        self.assertIn('ENTRYPOINT ["hvd-entrypoint"]', runtime)
        with open(os.path.join(REPO, "conf", "docker", "Dockerfile.dockerignore")) as f:
            ignored = f.read().split()
        for path in ("build", ".tools", ".git", "tests", "docs"):
            self.assertIn(path, ignored)

    def test_dockerfile_configure_line(self):
        # The image's configure step (Release, no tests) configures, and its
        # build would produce every target install.sh installs. (Building it
        # would take minutes; the suite's own build covers the code.)
        with open(os.path.join(REPO, "conf", "docker", "Dockerfile")) as f:
            text = f.read().replace("\\\n", " ")
        m = re.search(r"RUN cmake -S \. -B /tmp/hvdrun-build (.*?) \$\(", text)
        self.assertIsNotNone(m, "configure step not found")
        flags = m.group(1).replace('"$BUILD_TYPE"', "Release").split()
        self.assertEqual(flags, ["-DCMAKE_BUILD_TYPE=Release", "-DHVD_BUILD_TESTS=OFF"])
        build = os.path.join(self.tmp, "image-build")
        r = subprocess.run(["cmake", "-S", REPO, "-B", build, *flags], capture_output=True, text=True, timeout=170)
        self.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr[-2000:])
        for sub in ("apps/hvdrun", "apps/hvdbench", "lib/collective", "lib/collective/mpi_bootstrap", "python"):
            self.assertTrue(os.path.exists(os.path.join(build, sub, "cmake_install.cmake")), sub)
        self.assertFalse(os.path.exists(os.path.join(build, "tests")))  # no tests in the image
        shutil.rmtree(build, ignore_errors=True)

    def test_usage_errors(self):
        r = subprocess.run([INSTALL], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("usage:", r.stderr)
        r = subprocess.run([INSTALL, self.tmp, os.path.join(self.tmp, "p2")], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("is not a configured CMake build tree", r.stderr)
        r = subprocess.run([INSTALL, BUILD, "relative/prefix"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("must be an absolute path", r.stderr)


if __name__ == "__main__":
    unittest.main()
