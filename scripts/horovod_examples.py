#!/usr/bin/env python3
"""Runs Horovod's PyTorch examples, unmodified, through hvdrun's `horovodrun`
and checks that every rank ends with the same model: the examples are what
users try first, so they must run on hvdrun as they do on Horovod. The
examples are taken from a Horovod checkout (not part of this repository):

    scripts/horovod_examples.py --horovod <clone or bare mirror of horovod/horovod> [--build build]
                                [--list] [-k SUBSTR]

Cases (--list prints them): examples/pytorch/pytorch_synthetic_benchmark.py
(plain, --fp16-allreduce, --use-adasum), pytorch_mnist.py on a tiny
synthetic MNIST, pytorch_imagenet_resnet50.py on a tiny synthetic
ImageFolder (checkpoints, then a second job resumes from them), and
examples/elastic/pytorch/pytorch_synthetic_benchmark_elastic.py and
pytorch_imagenet_resnet50_elastic.py under --host-discovery-script, growing
1 -> 2 and shrinking 2 -> 1; each must exit 0. The ImageNet elastic grow
keeps the example's default weight decay (--wd 5e-5): the newcomer's
parameters must be bit-identical to the others' (before 0f80a2c the
initialising step of broadcast_optimizer_state moved them: 2e-7 here).

Every example runs under a wrapper (written at run time, like everything
else here, into one temporary directory that is removed at the end): it runs
the example with runpy as __main__, records the optimizer that the example
passes through hvd.DistributedOptimizer, and afterwards allgathers its
parameters and optimizer state (momentum): they must be identical on every
rank, and the last world must have the expected size. For the elastic cases
the wrapper also makes the resize deterministic: at the Nth commit of
TorchState, rank 0 rewrites the hosts file that the discovery script prints
and every rank keeps committing (the example's own commit, which checks for
host updates) until hvdrun's new world interrupts it.

Packages the examples import but that are not installed (torchvision, tqdm,
filelock, tensorboard's SummaryWriter) get small stand-ins, generated only
for what is missing; the stand-in models are tiny (not ResNet-50) and the
data sets read the synthetic files written here (MNIST's IDX files, an
ImageFolder of 16x16 PNGs: the real torchvision reads them too, and would
bring the real, much slower ResNet-50; not tried). Each case has a timeout;
the jobs run in their own session and with a token in their environment,
which finds anything left behind (a failure: hvdrun must leave nothing).
Prints PASS/FAIL per case with its wall time (and the output's last 30
lines on failure); exit 1 if any failed.
"""
import argparse
import json
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import time
import uuid
import zlib

ap = argparse.ArgumentParser()
ap.add_argument("--horovod", required=True, help="a clone (or bare mirror) of github.com/horovod/horovod")
ap.add_argument("--build", default="build")
ap.add_argument("--python", default="/usr/bin/python3", help="a Python with torch")
ap.add_argument("--list", action="store_true", help="print the cases and exit")
ap.add_argument("-k", metavar="SUBSTR", help="run only the cases whose name contains SUBSTR")
ap.add_argument("-v", "--verbose", action="store_true", help="print every job's output")
A = ap.parse_args()
BUILD = os.path.abspath(A.build)
HVDRUN = os.path.join(BUILD, "apps/hvdrun/horovodrun")
TAIL = 30

# ---------------------------------------------------------------------------
# Stand-ins, written into the stub directory only for a package that the
# Python given by --python cannot import. Our own code, not the packages'.

