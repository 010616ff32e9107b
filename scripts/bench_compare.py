#!/usr/bin/env python3
"""Allreduce comparison for docs/performance.md: hvdbench vs Gloo vs Open MPI.

Runs, ROUNDS times and interleaved (so background load hits every
implementation alike), NP-rank (default 2) in-place float32 sum allreduces
from 4 KiB to 64 MiB on this host with:
  * hvdbench under hvdrun (this project) with its default data path between
    ranks of one host, shared memory ("hvdbench (shm)"),
  * the same with HVD_TRANSPORT=tcp, loopback TCP links ("hvdbench (tcp)"),
  * torch.distributed's Gloo backend over TCP (scripts/bench_torch_gloo.py),
  * Open MPI with its default transports (shared memory "vader" on one host),
  * Open MPI restricted to TCP (--mca btl tcp,self).
Each run reports per size the median over iterations of the slowest rank;
the table shows the best (lowest) median over the rounds, in microseconds.
A single-copy memcpy bandwidth (numpy, 64 MiB) is measured in every round,
and the 16 MiB busbw of hvdbench (shm) is given as a share of it.

    /usr/bin/python3 scripts/bench_compare.py --hvdrun build/apps/hvdrun/hvdrun \\
        --hvdbench build/apps/hvdbench/hvdbench --rounds 3

With --device cuda (a GPU machine; scripts/device_check.sh) the buffers are
CUDA device buffers: hvdbench --device cuda (the library's device allreduce,
with its naive and staged columns) against torch.distributed's Gloo on CUDA
tensors, run by this interpreter (which must have torch with CUDA); the
table adds bus bandwidth (nccl-tests' definition) as a share of the GPU's
device-to-device copy rate that hvdbench measured in the same run.
"""
import argparse
import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, timeout, env=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout,
                       env=None if env is None else {**os.environ, **env})
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr[-2000:]}")
    return p.stdout


def parse_json_blob(text):
    # hvdrun prefixes worker lines ("[0]<stdout>:"); strip that, keep the JSON.
    lines = [re.sub(r"^\[\d+\]<stdout>:", "", l) for l in text.splitlines()]
    body = "\n".join(l for l in lines if not l.startswith("[") or l.startswith("[\n"))
    start = body.index("{")
    doc, _ = json.JSONDecoder().raw_decode(body[start:])
    return doc


def hvdbench(args, transport):
    out = run([args.hvdrun, "-np", str(args.np), "-H", f"localhost:{args.np}", args.hvdbench, "--op", "allreduce",
               "--min-bytes", args.min_bytes, "--max-bytes", args.max_bytes, "--step-factor", str(args.step_factor),
               "--iters", str(args.iters), "--max-seconds", str(args.max_seconds), "--json"], 600,
              env={"HVD_TRANSPORT": transport})
    doc = parse_json_blob(out)
    return {r["bytes"]: (r["time_us"], r["check"]) for r in doc["results"]}


def gloo(args):
    py = sys.executable if args.device == "cuda" else "/usr/bin/python3"
    out = run([py, os.path.join(HERE, "bench_torch_gloo.py"), "--world", str(args.np), "--min-bytes",
               args.min_bytes, "--max-bytes", args.max_bytes, "--iters", str(args.iters), "--max-seconds",
               str(args.max_seconds), "--step-factor", str(args.step_factor), "--device", args.device, "--json"], 600)
    doc = parse_json_blob(out)
    return {r["bytes"]: (r["time_us"], r["check"]) for r in doc["results"]}


def hvdbench_cuda(args, env=None):
    out = run([args.hvdrun, "-np", str(args.np), "-H", f"localhost:{args.np}", args.hvdbench, "--device", "cuda",
               "--min-bytes", args.min_bytes, "--max-bytes", args.max_bytes, "--step-factor", str(args.step_factor),
               "--iters", str(args.iters), "--max-seconds", str(args.max_seconds), "--json"], 600, env=env)
    return parse_json_blob(out)["results"]


