"""autotune_test.py HVDRUN PYTHON PYTHONPATH: hvdrun --autotune on 4 real
processes on 2 "hosts" x 2 ranks (localhost and 127.0.0.1). The worker runs
training-like steps (5 named tensors per step) and checks every result; the
driver checks Horovod's CSV log: its header, one line per scored sample
(fusion thresholds, cycle times, then hierarchical off/on as there are two
hosts), and a last line repeating the best sampled setting (docs/collective.md,
"Autotune")."""
import csv
import os
import subprocess
import sys
import tempfile

if len(sys.argv) == 2 and sys.argv[1] == "--worker":
    import torch
    import hvdcomm.torch as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    bad = 0
    for step in range(60):
        ts = [torch.full((100 * (i + 1),), float(r + step + i)) for i in range(5)]
        hs = [hvd.allreduce_async(t, name=f"grad{i}", op=hvd.Sum) for i, t in enumerate(ts)]
        for i, h in enumerate(hs):
            out = hvd.synchronize(h)
            if out[-1].item() != n * (step + i) + n * (n - 1) / 2:
                bad += 1
    print(f"RESULT rank {r} bad {bad}", flush=True)
    hvd.shutdown()
    sys.exit(0)

hvdrun, python, pythonpath = sys.argv[1:4]
try:
    import torch  # noqa: F401
except ImportError:
    print("SKIPPED: torch is not installed for", sys.executable)
    sys.exit(77)

with tempfile.TemporaryDirectory() as tmp:
    log = os.path.join(tmp, "tune.csv")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "HVDRUN_"))}
    env.update(PYTHONPATH=pythonpath)
    argv = [hvdrun, "-np", "4", "-H", "localhost:2,127.0.0.1:2", "--autotune", "--autotune-log-file", log,
            "--autotune-warmup-samples", "1", "--autotune-steps-per-sample", "2", python, os.path.abspath(__file__),
            "--worker"]
    p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=100)
    results = [ln for ln in p.stdout.splitlines() if "RESULT rank" in ln]
    if p.returncode != 0 or len(results) != 4 or any(not ln.endswith("bad 0") for ln in results):
        raise SystemExit(f"exit {p.returncode}:\n{p.stdout}")
    if "no effect" in p.stdout or "is ignored" in p.stdout:
        raise SystemExit(f"an autotune setting was called ignored:\n{p.stdout}")
    with open(log) as f:
        rows = list(csv.reader(f))
header = ["hierarchical_allreduce", "hierarchical_allgather", "torus_allreduce", "cache_enabled", "cycle_time_ms",
          "tensor_fusion_threshold", "score"]
failures = []
if rows[0] != header:
    failures.append(f"header {rows[0]}")
samples, best = rows[1:-1], rows[-1]
# start + 7 other thresholds + 6 other cycle times + hierarchical on = 15,
# then the 3 best settings measured again (max 20)
if len(samples) != 18:
    failures.append(f"{len(samples)} samples, expected 18")
if not all(len(r) == 7 for r in rows):
    failures.append("a line without 7 columns")
if not any(r[0] == "1" and r[1] == "1" for r in samples):
    failures.append("hierarchical on was never tried on 2 hosts")
# The re-measured settings are the 3 best single samples of the search, and
# the last line is the one of them with the best mean score.
search, confirm = samples[:15], samples[15:]
best_single = {}
for r in search:
    best_single[tuple(r[:6])] = max(best_single.get(tuple(r[:6]), 0.0), float(r[6]))
top3 = sorted(best_single, key=lambda k: -best_single[k])[:3]
if [tuple(r[:6]) for r in confirm] != top3:
    failures.append(f"re-measured {confirm}, expected the 3 best settings {top3}")
means = {k: sum(float(r[6]) for r in samples if tuple(r[:6]) == k) / sum(1 for r in samples if tuple(r[:6]) == k)
         for k in top3}
winner = max(top3, key=lambda k: means[k])
if tuple(best[:6]) != winner or abs(float(best[6]) - means[winner]) > 1e-3 * means[winner]:
    failures.append(f"last line {best} is not the best confirmed mean {winner} {means[winner]}")
if failures:
    print("\n".join(failures))
    print("\n".join(",".join(r) for r in rows))
    sys.exit(1)
print(f"autotune: {len(samples)} samples, ended on {','.join(best)}")
