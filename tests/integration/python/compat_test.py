"""python.compat: the horovod package's version and the modules scripts
import from (docs/python.md, "The horovod package"). One process (size 1),
PYTHONPATH=<build>/python:<build>/python/compat; usage: compat_test.py HVDRUN.
The torch parts (horovod.torch.* modules, horovod.common.elastic's states
on 2 ranks through horovod.run) are skipped with a note when this python
lacks torch.

* horovod.__version__ == hvdcomm.__version__ == what `hvdrun --version`
  prints, and looks like a version;
* horovod.common.util: every name Horovod's callers import, with their
  behaviour; the names left out raise ImportError;
* horovod.common.elastic: run_fn is hvdcomm's; State / ObjectState take
  Horovod's (bcast_object, get_rank) and work on a real 2-rank job;
* horovod.torch.{mpi_ops, optimizer, compression, functions, elastic.state,
  elastic.sampler, sync_batch_norm} import with Horovod's names."""
import importlib
import os
import re
import subprocess
import sys
import sysconfig
import warnings

import horovod
import hvdcomm

HVDRUN = sys.argv[1]
checks = 0


def check(cond, what):
    global checks
    if not cond:
        print(f"FAIL: {what}", file=sys.stderr, flush=True)
        sys.exit(1)
    checks += 1


def absent(module, name):
    try:
        exec(f"from {module} import {name}", {})
    except ImportError:
        return True
    return False


# --- the version
printed = subprocess.run([HVDRUN, "--version"], stdout=subprocess.PIPE, text=True, timeout=30).stdout.strip()
check(isinstance(horovod.__version__, str) and horovod.__version__ == hvdcomm.__version__,
      f"horovod.__version__ {horovod.__version__!r} is hvdcomm's {hvdcomm.__version__!r}")
check(printed == f"hvdrun {horovod.__version__}", f"it is what hvdrun --version prints: {printed!r}")
check(re.fullmatch(r"\d+\.\d+\.\d+\S*", horovod.__version__) is not None, f"a version: {horovod.__version__}")
import horovod.runner  # noqa: E402
check(horovod.run is horovod.runner.run is importlib.import_module("hvdcomm.runner").run, "horovod.run")

# --- horovod.common.util
from horovod.common import util  # noqa: E402
for name in ("EXTENSIONS", "get_ext_suffix", "get_extension_full_path", "check_extension", "extension_available",
             "gpu_available", "mpi_built", "gloo_built", "nccl_built", "ddl_built", "ccl_built", "env",
             "get_average_backwards_compatibility_fun", "num_rank_is_power_2", "split_list", "is_iterable",
             "is_version_greater_equal_than", "_cache"):
    check(hasattr(util, name), f"horovod.common.util.{name}")
check(absent("horovod.common.util", "check_installed_version"), "check_installed_version is left out")
check(util.EXTENSIONS == ["torch"], "one extension: torch")
check(util.get_ext_suffix() == sysconfig.get_config_var("EXT_SUFFIX"), "get_ext_suffix")
check(util.get_extension_full_path("/p/horovod/torch/__init__.py", "mpi_lib_v2") ==
      "/p/horovod/torch/mpi_lib_v2" + util.get_ext_suffix(), "get_extension_full_path")
util.check_extension("horovod.torch", "HOROVOD_WITH_PYTORCH", "/nowhere/__init__.py", "mpi_lib_v2")
try:
    util.check_extension("horovod.tensorflow", "HOROVOD_WITH_TENSORFLOW", "/x/__init__.py", "mpi_lib")
    check(False, "check_extension(horovod.tensorflow) must raise")
except ImportError as e:
    check("horovod.tensorflow" in str(e) and "horovod.torch only" in str(e), f"check_extension: {e}")
check(util.extension_available("tensorflow") is False and util.extension_available("mxnet") is False,
      "other frameworks are not available")
check(util.gpu_available("tensorflow") is False, "gpu_available of another framework")
check(util.split_list(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]], "split_list")
check([util.num_rank_is_power_2(n) for n in (0, 1, 2, 3, 4, 6, 8)] == [False, True, True, False, True, False, True],
      "num_rank_is_power_2")
check(util.is_iterable([1]) and not util.is_iterable(3), "is_iterable")
calls = []


@util._cache
def probe(a, b=0):
    calls.append((a, b))
    return len(calls)


check([probe(1), probe(1), probe(1, b=2), probe(1, b=2), probe(2)] == [1, 1, 2, 2, 3] and len(calls) == 3,
      f"_cache runs once per distinct arguments: {calls}")