STUBS = {
    "torchvision": {
        "torchvision/__init__.py": '''\
# Stand-in for torchvision (not installed here), written by hvdrun's scripts/horovod_examples.py:
# only what Horovod's PyTorch examples use. Not the real package.
from . import datasets, models, transforms  # noqa: F401
__version__ = "0.0.0+stand-in"
''',
        "torchvision/models.py": '''\
# Stand-in for torchvision.models: every model name gives the same tiny classifier (not ResNet-50).
import torch


class _Tiny(torch.nn.Sequential):
    def __init__(self, num_classes=1000, **kwargs):
        super().__init__(torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(48, num_classes))


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Tiny
''',
        "torchvision/datasets.py": '''\
# Stand-in for torchvision.datasets: MNIST and ImageFolder read the synthetic files that
# scripts/horovod_examples.py wrote (MNIST's IDX files; 8-bit RGB PNGs of its own writer) and give
# float tensors in [0, 1], as ToTensor would. No downloads.
import os
import struct
import zlib

import torch


def _idx(path):  # IDX: magic 0 0 8 ndim, ndim big-endian sizes, then uint8 data
    with open(path, "rb") as f:
        b = f.read()
    dims = struct.unpack(">%dI" % b[3], b[4:4 + 4 * b[3]])
    return torch.frombuffer(bytearray(b[4 + 4 * b[3]:]), dtype=torch.uint8).reshape(dims)


def _png(path):  # only the PNGs scripts/horovod_examples.py writes: RGB, 8 bits, filter 0 on every row
    with open(path, "rb") as f:
        b = f.read()
    pos, idat = 8, b""
    while pos < len(b):
        n, kind = struct.unpack(">I4s", b[pos:pos + 8])
        if kind == b"IHDR":
            w, h = struct.unpack(">II", b[pos + 8:pos + 16])
        elif kind == b"IDAT":
            idat += b[pos + 8:pos + 8 + n]
        pos += 12 + n
    rows = torch.frombuffer(bytearray(zlib.decompress(idat)), dtype=torch.uint8).reshape(h, 1 + 3 * w)
    return rows[:, 1:].reshape(h, w, 3).permute(2, 0, 1).float().div(255)


class _Dataset(torch.utils.data.Dataset):
    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        x = self.load(i)
        return (self.transform(x) if self.transform else x), int(self.targets[i])


class MNIST(_Dataset):
    def __init__(self, root, train=True, transform=None, target_transform=None, download=False):
        raw = os.path.join(root, "MNIST", "raw", "train" if train else "t10k")
        self.data = _idx(raw + "-images-idx3-ubyte")
        self.targets = _idx(raw + "-labels-idx1-ubyte").long()
        self.transform = transform

    def load(self, i):
        return self.data[i].unsqueeze(0).float().div(255)


class ImageFolder(_Dataset):
    def __init__(self, root, transform=None, **kwargs):
        self.classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        self.samples = [(os.path.join(root, c, f), i) for i, c in enumerate(self.classes)
                        for f in sorted(os.listdir(os.path.join(root, c)))]
        self.targets = [y for _, y in self.samples]
        self.transform = transform

    def load(self, i):
        return _png(self.samples[i][0])
''',
        "torchvision/transforms.py": '''\
# Stand-in for torchvision.transforms: the stand-in data sets already give float tensors, so every
# transform the examples name passes its input through unchanged.
class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


class _Unchanged:
    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, x):
        return x


ToTensor = Normalize = Resize = CenterCrop = RandomResizedCrop = RandomHorizontalFlip = _Unchanged
''',
    },
    "tqdm": {"tqdm.py": '''\
# Stand-in for tqdm (not installed here): one line per progress bar, when it closes.
class tqdm:
    def __init__(self, total=None, desc="", disable=False, **kwargs):
        self.total, self.desc, self.disable, self.n, self.postfix = total, desc, disable, 0, {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self.disable:
            print("%s %d/%s %s" % (self.desc, self.n, self.total, self.postfix), flush=True)

    def set_postfix(self, postfix):
        self.postfix = postfix

    def update(self, n=1):
        self.n += n
'''},
    "filelock": {"filelock.py": '''\
# Stand-in for filelock (not installed here): the examples lock around a download that never happens.
class FileLock:
    def __init__(self, path, *args, **kwargs):
        self.path = path

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
'''},
    # torch.utils.tensorboard is part of torch but needs the tensorboard package; the wrapper puts this
    # module in its place (sys.modules) when it is used.
    "torch.utils.tensorboard": {"hvdex_tensorboard.py": '''\
# Stand-in for torch.utils.tensorboard (the tensorboard package is not installed here): a SummaryWriter
# that writes nothing.
class SummaryWriter:
    def __init__(self, *args, **kwargs):
        pass

    def add_scalar(self, *args, **kwargs):
        pass

    def close(self):
        pass
'''},
}

