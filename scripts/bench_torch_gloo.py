#!/usr/bin/env python3
"""Gloo allreduce baseline for docs/performance.md (same method as hvdbench).

Runs WORLD processes on 127.0.0.1 with torch.distributed's Gloo backend over
TCP, times in-place float32 sum allreduces from --min-bytes to --max-bytes
(doubling), and prints, per size, the median over iterations of the slowest
rank's time. Iterations per size are bounded by --max-seconds.

    /usr/bin/python3 scripts/bench_torch_gloo.py --world 2 --min-bytes 4K --max-bytes 64M

With --device cuda the tensors are CUDA tensors (rank r on GPU r modulo the
visible GPUs; Gloo stages them through host memory) and every timed
operation ends with torch.cuda.synchronize(), as hvdbench --device cuda's
times include the device work. --step-factor multiplies the size each step.
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time


def parse_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1:].upper() in units:
        return int(text[:-1]) * units[text[-1:].upper()]
    return int(text)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, args, port):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.world)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda: torch sees no CUDA device")
        dev = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        sync = torch.cuda.synchronize
    else:
        dev = torch.device("cpu")

        def sync():
            pass
    rows = []
    size = args.min_bytes
    while size <= args.max_bytes:
        count = max(1, size // 4)
        t = torch.zeros(count, dtype=torch.float32, device=dev)
        # Correctness: rank r contributes r+1; the sum is world*(world+1)/2.
        t.fill_(rank + 1)
        dist.all_reduce(t)
        sync()
        ok = bool(torch.all(t == args.world * (args.world + 1) / 2))
        t.zero_()
        w0 = time.perf_counter()
        for _ in range(args.warmup):
            dist.all_reduce(t)
        sync()
        warm = (time.perf_counter() - w0) / max(1, args.warmup)
        iters = torch.tensor([max(1, min(args.iters, int(args.max_seconds / warm) if warm > 0 else args.iters))])
        dist.all_reduce(iters, op=dist.ReduceOp.MIN)
        n = int(iters.item())
        times = torch.zeros(n, dtype=torch.float64)
        for i in range(n):
            t0 = time.perf_counter()
            dist.all_reduce(t)
            sync()
            times[i] = time.perf_counter() - t0
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
        med = statistics.median(times.tolist())
        rows.append({"bytes": count * 4, "iters": n, "time_us": med * 1e6,
                     "algbw_gbps": count * 4 / med / 1e9, "check": "ok" if ok else "FAIL"})
        size *= args.step_factor
    if rank == 0:
        if args.json:
            print(json.dumps({"impl": "torch-gloo", "device": args.device, "torch": torch.__version__,
                              "ranks": args.world, "results": rows}, indent=2))
        else:
            print(f"# torch {torch.__version__} gloo allreduce, {args.world} ranks, float32 sum, in place, "
                  f"{args.device} tensors")
            print(f"#{'size(B)':>12} {'iters':>6} {'time(us)':>12} {'algbw(GB/s)':>12} {'check':>6}")
            for r in rows:
                print(f" {r['bytes']:>12} {r['iters']:>6} {r['time_us']:>12.2f} {r['algbw_gbps']:>12.3f} {r['check']:>6}")
        sys.stdout.flush()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--min-bytes", type=parse_bytes, default=4096)
    p.add_argument("--max-bytes", type=parse_bytes, default=64 << 20)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--max-seconds", type=float, default=1.0)
    p.add_argument("--step-factor", type=int, default=2)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.step_factor < 2:
        p.error("--step-factor must be at least 2")
    port = free_port()
    pids = []
    for rank in range(args.world):
        pid = os.fork()
        if pid == 0:
            try:
                worker(rank, args, port)
                os._exit(0)
            except BaseException as e:  # noqa: BLE001 - report and exit non-zero
                print(f"rank {rank}: {e}", file=sys.stderr)
                os._exit(1)
        pids.append(pid)
    rc = 0
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        rc = rc or os.waitstatus_to_exitcode(status)
    sys.exit(rc)


if __name__ == "__main__":
    main()
