"""Elastic MNIST-style CNN on synthetic 28x28 images (no downloads), with
hvd.elastic.run + TorchState + ElasticSampler (docs/python.md, "Elastic").

    hvdrun -np 2 --min-np 1 --max-np 4 --host-discovery-script ./discover.sh \\
        env PYTHONPATH=build/python /usr/bin/python3 examples/python/elastic_mnist.py

Runs unchanged without elastic mode (any fixed -np, or plain python3).

Training is size-invariant: every step consumes one global batch of
--global-batch samples (split evenly over the current ranks; the size must
divide it), each rank sums its samples' losses divided by the global batch
size and gradients are allreduced with Sum. So a run that loses or gains
workers ends with the same parameters as a fault-free run, up to rounding
(use --double to make that tiny). One line per commit:
"epoch E batch B size S rank R pid P" (B counts global steps); rank 0
ends with "final step B checksum C".
"""
import argparse
import os
import time

import torch
import torch.nn.functional as F

import hvdcomm.torch as hvd
from mnist_cnn import Net, synthetic  # the static example's model and generated data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--global-batch", type=int, default=32, help="samples per step over all ranks")
    ap.add_argument("--commit-every", type=int, default=4, help="steps between commits")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--double", action="store_true", help="train in float64")
    ap.add_argument("--step-sleep", type=float, default=0.0, help="seconds to sleep per step (tests)")
    ap.add_argument("--sync-sleep", type=float, default=0.0,
                    help="seconds to pause before each state sync in a world of 2 or more (tests: a world that "
                         "fails after it formed, before a newcomer synced)")
    args = ap.parse_args()
    if args.samples % args.global_batch:
        ap.error("--samples must be a multiple of --global-batch")

    hvd.init()
    torch.manual_seed(42)
    torch.set_num_threads(1)
    dtype = torch.float64 if args.double else torch.float32
    images, labels = synthetic(args.samples, seed=0)
    images = images.to(dtype)
    dataset = torch.utils.data.TensorDataset(images, labels)

    model = Net().to(dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.5)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), op=hvd.Sum)
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=7)
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, step=0)
    if args.sync_sleep:
        plain_sync = state.sync

        def sync():
            if hvd.size() > 1:
                print(f"elastic_mnist: {os.environ.get('HVDRUN_WORKER_ID', '-')} syncing in world "
                      f"{hvd.elastic.world_version()}", flush=True)
                time.sleep(args.sync_sleep)
            plain_sync()

        state.sync = sync
    state.register_reset_callbacks([lambda: print(f"reset: rank {hvd.rank()} size {hvd.size()} "
                                                  f"step {state.step}", flush=True)])

    @hvd.elastic.run
    def train(state):
        while state.epoch < args.epochs:
            n = hvd.size()
            if args.global_batch % n:
                raise ValueError(f"elastic_mnist: --global-batch {args.global_batch} is not divisible by "
                                 f"the current size {n}")
            per_rank = args.global_batch // n
            mine = list(state.sampler)  # this rank's samples not yet processed this epoch
            for b in range(len(mine) // per_rank):
                idx = mine[b * per_rank:(b + 1) * per_rank]
                x, y = images[idx], labels[idx]
                optimizer.zero_grad()
                loss = F.nll_loss(model(x), y, reduction="sum") / args.global_batch
                loss.backward()
                optimizer.step()
                state.sampler.record_batch(b, per_rank)
                state.step += 1
                if args.step_sleep:
                    time.sleep(args.step_sleep)
                if state.step % args.commit_every == 0:
                    print(f"epoch {state.epoch} batch {state.step} size {n} rank {hvd.rank()} pid {os.getpid()}",
                          flush=True)
                    state.commit()
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            state.commit()

    train(state)
    if hvd.rank() == 0:
        checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
        print(f"final step {state.step} checksum {checksum:.17g}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    try:
        main()
    except hvd.WorkerRemovedError as e:
        # hvdrun dropped this worker (its host left, or the job ended before
        # it could join): nothing went wrong, so exit 0.
        print(f"elastic_mnist: leaving: {e}", flush=True)
