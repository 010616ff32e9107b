"""An elastic trainer written the way Horovod's own elastic integration
tests write theirs (horovod.torch, unmodified-Horovod style), for
elastic_horovod_e2e.py:

* TorchState with user attributes ``epoch``, ``batch``, ``commits`` and
  ``rendezvous`` (a user ``commits`` must not collide with the library's);
* ``HOROVOD_RANK`` read at start as the worker's "start rank" (horovodrun
  gives an elastic worker the rank it was started for);
* rank 0 appends one JSON line per epoch to --logfile and, when the
  schedule says the hosts change after this epoch, waits up to 10 s for
  ``state._host_messages`` to become non-empty (Horovod's private queue);
* --exit-schedule '{"[epoch, batch]": [start ranks]}': those workers raise.
"""
import argparse
import json
import os
import time

import torch
import torch.nn.functional as F

import horovod.torch as hvd

p = argparse.ArgumentParser()
p.add_argument("--logfile", required=True)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--batches", type=int, default=5)
p.add_argument("--hosts-change-after", type=int, nargs="*", default=[])
p.add_argument("--exit-schedule", default="{}")
args = p.parse_args()

hvd.init()
start_rank = int(os.environ["HOROVOD_RANK"])  # KeyError if hvdrun did not set it
hostname = os.environ["HOROVOD_HOSTNAME"]
exits = {tuple(json.loads(k)): v for k, v in json.loads(args.exit_schedule).items()}

torch.manual_seed(0)
data, target = torch.randn(16, 2), torch.randint(0, 2, (16,))
model = torch.nn.Linear(2, 2)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                               named_parameters=model.named_parameters())


@hvd.elastic.run
def train(state):
    state.rendezvous += 1
    while state.epoch < args.epochs:
        while state.batch < args.batches:
            if start_rank in exits.get((state.epoch, state.batch), []):
                raise RuntimeError(f"scheduled failure of start rank {start_rank} at {state.epoch},{state.batch}")
            opt.zero_grad()
            F.cross_entropy(model(data), target).backward()
            opt.step()
            state.batch += 1
            state.commits += 1
            state.commit()
        if hvd.rank() == 0:
            with open(args.logfile, "a") as f:
                f.write(json.dumps({"epoch": state.epoch, "commits": state.commits, "hostname": hostname,
                                    "start_rank": start_rank, "size": hvd.size(),
                                    "rendezvous": state.rendezvous}) + "\n")
            if state.epoch in args.hosts_change_after:
                state._last_updated_timestamp = 0
                deadline = time.time() + 10
                while state._host_messages.empty():
                    if time.time() > deadline:
                        raise TimeoutError("no host notification within 10 s")
                    time.sleep(0.05)
        state.epoch += 1
        state.batch = 0
        state.commits += 1
        state.commit()


state = hvd.elastic.TorchState(model, opt, epoch=0, batch=0, commits=0, rendezvous=0)
train(state)