WRAPPER = '''\
"""Written by hvdrun's scripts/horovod_examples.py: runs one of Horovod's examples unmodified (runpy,
as __main__: python wrapper.py EXAMPLE ARGS...), then checks that the parameters and the optimizer
state of the optimizer the example made with hvd.DistributedOptimizer are identical on every rank.
HVDEX_RESIZE (JSON: at, size, hosts_file, hosts, wait) makes an elastic resize deterministic: at the
at-th commit of TorchState in a world of `size`, rank 0 writes `hosts` into the file the discovery
script prints, and every rank commits again until the new world interrupts it."""
import json
import os
import runpy
import sys
import time

import torch

if os.environ.get("HVDEX_STUB_TENSORBOARD"):
    import hvdex_tensorboard
    sys.modules["torch.utils.tensorboard"] = hvdex_tensorboard
import horovod.torch as hvd

optimizers = []
make_optimizer = hvd.DistributedOptimizer


def recording_optimizer(*args, **kwargs):
    optimizers.append(make_optimizer(*args, **kwargs))
    return optimizers[-1]


hvd.DistributedOptimizer = recording_optimizer

if os.environ.get("HVDEX_RESIZE"):
    resize = json.loads(os.environ["HVDEX_RESIZE"])
    commit, commits = hvd.elastic.TorchState.commit, [0]

    def resizing_commit(self):
        commit(self)
        commits[0] += 1
        if commits[0] != resize["at"] or hvd.size() != resize["size"]:
            return
        if hvd.rank() == 0:
            print("HVDEX resize at commit %d: discovery prints %s now" % (commits[0], resize["hosts"]), flush=True)
            with open(resize["hosts_file"] + ".tmp", "w") as f:
                f.write(resize["hosts"] + "\\n")
            os.replace(resize["hosts_file"] + ".tmp", resize["hosts_file"])
        deadline = time.monotonic() + resize["wait"]
        while time.monotonic() < deadline:
            time.sleep(0.1)
            commit(self)  # raises once hvdrun has published the new world
        raise RuntimeError("HVDEX: no new world %.0f s after the discovery change" % resize["wait"])

    hvd.elastic.TorchState.commit = resizing_commit

sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")

if not optimizers:
    sys.exit("HVDEX: the example made no hvd.DistributedOptimizer")
opt = optimizers[-1]
state = opt.state_dict()["state"]
found = {"params": [p for g in opt.param_groups for p in g["params"]],
         "state": [v for k in sorted(state) for _, v in sorted(state[k].items()) if torch.is_tensor(v)]}
same = True
report = "HVDEX-CHECK rank=%d size=%d" % (hvd.rank(), hvd.size())
for what, tensors in found.items():
    vec = torch.cat([t.detach().reshape(-1).double() for t in tensors] + [torch.zeros(0, dtype=torch.float64)])
    lengths = hvd.allgather_object(vec.numel(), name="hvdex.%s.n" % what)
    if len(set(lengths)) > 1:
        same, diff = False, "sizes %s" % lengths
    else:
        every = hvd.allgather(vec.unsqueeze(0), name="hvdex." + what)
        spread = (every - every[0]).abs().max().item() if vec.numel() else 0.0
        same, diff = same and spread == 0, "%g" % spread
    report += " %s=%d/%s" % (what, len(tensors), diff)
print("%s same=%d" % (report, same), flush=True)
sys.exit(0 if same else 1)
'''

# ---------------------------------------------------------------------------
# Synthetic data in the formats the real torchvision reads too.


def write_mnist(root, n_train=256, n_test=128):
    g = random.Random(1)
    raw = os.path.join(root, "MNIST", "raw")
    os.makedirs(raw)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        with open(os.path.join(raw, prefix + "-images-idx3-ubyte"), "wb") as f:
            f.write(struct.pack(">4BIII", 0, 0, 8, 3, n, 28, 28) + bytes(g.randrange(256) for _ in range(n * 784)))
        with open(os.path.join(raw, prefix + "-labels-idx1-ubyte"), "wb") as f:
            f.write(struct.pack(">4BI", 0, 0, 8, 1, n) + bytes(g.randrange(10) for _ in range(n)))


