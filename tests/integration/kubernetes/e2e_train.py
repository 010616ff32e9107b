"""The walkthrough's train.py for test_k8s_e2e.py: an unmodified Horovod
script (import horovod.torch) that allreduces rank+1 and prints where it ran.

    rank R size S local L/LS pod NAME host ADDR sum X

NAME is the host name (a pod's is its name), ADDR the IPv4 address of this
network namespace's eth0 (the pod IP). X must be S*(S+1)/2.
"""
import socket
import subprocess

import torch

import horovod.torch as hvd


def pod_address():
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", "eth0"], capture_output=True, text=True).stdout
    words = out.split()
    return words[words.index("inet") + 1].split("/")[0] if "inet" in words else "none"


hvd.init()
total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum, name="e2e.sum")
print(f"rank {hvd.rank()} size {hvd.size()} local {hvd.local_rank()}/{hvd.local_size()} pod {socket.gethostname()} host {pod_address()} "
      f"sum {total.item():g}", flush=True)
hvd.shutdown()
