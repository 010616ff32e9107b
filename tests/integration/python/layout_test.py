"""python.layout: hvdcomm.torch is split as horovod.torch is (mpi_ops,
compression, functions, optimizer, sync_batch_norm, elastic.{state,sampler}) and the
`horovod` shim mirrors it (docs/python.md, "Package layout"). One process
(size 1, no hvdrun), PYTHONPATH=<build>/python:<build>/python/compat:

* every submodule of both packages imports, and the
  `from horovod.torch.<module> import <name>` lines scripts use work;
* the package-level names are the objects of the submodule they live in,
  and horovod.torch's are hvdcomm.torch's; horovod.torch.mpi_ops & co. are
  the shim's modules;
* the whole API of hvdcomm.torch (as before the split) is still there;
* the modules of hvdcomm.torch import each other without a cycle and never
  the package itself (the package imports them all);
* a size-1 allreduce and broadcast_object through the submodules."""
import ast
import importlib
import pkgutil
import sys

try:
    import torch
except ImportError:
    print("SKIP: this python cannot import torch (install python3-torch)")
    sys.exit(77)

import horovod.torch as H
import hvdcomm.torch as hvd

# What `import horovod.torch` alone binds (importing a submodule later binds it too).
SHIM_BOUND = {m: getattr(H, m, None) for m in ("compression", "elastic", "functions", "mpi_ops", "optimizer",
                                               "sync_batch_norm")}
SHIM_ELASTIC_BOUND = {m: getattr(H.elastic, m, None) for m in ("sampler", "state")}

checks = 0


def check(cond, what):
    global checks
    if not cond:
        print(f"FAIL: {what}", file=sys.stderr)
        sys.exit(1)
    checks += 1


# --- the submodules of both packages
SUBMODULES = ["compression", "elastic", "elastic.sampler", "elastic.state", "functions", "mpi_ops", "optimizer",
              "sync_batch_norm"]