os.environ["HVD_COMPAT_KEPT"] = "old"
os.environ.pop("HVD_COMPAT_NEW", None)
with util.env(HVD_COMPAT_KEPT="new", HVD_COMPAT_NEW="set", HVD_COMPAT_NONE=None):
    check(os.environ["HVD_COMPAT_KEPT"] == "new" and os.environ["HVD_COMPAT_NEW"] == "set"
          and "HVD_COMPAT_NONE" not in os.environ, "env() sets")
check(os.environ["HVD_COMPAT_KEPT"] == "old" and "HVD_COMPAT_NEW" not in os.environ, "env() restores")


class Ops:
    Average, Sum = "avg", "sum"


pick = util.get_average_backwards_compatibility_fun(Ops)
check(pick(None, None) == "avg" and pick("max", None) == "max", "op wins, Average by default")
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    check(pick(None, False) == "sum" and pick(None, True) == "avg", "average= maps to Sum/Average")
check(any(issubclass(x.category, DeprecationWarning) for x in w), "average= is deprecated")
try:
    pick("max", True)
    check(False, "op and average together must raise")
except ValueError:
    checks += 1
try:
    import packaging  # noqa: F401
    check(util.is_version_greater_equal_than("2.1.0", "2.0.0") and not util.is_version_greater_equal_than(
        "1.9", "2.0.0"), "is_version_greater_equal_than")
except ImportError:
    print("note: packaging missing; is_version_greater_equal_than not checked")

# --- horovod.common.elastic
from horovod.common import elastic as common_elastic  # noqa: E402
import hvdcomm.elastic  # noqa: E402
check(common_elastic.run_fn is hvdcomm.elastic.run_fn, "run_fn is hvdcomm.elastic.run_fn")
check(issubclass(common_elastic.ObjectState, hvdcomm.elastic.ObjectState)
      and issubclass(common_elastic.State, hvdcomm.elastic.State), "State / ObjectState are hvdcomm's")
check(absent("horovod.common.elastic", "notification_manager"), "notification_manager is left out")
check(absent("horovod.common.exceptions", "HorovodVersionMismatchError"), "no version-mismatch error")

# --- horovod.torch's modules
try:
    import torch  # noqa: F401
except ImportError:
    print(f"note: {sys.executable} cannot import torch; horovod.torch modules and the 2-rank states not checked")
    print(f"compat: {checks} checks passed")
    sys.exit(0)
import horovod.torch as hvd  # noqa: E402
import hvdcomm.torch  # noqa: E402
for mod, names in {
        "horovod.torch.mpi_ops": ["init", "allreduce", "allreduce_async_", "synchronize", "Average", "Sum",
                                  "rank", "size", "gloo_built", "nccl_built", "HorovodInternalError"],
        "horovod.torch.optimizer": ["DistributedOptimizer"],
        "horovod.torch.compression": ["Compression", "Compressor", "NoneCompressor", "FP16Compressor"],
        "horovod.torch.functions": ["broadcast_object", "allgather_object", "broadcast_parameters",
                                    "broadcast_optimizer_state"],
        "horovod.torch.elastic.state": ["State", "ObjectState", "TorchState"],
        "horovod.torch.elastic.sampler": ["ElasticSampler"]}.items():
    m = importlib.import_module(mod)
    for n in names:
        check(hasattr(m, n), f"{mod}.{n}")
from horovod.torch.compression import Compression, Compressor, FP16Compressor, NoneCompressor  # noqa: E402
check(Compression.none is NoneCompressor and Compression.fp16 is FP16Compressor
      and issubclass(FP16Compressor, Compressor) and issubclass(NoneCompressor, Compressor)
      and hvd.Compression is hvdcomm.torch.Compression, "Compressor classes under Horovod's names")
check(util.extension_available("torch") is True, "extension_available('torch')")
check(util.gloo_built() is True and util.mpi_built() is False and util.nccl_built() == hvd.nccl_built(),
      "the build facts are hvdcomm.torch's")
from horovod.torch.sync_batch_norm import SyncBatchNorm  # noqa: E402
check(SyncBatchNorm is hvd.SyncBatchNorm is hvdcomm.torch.SyncBatchNorm
      and hvd.sync_batch_norm is sys.modules["horovod.torch.sync_batch_norm"]
      and issubclass(SyncBatchNorm, torch.nn.modules.batchnorm._BatchNorm),
      "horovod.torch.sync_batch_norm.SyncBatchNorm is hvdcomm.torch's, a _BatchNorm")

out = horovod.run(importlib.import_module("compat_fns").common_elastic_state, num_proc=2)
expect = ((11, [1], 2), 11, 105, [5], [])
check(out == [expect, expect], f"horovod.common.elastic states on 2 ranks: {out}")
print(f"compat: {checks} checks passed")
