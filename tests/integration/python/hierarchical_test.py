"""hierarchical_test.py HVDRUN PYTHON PYTHONPATH: HOROVOD_HIERARCHICAL_ALLREDUCE
and _ALLGATHER (hvdrun --hierarchical-allreduce/--hierarchical-allgather) on
4 real processes on 2 "hosts" x 2 ranks (hvdrun treats localhost and
127.0.0.1 as two hosts). The worker allreduces several dtypes, ops and sizes
(non-divisible ones and one past the ring threshold) with integer-valued
inputs, so every sum is exact, and allgathers uneven blocks; it checks each
result in closed form and prints a digest of all of them. The hierarchical
job's digests must equal the flat job's, rank 0 must say it ran two-level,
and the flat job must not."""
import hashlib
import os
import subprocess
import sys

if len(sys.argv) == 2 and sys.argv[1] == "--worker":
    import torch
    import hvdcomm.torch as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    digest = hashlib.sha256()
    bad = []
    for dtype in (torch.float32, torch.float64, torch.float16, torch.int32, torch.int64, torch.uint8):
        for count in (1, 3, 1001, 70001):
            base = (torch.arange(count, dtype=torch.int64) * 3 + r * 5) % 7 + 1
            for op, name in ((hvd.Sum, "sum"), (hvd.Max, "max"), (hvd.Average, "avg")):
                if op == hvd.Average and not dtype.is_floating_point:
                    continue
                out = hvd.allreduce(base.to(dtype), op=op, name=f"{dtype}.{count}.{name}")
                allv = torch.stack([(torch.arange(count, dtype=torch.int64) * 3 + q * 5) % 7 + 1 for q in range(n)])
                want = {"sum": allv.sum(0), "max": allv.max(0).values}.get(name)
                want = (allv.sum(0).double() / n) if want is None else want
                if not torch.equal(out.double(), want.double().to(dtype).double()):
                    bad.append(f"{dtype} count {count} {name}")
                digest.update(out.numpy().tobytes())
    g = hvd.allgather(torch.full((r + 1, 3), r, dtype=torch.int32), name="gather")
    want = torch.cat([torch.full((q + 1, 3), q, dtype=torch.int32) for q in range(n)])
    if not torch.equal(g, want):
        bad.append("allgather")
    digest.update(g.numpy().tobytes())
    e = hvd.allgather(torch.zeros((0 if r == 1 else 2, 1001), dtype=torch.float32) + r, name="gather.empty")
    digest.update(e.numpy().tobytes())
    if e.shape[0] != 2 * (n - 1):
        bad.append(f"allgather with an empty block: {tuple(e.shape)}")
    print(f"RESULT rank {r} {'OK' if not bad else 'BAD ' + ', '.join(bad[:3])} {digest.hexdigest()}", flush=True)
    hvd.shutdown()
    sys.exit(0)

hvdrun, python, pythonpath = sys.argv[1:4]


def job(flags):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "HVDRUN_"))}
    env.update(PYTHONPATH=pythonpath, HOROVOD_LOG_LEVEL="info")
    argv = [hvdrun, "-np", "4", "-H", "localhost:2,127.0.0.1:2"] + flags + [python, os.path.abspath(__file__),
                                                                           "--worker"]
    p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=100)
    results = {}
    for line in p.stdout.splitlines():
        if "RESULT rank" in line:
            parts = line.split("RESULT rank ")[1].split()
            results[int(parts[0])] = (parts[1], parts[-1])
    if p.returncode != 0 or len(results) != 4:
        raise SystemExit(f"{' '.join(flags)}: exit {p.returncode}, {len(results)} results:\n{p.stdout}")
    return p.stdout, results


try:
    import torch  # noqa: F401
except ImportError:
    print("SKIPPED: torch is not installed for", sys.executable)
    sys.exit(77)

flat_out, flat = job([])
hier_out, hier = job(["--hierarchical-allreduce", "--hierarchical-allgather"])
failures = []
for name, res in (("flat", flat), ("hierarchical", hier)):
    for rank, (status, _) in sorted(res.items()):
        if status != "OK":
            failures.append(f"{name} rank {rank}: {status}")
digests = {d for _, d in flat.values()} | {d for _, d in hier.values()}
if len(digests) != 1:
    failures.append(f"results differ between ranks or between flat and hierarchical: {flat} vs {hier}")
if "hierarchical allreduce and allgather: 2 hosts of 2 ranks" not in hier_out:
    failures.append("rank 0 did not report the two-level collectives")
if "hierarchical" in flat_out.replace("hierarchical_allreduce=off", "").replace("hierarchical_allgather=off", ""):
    failures.append("the flat job mentions hierarchical collectives")
if "is ignored" in hier_out or "no effect" in hier_out:
    failures.append("a hierarchical setting was called ignored")
if failures:
    print("\n".join(failures))
    print("--- hierarchical job:\n" + hier_out)
    sys.exit(1)
print("hierarchical allreduce/allgather on 2 hosts x 2 ranks: same results as flat on every rank")