def main_cuda(args):
    """--device cuda: hvdbench's device allreduce against Gloo on CUDA tensors."""
    best, extra, checks, gloo_best, gloo_checks = {}, {}, set(), {}, set()
    alt_name, alt_best = None, {}
    if args.also_env:
        k, _, v = args.also_env.partition("=")
        alt_name = f"hvd {k}={v}"
    for rnd in range(args.rounds):
        if alt_name:
            for r in hvdbench_cuda(args, env={k: v}):
                alt_best[r["bytes"]] = min(r["device_time_us"], alt_best.get(r["bytes"], float("inf")))
                checks.add("ok" if r["ok"] else "FAIL")
            print(f"round {rnd + 1}/{args.rounds}: {alt_name} done", file=sys.stderr)
        for r in hvdbench_cuda(args):
            size = r["bytes"]
            if r["device_time_us"] < best.get(size, float("inf")):
                best[size] = r["device_time_us"]
                extra[size] = r
            checks.add("ok" if r["ok"] else "FAIL")
        print(f"round {rnd + 1}/{args.rounds}: hvdbench (cuda) done", file=sys.stderr)
        if not args.skip_gloo:
            for size, (t, check) in gloo(args).items():
                gloo_best[size] = min(t, gloo_best.get(size, float("inf")))
                gloo_checks.add(check)
            print(f"round {rnd + 1}/{args.rounds}: gloo (cuda) done", file=sys.stderr)
    copy = max(r["d2d_copy_gbps"] for r in extra.values()) if extra else 0.0
    alt_head = f" {alt_name} (us) |" if alt_name else ""
    print(f"| size | hvd device (us) |{alt_head} naive (us) | staged (us) | gloo cuda (us) | gloo / hvd | busbw (GB/s) "
          f"| busbw / copy | %d2d |")
    print("|---:|---:|" + ("---:|" if alt_name else "") + "---:|---:|---:|---:|---:|---:|---:|")
    for size in sorted(best):
        r = extra[size]
        g = gloo_best.get(size, float("nan"))
        alt = f" {alt_best.get(size, float('nan')):.1f} |" if alt_name else ""
        print(f"| {size} | {best[size]:.1f} |{alt} {r['naive_time_us']:.1f} | {r['staged_time_us']:.1f} | {g:.1f} "
              f"| {g / best[size]:.2f} | {r['busbw_gbps']:.1f} | {100 * r['busbw_gbps'] / copy if copy else 0:.1f} % "
              f"| {100 * r['d2d_fraction']:.1f} % |")
    print(f"\ndevice-to-device copy rate (cudaMemcpy, bytes copied / time, slowest rank): {copy:.1f} GB/s; "
          f"{args.np} ranks on the GPU(s) of this host")
    print(f"checks hvdbench: {sorted(checks)}; gloo: {sorted(gloo_checks)}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"hvdbench": list(extra.values()), "alt": {"name": alt_name, "time_us": alt_best}, "gloo": {str(k): v for k, v in gloo_best.items()},
                       "d2d_copy_gbps": copy}, f, indent=1)
    return 0 if checks == {"ok"} and gloo_checks <= {"ok"} else 1


def mpi(args, binary, tcp_only):
    # Loopback only (other interfaces on this host may be test namespaces).
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(args.np), "--mca", "btl_tcp_if_include", "lo",
           "--mca", "oob_tcp_if_include", "lo"]
    if tcp_only:
        cmd += ["--mca", "btl", "tcp,self"]
    out = run(cmd + [binary, str(parse_bytes(args.min_bytes)), str(parse_bytes(args.max_bytes))], 600)
    rows = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 5 and f[0].isdigit():
            rows[int(f[0])] = (float(f[2]), f[4])
    return rows


def memcpy_gbps(nbytes=64 << 20, repeats=10):
    """Single-copy bandwidth of this host, measured now (numpy copyto of
    64 MiB into a touched buffer, best of `repeats`), in GB/s."""
    out = run(["/usr/bin/python3", "-c",
               "import numpy as np, time\n"
               f"a = np.ones({nbytes}, np.uint8); b = np.zeros_like(a); best = 1e9\n"
               f"for _ in range({repeats}):\n"
               "    t = time.perf_counter(); np.copyto(b, a); best = min(best, time.perf_counter() - t)\n"
               f"print({nbytes} / best / 1e9)"], 120)
    return float(out.strip().splitlines()[-1])


