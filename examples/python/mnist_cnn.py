"""MNIST-style CNN trained with hvdcomm.torch on synthetic 28x28 images (no downloads).

    hvdrun -np 2 -H localhost:2 env PYTHONPATH=build/python /usr/bin/python3 examples/python/mnist_cnn.py
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import hvdcomm.torch as hvd


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = F.relu(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc2(x), dim=1)


def synthetic(samples, seed):
    """Learnable fake digits: class k lights up a k-dependent block of pixels."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (samples,), generator=g)
    images = torch.randn(samples, 1, 28, 28, generator=g) * 0.3
    for k in range(10):
        idx = labels == k
        images[idx, 0, 2 * k:2 * k + 6, 4:24] += 1.0
    return images, labels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--samples", type=int, default=2048)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.01)
    args = ap.parse_args()

    hvd.init()
    torch.manual_seed(42)
    torch.set_num_threads(1)
    images, labels = synthetic(args.samples, seed=0)
    # each rank trains on its own shard
    images, labels = images[hvd.rank()::hvd.size()], labels[hvd.rank()::hvd.size()]

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.5)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    for epoch in range(args.epochs):
        model.train()
        total, batches = 0.0, 0
        for i in range(0, len(labels), args.batch_size):
            optimizer.zero_grad()
            loss = F.nll_loss(model(images[i:i + args.batch_size]), labels[i:i + args.batch_size])
            loss.backward()
            optimizer.step()
            total += loss.item()
            batches += 1
        avg = hvd.allreduce(torch.tensor(total / max(batches, 1)), name=f"epoch_loss.{epoch}")
        if hvd.rank() == 0:
            print(f"epoch {epoch + 1}: loss {avg.item():.4f}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
