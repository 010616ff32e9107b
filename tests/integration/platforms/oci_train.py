"""The OCI test's entry script (OCI__ENTRY_SCRIPT): an elastic-aware
Horovod torch trainer (hvd.elastic.run + TorchState). Every rank prints
`oci_train: rank R size N host H sum S` at the end, S being an allreduce
over the ranks (1 + 2 = 3 at size 2).

--fail-on-host ADDR: the rank placed on ADDR (the WORKER, rank 1: the MAIN
is listed first) exits 3 before it joins, which ends a forming elastic job
with that status.
"""
import argparse
import os
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=4)
ap.add_argument("--fail-on-host")
args = ap.parse_args()
host = os.environ.get("HOROVOD_HOSTNAME", "?")
if args.fail_on_host and host == args.fail_on_host:
    print(f"oci_train: failing on purpose with 3 on {host}", flush=True)
    sys.exit(3)

import torch  # noqa: E402

import hvdcomm.torch as hvd  # noqa: E402

hvd.init()
torch.manual_seed(1)
torch.set_num_threads(1)
model = torch.nn.Linear(4, 1)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model, optimizer, step=0)


@hvd.elastic.run
def train(state):
    while state.step < args.steps:
        optimizer.zero_grad()
        model(torch.ones(2, 4) * (hvd.rank() + 1)).sum().backward()
        optimizer.step()
        state.step += 1
        state.commit()


train(state)
total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
print(f"oci_train: rank {hvd.rank()} size {hvd.size()} host {host} sum {float(total[0]):g}", flush=True)
hvd.shutdown()