def parse_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hvdrun", required=True)
    p.add_argument("--hvdbench", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--min-bytes", default="4K")
    p.add_argument("--max-bytes", default="64M")
    # The same budget bench_mpi_allreduce.c has built in (MAX_ITERS 50,
    # MAX_SECONDS 1.0), so every implementation gets as many iterations.
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--max-seconds", type=float, default=1.0)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--skip-mpi", action="store_true")
    p.add_argument("--skip-gloo", action="store_true")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: device buffers, hvdbench --device cuda against Gloo on CUDA tensors")
    p.add_argument("--step-factor", type=int, default=2, help="size multiplier between rows")
    p.add_argument("--json-out", help="--device cuda: also write the numbers to this file")
    p.add_argument("--also-env", metavar="NAME=VALUE",
                   help="--device cuda: a second hvdbench column run with this variable set (e.g. HVD_CUDA_IPC_WAIT=device)")
    args = p.parse_args()
    if args.device == "cuda":
        sys.exit(main_cuda(args))
    if args.json_out:
        p.error("--json-out goes with --device cuda")

    impls = {"hvdbench (shm)": lambda: hvdbench(args, "shm"), "hvdbench (tcp)": lambda: hvdbench(args, "tcp")}
    if not args.skip_gloo:
        impls["gloo"] = lambda: gloo(args)
    if not args.skip_mpi:
        # Built into a directory of its own, removed when the script ends.
        build_dir = tempfile.mkdtemp(prefix="hvd-bench-mpi-")
        atexit.register(shutil.rmtree, build_dir, True)
        binary = os.path.join(build_dir, "bench_mpi_allreduce")
        subprocess.run(["mpicc", "-O2", "-o", binary, os.path.join(HERE, "bench_mpi_allreduce.c")], check=True)
        impls["mpi (vader)"] = lambda: mpi(args, binary, False)
        impls["mpi (tcp)"] = lambda: mpi(args, binary, True)

    best = {name: {} for name in impls}
    checks = {name: set() for name in impls}
    memcpy = 0.0
    for rnd in range(args.rounds):
        memcpy = max(memcpy, memcpy_gbps())
        for name, fn in impls.items():
            rows = fn()
            for size, (t, check) in rows.items():
                best[name][size] = min(t, best[name].get(size, float("inf")))
                checks[name].add(check)
            print(f"round {rnd + 1}/{args.rounds}: {name} done", file=sys.stderr)

    names = list(impls)
    ref = "mpi (vader)" if "mpi (vader)" in best else ("gloo" if "gloo" in best else "hvdbench (tcp)")
    print(f"| size | " + " | ".join(f"{n} (us)" for n in names) + f" | shm / {ref} |")
    print("|---:|" + "---:|" * len(names) + "---:|")
    for size in sorted(best["hvdbench (shm)"]):
        cells = [f"{best[n].get(size, float('nan')):.1f}" for n in names]
        ratio = best["hvdbench (shm)"][size] / best[ref][size] if size in best[ref] else float("nan")
        print(f"| {size} | " + " | ".join(cells) + f" | {ratio:.2f} |")
    print(f"\nmemcpy (single copy, 64 MiB, best of the rounds): {memcpy:.2f} GB/s")
    size16 = 16 << 20
    if size16 in best["hvdbench (shm)"]:
        busbw = size16 * 2 * (args.np - 1) / args.np / (best["hvdbench (shm)"][size16] * 1e-6) / 1e9
        print(f"hvdbench (shm) 16 MiB busbw: {busbw:.2f} GB/s = {100 * busbw / memcpy:.0f} % of memcpy")
    for n in names:
        print(f"checks {n}: {sorted(checks[n])}", file=sys.stderr)


if __name__ == "__main__":
    main()
