"""Per-step allreduce overhead of a ~1 M-parameter model: hvdcomm vs torch.distributed gloo.

hvdcomm (2 ranks under hvdrun):
    build-py/apps/hvdrun/hvdrun -np 2 -H localhost:2 env PYTHONPATH=build-py/python \
        /usr/bin/python3 scripts/bench_python_step.py hvd
torch.distributed gloo (spawns its own 2 processes on 127.0.0.1):
    /usr/bin/python3 scripts/bench_python_step.py gloo
Prints, on rank 0, the mean time of the gradient allreduce of one step (all
parameters' gradients, averaged) over --steps steps after --warmup steps.
"""
import argparse
import os
import sys
import time

import torch


def model():
    torch.manual_seed(0)
    # 1024*512 + 512*512 + 512*256 + 256*10 (+ biases) ~= 0.92 M parameters
    return torch.nn.Sequential(torch.nn.Linear(1024, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                               torch.nn.ReLU(), torch.nn.Linear(512, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10),
                               torch.nn.Linear(10, 10))


def grads(m):
    x = torch.randn(32, 1024)
    m(x).sum().backward()
    return [p.grad for p in m.parameters()]


def bench_hvd(args):
    import hvdcomm.torch as hvd
    hvd.init()
    m = model()
    gs = grads(m)
    times = []
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        hs = [hvd.allreduce_async_(g, name=f"g{i}") for i, g in enumerate(gs)]
        for h in hs:
            hvd.synchronize(h)
        times.append(time.perf_counter() - t0)
    if hvd.rank() == 0:
        report("hvdcomm", m, times[args.warmup:])
    hvd.shutdown()


def gloo_worker(rank, args):
    import torch.distributed as dist
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    m = model()
    gs = grads(m)
    times = []
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        works = [dist.all_reduce(g, async_op=True) for g in gs]
        for w in works:
            w.wait()
        for g in gs:
            g.div_(2)
        times.append(time.perf_counter() - t0)
    if rank == 0:
        report("torch.distributed gloo", m, times[args.warmup:])
    dist.destroy_process_group()


def report(what, m, times):
    n = sum(p.numel() for p in m.parameters())
    times.sort()
    print(f"{what}: {n} params, {len(times)} steps, mean {1e3 * sum(times) / len(times):.3f} ms, "
          f"median {1e3 * times[len(times) // 2]:.3f} ms per step allreduce", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["hvd", "gloo"])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--port", type=int, default=29533)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.mode == "hvd":
        bench_hvd(args)
    else:
        import torch.multiprocessing as mp
        mp.spawn(gloo_worker, args=(args,), nprocs=2)


if __name__ == "__main__":
    sys.exit(main())