def png(w, h, rgb):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\0" + rgb[y * 3 * w:(y + 1) * 3 * w] for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def write_image_folder(root, classes, per_class, seed, size=16):
    g = random.Random(seed)
    for c in range(classes):
        os.makedirs(os.path.join(root, "n%08d" % c))
        for i in range(per_class):
            with open(os.path.join(root, "n%08d" % c, "%d.png" % i), "wb") as f:
                f.write(png(size, size, bytes(g.randrange(256) for _ in range(size * size * 3))))


# ---------------------------------------------------------------------------
# Jobs


class CaseFailed(Exception):
    def __init__(self, message, output=""):
        super().__init__(message)
        self.output = output


def token_pids(token):
    """Our processes still running: those with this case's token in their environment."""
    pids, mark = [], ("HVDEX_TOKEN=" + token).encode()
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if mark in f.read().split(b"\0"):
                    pids.append(int(name))
        except OSError:
            continue
    return pids


def stop(proc, token):
    """Stops a job and whatever it left: SIGINT to horovodrun if it still runs, then SIGKILL to its process
    group and to every process with the token. Returns those that were still running 5 s after horovodrun
    had exited by itself (it must leave none)."""
    exited = proc.poll() is not None
    if not exited:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
    deadline, left = time.monotonic() + 5, token_pids(token)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = token_pids(token)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in token_pids(token):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    return left if exited else []