def submodules(pkg):
    return sorted(m.name[len(pkg.__name__) + 1:]
                  for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."))


check(submodules(hvd) == SUBMODULES, f"hvdcomm.torch's submodules: {submodules(hvd)}")
check(submodules(H) == SUBMODULES, f"horovod.torch mirrors every one of them: {submodules(H)}")

# Importing any submodule runs its package's __init__ first, which imports
# every module in one fixed order: importing each one here covers every order
# (the import graph itself is checked below). The imports scripts write:
for m in SUBMODULES:
    for p in ("hvdcomm.torch", "horovod.torch"):
        check(importlib.import_module(f"{p}.{m}").__name__ == f"{p}.{m}", f"import {p}.{m}")
from horovod.torch.compression import Compression  # noqa: E402
from horovod.torch.elastic.sampler import ElasticSampler  # noqa: E402
from horovod.torch.elastic.state import TorchState  # noqa: E402
from horovod.torch.functions import broadcast_object  # noqa: E402
from horovod.torch.mpi_ops import allreduce_async  # noqa: E402
from horovod.torch.optimizer import DistributedOptimizer  # noqa: E402
from horovod.torch.sync_batch_norm import SyncBatchNorm  # noqa: E402

check((Compression, ElasticSampler, TorchState, broadcast_object, allreduce_async, DistributedOptimizer,
       SyncBatchNorm) ==
      (hvd.Compression, hvd.elastic.ElasticSampler, hvd.elastic.TorchState, hvd.broadcast_object,
       hvd.allreduce_async, hvd.DistributedOptimizer, hvd.SyncBatchNorm),
      "horovod.torch.<module> imports give hvdcomm.torch's objects")

# --- package-level names are the submodules' objects
from hvdcomm.torch import compression, elastic, functions, mpi_ops, optimizer, sync_batch_norm  # noqa: E402
from hvdcomm.torch.elastic import sampler, state  # noqa: E402

HOME = {
    mpi_ops: ["init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size", "cross_rank",
              "cross_size", "is_homogeneous", "mpi_built", "mpi_enabled", "gloo_built", "gloo_enabled",
              "nccl_built", "cuda_built", "rocm_built", "ddl_built", "ccl_built", "mpi_threads_supported",
              "ReduceOp", "Sum", "Average", "Min", "Max", "Product", "Adasum", "poll", "synchronize",
              "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce",
              "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_", "allgather",
              "allgather_async", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_", "alltoall",
              "alltoall_async", "reducescatter", "reducescatter_async", "barrier", "join",
              "grouped_allgather", "grouped_allgather_async", "grouped_reducescatter",
              "grouped_reducescatter_async", "sparse_allreduce_async",
              "ProcessSet", "global_process_set", "add_process_set", "remove_process_set", "start_timeline",
              "stop_timeline",
              "HorovodInternalError", "HostsUpdatedInterrupt", "MismatchError", "PeerFailureError",
              "WorkerRemovedError", "_handles", "_join_world", "_name"],
    compression: ["Compression"],
    functions: ["broadcast_object", "allgather_object", "broadcast_parameters", "broadcast_optimizer_state"],
    optimizer: ["DistributedOptimizer", "_DistributedOptimizer"],
    sync_batch_norm: ["SyncBatchNorm"],
    elastic: ["_elastic_reset"],
}
for mod, names in HOME.items():
    for n in names:
        check(getattr(hvd, n, None) is getattr(mod, n), f"hvdcomm.torch.{n} is {mod.__name__}.{n}")
check(hvd._core is sys.modules["hvdcomm._core"], "hvdcomm.torch._core is the extension")
check(hvd.elastic is elastic and elastic.TorchState is state.TorchState and
      elastic.ElasticSampler is sampler.ElasticSampler and elastic.ObjectState is state.ObjectState,
      "hvd.elastic re-exports elastic.state and elastic.sampler")
check(set(HOME[mpi_ops] + HOME[compression] + HOME[functions] + HOME[optimizer] + HOME[sync_batch_norm]) >=
      {n for n in dir(hvd) if not n.startswith("_")} - {"elastic"} - set(SUBMODULES),
      "every public name of hvdcomm.torch has a home above")

# --- the shim: the same objects, its own modules
for mod, names in HOME.items():
    shim_mod = sys.modules["horovod.torch." + mod.__name__.split(".", 2)[2]]
    if mod is not elastic:
        check(SHIM_BOUND[shim_mod.__name__.rsplit(".", 1)[1]] is shim_mod, f"horovod.torch binds {shim_mod.__name__}")
    for n in names:
        if not n.startswith("_"):
            check(getattr(H, n, None) is getattr(hvd, n), f"horovod.torch.{n} is hvdcomm.torch.{n}")
            check(getattr(shim_mod, n, None) is getattr(mod, n), f"{shim_mod.__name__}.{n} is {mod.__name__}.{n}")
check(H._DistributedOptimizer is hvd._DistributedOptimizer, "horovod.torch._DistributedOptimizer")
check(H.optimizer._DistributedOptimizer is hvd._DistributedOptimizer, "horovod.torch.optimizer._DistributedOptimizer")
check(SHIM_BOUND["elastic"] is sys.modules["horovod.torch.elastic"], "horovod.torch binds horovod.torch.elastic")
check(SHIM_ELASTIC_BOUND == {m: sys.modules["horovod.torch.elastic." + m] for m in ("sampler", "state")},
      "horovod.torch.elastic binds its own modules")
for n in ("TorchState", "ObjectState", "State"):
    check(getattr(H.elastic.state, n) is getattr(state, n) is getattr(H.elastic, n), f"horovod.torch.elastic.state.{n}")
check(H.elastic.sampler.ElasticSampler is sampler.ElasticSampler, "horovod.torch.elastic.sampler.ElasticSampler")
check(H.elastic.run is elastic.run, "horovod.torch.elastic.run")
import horovod.common.process_sets as H_ps  # noqa: E402  (Horovod's home of the process-set names)
for n in ("ProcessSet", "global_process_set", "add_process_set", "remove_process_set"):
    check(getattr(H_ps, n) is getattr(mpi_ops, n) is getattr(H, n), f"horovod.common.process_sets.{n}")

# --- the API before the split (every public name of the 834-line module)
API = """Adasum Average Compression DistributedOptimizer HorovodInternalError HostsUpdatedInterrupt Max Min
MismatchError PeerFailureError Product ReduceOp Sum WorkerRemovedError allgather allgather_async
allgather_object allreduce allreduce_ allreduce_async allreduce_async_ alltoall alltoall_async barrier
broadcast broadcast_ broadcast_async broadcast_async_ broadcast_object broadcast_optimizer_state
broadcast_parameters ccl_built cross_rank cross_size cuda_built ddl_built elastic gloo_built gloo_enabled
grouped_allreduce grouped_allreduce_ grouped_allreduce_async grouped_allreduce_async_ init is_homogeneous
is_initialized join local_rank local_size mpi_built mpi_enabled mpi_threads_supported nccl_built poll rank
reducescatter reducescatter_async rocm_built shutdown size synchronize""".split()
for pkg in (hvd, H):
    missing = [n for n in API if not hasattr(pkg, n)]
    check(not missing, f"{pkg.__name__} lacks {missing}")

# --- imports inside hvdcomm.torch: no module imports the package, no cycle
graph = {}
for info in pkgutil.walk_packages(hvd.__path__, "hvdcomm.torch."):
    m = sys.modules[info.name]
    with open(m.__file__) as f:
        tree = ast.parse(f.read())
    deps = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            deps |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:  # from P import M (a module) or from M import name
                deps.add(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in sys.modules else node.module)
    deps = {d for d in deps if d.startswith("hvdcomm.torch") and d != info.name}
    check("hvdcomm.torch" not in deps, f"{info.name} does not import names of the package hvdcomm.torch")
    graph[info.name] = deps

state_of = {}


def visit(n, path):
    if state_of.get(n) == "done":
        return
    check(state_of.get(n) != "open", f"import cycle: {' -> '.join(path + [n])}")
    state_of[n] = "open"
    for d in sorted(graph.get(n, ())):
        visit(d, path + [n])
    state_of[n] = "done"


for n in sorted(graph):
    visit(n, [])
check(graph["hvdcomm.torch.mpi_ops"] == {"hvdcomm.torch.compression"}, f"mpi_ops needs only compression: "
      f"{graph['hvdcomm.torch.mpi_ops']}")
check(graph["hvdcomm.torch.sync_batch_norm"] == {"hvdcomm.torch.mpi_ops"}, f"sync_batch_norm needs only mpi_ops: "
      f"{graph['hvdcomm.torch.sync_batch_norm']}")

# --- a size-1 job through the submodules
mpi_ops.init()
check(mpi_ops.size() == 1 and hvd.is_initialized(), "init through mpi_ops")
out = mpi_ops.allreduce(torch.arange(3, dtype=torch.float32), op=mpi_ops.Sum, name="layout",
                        compression=compression.Compression.fp16)
check(torch.equal(out, torch.arange(3, dtype=torch.float32)), f"allreduce through mpi_ops: {out}")
check(functions.broadcast_object({"a": 1}, 0) == {"a": 1}, "broadcast_object through functions")
model = torch.nn.Linear(2, 1)
opt = optimizer.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
check(isinstance(opt, hvd._DistributedOptimizer), "DistributedOptimizer through optimizer")
bn, ref = sync_batch_norm.SyncBatchNorm(2).double(), torch.nn.BatchNorm1d(2).double()
x = torch.arange(8, dtype=torch.float64).reshape(4, 2) ** 2
check(torch.equal(bn(x), ref(x)) and torch.equal(bn.running_var, ref.running_var),
      "size 1: SyncBatchNorm is torch's BatchNorm")
hvd.shutdown()
print(f"layout: {checks} checks passed")