def job(example, args, np_=2, size=2, resize=None):
    """Runs `horovodrun -np np_ python wrapper.py example args` in the case's directory and returns its
    output; fails unless it exits 0 within the case's time and the wrapper reports identical models on
    every rank of a last world of `size`. resize=(start_hosts, new_hosts, at_commit) makes it an elastic
    job whose discovery script prints start_hosts, then new_hosts from the at-th commit on."""
    d, token = CASE["dir"], uuid.uuid4().hex
    cmd = [HVDRUN, "-np", str(np_)]
    env = dict(ENV, HVDEX_TOKEN=token)
    if resize:
        hosts, discover = os.path.join(d, "hosts"), os.path.join(d, "discover.sh")
        with open(hosts, "w") as f:
            f.write(resize[0] + "\n")
        with open(discover, "w") as f:
            f.write(f"#!/bin/sh\ncat {hosts}\n")
        os.chmod(discover, 0o755)
        cmd += ["--min-np", "1", "--max-np", "2", "--host-discovery-script", discover]
        env["HVDEX_RESIZE"] = json.dumps({"at": resize[2], "size": np_, "hosts_file": hosts, "hosts": resize[1],
                                          "wait": 60})
    cmd += [A.python, WRAP, os.path.join(WORK, "examples", os.path.basename(example))] + args
    log = os.path.join(d, "output-" + token[:8])
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=d, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        timed_out, left = False, []
        try:
            proc.wait(timeout=max(1.0, CASE["deadline"] - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            left = stop(proc, token)
    with open(log, errors="replace") as f:
        output = f.read()
    if A.verbose:
        print("".join("    " + line + "\n" for line in [" ".join(cmd)] + output.splitlines()), end="", flush=True)
    if timed_out:
        raise CaseFailed(f"timed out after {CASE['timeout']} s", output)
    if proc.returncode != 0:
        raise CaseFailed(f"horovodrun exited {proc.returncode}", output)
    if left:
        raise CaseFailed(f"{len(left)} process(es) still running after horovodrun exited: {left}", output)
    checks = [line.split("HVDEX-CHECK ", 1)[1] for line in output.splitlines() if "HVDEX-CHECK " in line]
    if any(not c.endswith("same=1") for c in checks):  # an elastic job restarts the failed workers: look first
        raise CaseFailed("ranks differ: " + "; ".join(c for c in checks if not c.endswith("same=1")), output)
    want = [f"rank={r} size={size} " for r in range(size)]
    if len(checks) != size or any(not any(c.startswith(w) for c in checks) for w in want):
        raise CaseFailed(f"expected a check from each of {size} rank(s), got {checks}", output)
    return output


# ---------------------------------------------------------------------------
# Cases: name, timeout (s), description (--list), function

SYNTHETIC = ["--batch-size", "4", "--num-warmup-batches", "2", "--num-batches-per-iter", "2", "--num-iters", "3"]
SYNTHETIC_ELASTIC = ["--batch-size", "4", "--num-warmup-batches", "2", "--num-batches-per-iter", "2",
                     "--num-iters", "5"]


def imagenet_args(epochs):
    return ["--train-dir", os.path.join(WORK, "imagenet", "train"), "--val-dir", os.path.join(WORK, "imagenet", "val"),
            "--batch-size", "4", "--val-batch-size", "4", "--epochs", str(epochs)]


def synthetic(*extra):
    def run():
        job("examples/pytorch/pytorch_synthetic_benchmark.py", SYNTHETIC + list(extra))
    return run


def mnist():
    job("examples/pytorch/pytorch_mnist.py", ["--epochs", "2", "--batch-size", "32", "--test-batch-size", "64",
                                              "--data-dir", os.path.join(WORK, "mnist")])


def imagenet_checkpoint_resume():
    ck = os.path.join(CASE["dir"], "checkpoint-{epoch}.pth.tar")
    args = ["--checkpoint-format", ck, "--log-dir", os.path.join(CASE["dir"], "logs")]
    first = job("examples/pytorch/pytorch_imagenet_resnet50.py", imagenet_args(2) + args)
    missing = [ck.format(epoch=e) for e in (1, 2) if not os.path.exists(ck.format(epoch=e))]
    if "Train Epoch     #2" not in first or missing:
        raise CaseFailed(f"first job: no epoch 2 or no checkpoint ({missing})", first)
    second = job("examples/pytorch/pytorch_imagenet_resnet50.py", imagenet_args(3) + args)
    if "Train Epoch     #1" in second or "Train Epoch     #3" not in second or not os.path.exists(ck.format(epoch=3)):
        raise CaseFailed("second job did not resume at epoch 3 from checkpoint-2", second)
    return "epochs 1-2, then resumed at 3"


def elastic(example, args, start, new, at):
    def run():
        np_, size = int(start.split(":")[1]), int(new.split(":")[1])
        out = job(example, args(), np_=np_, size=size, resize=(start, new, at))
        if "HVDEX resize" not in out:
            raise CaseFailed("the resize was never requested (too few commits?)", out)
        return f"{np_} -> {size}"
    return run


SYN_EL = "examples/elastic/pytorch/pytorch_synthetic_benchmark_elastic.py"
IMG_EL = "examples/elastic/pytorch/pytorch_imagenet_resnet50_elastic.py"


def img_el_args():
    return imagenet_args(3) + ["--batches-per-commit", "1", "--log-dir", "logs"]


CASES = [
    ("synthetic", 60, "pytorch_synthetic_benchmark.py, np 2", synthetic()),
    ("synthetic_fp16", 60, "pytorch_synthetic_benchmark.py --fp16-allreduce, np 2", synthetic("--fp16-allreduce")),
    ("synthetic_adasum", 60, "pytorch_synthetic_benchmark.py --use-adasum, np 2", synthetic("--use-adasum")),
    ("mnist", 60, "pytorch_mnist.py, 2 epochs of a 256-image synthetic MNIST, np 2", mnist),
    ("imagenet_checkpoint_resume", 90,
     "pytorch_imagenet_resnet50.py, np 2: 2 epochs (checkpoints), then a job with --epochs 3 resumes at 3",
     imagenet_checkpoint_resume),
    ("synthetic_elastic_grow", 90, "pytorch_synthetic_benchmark_elastic.py, discovery localhost:1 -> localhost:2",
     elastic(SYN_EL, lambda: SYNTHETIC_ELASTIC, "localhost:1", "localhost:2", 5)),
    ("synthetic_elastic_shrink", 90, "pytorch_synthetic_benchmark_elastic.py, discovery localhost:2 -> localhost:1",
     elastic(SYN_EL, lambda: SYNTHETIC_ELASTIC, "localhost:2", "localhost:1", 5)),
    ("imagenet_elastic_grow_wd", 90,
     "pytorch_imagenet_resnet50_elastic.py (default --wd 5e-5), discovery localhost:1 -> localhost:2; "
     "the newcomer's parameters bit-identical", elastic(IMG_EL, img_el_args, "localhost:1", "localhost:2", 5)),
    ("imagenet_elastic_shrink", 90, "pytorch_imagenet_resnet50_elastic.py, discovery localhost:2 -> localhost:1",
     elastic(IMG_EL, img_el_args, "localhost:2", "localhost:1", 3)),
]

selected = [c for c in CASES if not A.k or A.k in c[0]]
if not selected:
    ap.error(f"no case name contains {A.k!r} (--list shows them)")
if A.list:
    for name, timeout, what, _ in selected:
        print(f"{name:28} {timeout:3d} s  {what}")
    sys.exit(0)


def on_sigterm(signum, frame):
    raise KeyboardInterrupt


signal.signal(signal.SIGTERM, on_sigterm)
passed, failures, t_start = 0, 0, time.monotonic()
with tempfile.TemporaryDirectory(prefix="hvd-examples-") as WORK:
    os.makedirs(os.path.join(WORK, "examples"))
    for path in sorted({SYN_EL, IMG_EL, "examples/pytorch/pytorch_synthetic_benchmark.py",
                        "examples/pytorch/pytorch_mnist.py", "examples/pytorch/pytorch_imagenet_resnet50.py"}):
        with open(os.path.join(WORK, "examples", os.path.basename(path)), "w") as f:
            f.write(subprocess.run(["git", "-C", A.horovod, "show", "HEAD:" + path],
                                   check=True, capture_output=True, text=True).stdout)
    stubs = os.path.join(WORK, "stubs")
    ENV = dict(os.environ, PYTHONPATH=f"{BUILD}/python:{BUILD}/python/compat", PYTHONDONTWRITEBYTECODE="1",
               HOME=os.path.join(WORK, "home"))
    probe = ("import importlib, json\nmissing = []\nfor m in %r:\n    try:\n        importlib.import_module(m)\n"
             "    except ImportError:\n        missing.append(m)\nprint(json.dumps(missing))" % list(STUBS))
    missing = json.loads(subprocess.run([A.python, "-c", probe], env=ENV, check=True, capture_output=True,
                                        text=True).stdout)
    for module in missing:
        for rel, text in STUBS[module].items():
            os.makedirs(os.path.dirname(os.path.join(stubs, rel)), exist_ok=True)
            with open(os.path.join(stubs, rel), "w") as f:
                f.write(text)
    ENV["PYTHONPATH"] += ":" + stubs
    if "torch.utils.tensorboard" in missing:
        ENV["HVDEX_STUB_TENSORBOARD"] = "1"
    WRAP = os.path.join(WORK, "wrapper.py")
    with open(WRAP, "w") as f:
        f.write(WRAPPER)
    os.makedirs(ENV["HOME"])
    write_mnist(os.path.join(WORK, "mnist"))
    write_image_folder(os.path.join(WORK, "imagenet", "train"), 4, 8, seed=3)
    write_image_folder(os.path.join(WORK, "imagenet", "val"), 4, 4, seed=4)
    head = subprocess.run(["git", "-C", A.horovod, "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    print(f"Horovod {head}; stand-ins for: {', '.join(missing) or 'nothing'}", flush=True)
    try:
        for name, timeout, _, fn in selected:
            t0 = time.monotonic()
            CASE = {"dir": tempfile.mkdtemp(prefix=name + "-", dir=WORK), "timeout": timeout, "deadline": t0 + timeout}
            try:
                note = fn()
                passed += 1
                print(f"PASS {name} ({time.monotonic() - t0:.1f} s){': ' + note if note else ''}", flush=True)
            except CaseFailed as e:
                failures += 1
                print(f"FAIL {name} ({time.monotonic() - t0:.1f} s): {e}", flush=True)
                for line in e.output.splitlines()[-TAIL:]:
                    print("    " + line, flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        failures += 1
print(f"{passed} of {len(selected)} passed in {time.monotonic() - t_start:.1f} s", flush=True)
sys.exit(1 if failures else 0)
