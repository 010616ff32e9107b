"""Horovod's examples/pytorch/pytorch_synthetic_benchmark.py, as a user runs
it (the same flags, `import horovod.torch as hvd`, DistributedOptimizer with
Compression.fp16 under --fp16-allreduce, broadcast_parameters and
broadcast_optimizer_state), at a tiny size, plus --check: every rank
regenerates every rank's synthetic batch and trains a reference model in
process on the average of their gradients; the trained parameters must
match it (exactly up to float32 rounding; within fp16's precision with
--fp16-allreduce) and be bit-identical on every rank, as must the loss on
one common batch.

Registered as python.synthetic_benchmark and python.synthetic_benchmark_fp16
(hvdrun -np 2). --use-adasum passes op=hvd.Adasum as Horovod's script does
(registered as python.synthetic_benchmark_adasum): then the reference is
Horovod's Adasum delta optimizer, computed here -- each rank's SGD step on
its own batch gives a delta, the deltas are combined by the pairwise Adasum
formula per parameter (in the binary-tree order of ranks), and the
parameters move by the result. Without torchvision (not a dependency),
--model names one of the small models below."""
import math
import argparse
import copy
import sys
import timeit

import torch
import torch.nn.functional as F
import torch.optim as optim

import horovod.torch as hvd

parser = argparse.ArgumentParser(description="PyTorch Synthetic Benchmark",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument("--fp16-allreduce", action="store_true", default=False,
                    help="use fp16 compression during allreduce")
parser.add_argument("--model", type=str, default="tiny_cnn",
                    help="model to benchmark: tiny_cnn, tiny_mlp, or a torchvision model when installed")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size")
parser.add_argument("--num-warmup-batches", type=int, default=10,
                    help="number of warm-up batches that don't count towards benchmark")
parser.add_argument("--num-batches-per-iter", type=int, default=10,
                    help="number of batches per benchmark iteration")
parser.add_argument("--num-iters", type=int, default=10, help="number of benchmark iterations")
parser.add_argument("--no-cuda", action="store_true", default=False, help="disables CUDA training")
parser.add_argument("--use-adasum", action="store_true", default=False,
                    help="use adasum algorithm to do reduction")
parser.add_argument("--image-size", type=int, default=224, help="height and width of the synthetic images")
parser.add_argument("--num-classes", type=int, default=1000, help="number of classes")
parser.add_argument("--check", action="store_true", default=False,
                    help="check the result against an in-process reference and across ranks")
args = parser.parse_args()
args.cuda = not args.no_cuda and torch.cuda.is_available()
torch.set_num_threads(1)  # CI: 2 ranks on 2 cores

hvd.init()
if args.cuda:
    torch.cuda.set_device(hvd.local_rank())


def tiny_cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(32, args.num_classes))


def tiny_mlp():
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * args.image_size ** 2, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, args.num_classes))


torch.manual_seed(100 + hvd.rank())  # ranks start different: the broadcast must fix that
if args.model in ("tiny_cnn", "tiny_mlp"):
    model = {"tiny_cnn": tiny_cnn, "tiny_mlp": tiny_mlp}[args.model]()
else:
    from torchvision import models
    model = getattr(models, args.model)(num_classes=args.num_classes)

lr_scaler = hvd.size() if not args.use_adasum else 1
if args.cuda:
    model.cuda()
    if args.use_adasum and hvd.nccl_built():
        lr_scaler = hvd.local_size()

optimizer = optim.SGD(model.parameters(), lr=0.01 * lr_scaler)
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), compression=compression,
                                     op=hvd.Adasum if args.use_adasum else hvd.Average)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)


def synthetic_batch(rank):
    """Rank `rank`'s batch, reproducible on every rank (for --check)."""
    g = torch.Generator().manual_seed(7 + rank)
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=g)
    target = torch.randint(0, args.num_classes, (args.batch_size,), generator=g)
    return data, target


data, target = synthetic_batch(hvd.rank())
if args.cuda:
    data, target = data.cuda(), target.cuda()
if args.check:
    reference = copy.deepcopy(model).cpu()
    ref_opt = optim.SGD(reference.parameters(), lr=0.01 * lr_scaler)
    batches = [synthetic_batch(q) for q in range(hvd.size())]
    initial = [p.detach().cpu().clone() for p in model.parameters()]
    steps = [0]


def adasum_pair(a, b):
    """Horovod's pairwise Adasum of two deltas of one parameter (float64)."""
    dot, aa, bb = (a * b).sum().item(), (a * a).sum().item(), (b * b).sum().item()
    tiny = math.sqrt(sys.float_info.min)
    ca = 1.0 - dot / (2 * aa) if aa >= tiny else 1.0
    cb = 1.0 - dot / (2 * bb) if bb >= tiny else 1.0
    return ca * a + cb * b


def adasum_tree(vs):
    if len(vs) == 1:
        return vs[0]
    return adasum_pair(adasum_tree(vs[:len(vs) // 2]), adasum_tree(vs[len(vs) // 2:]))


def adasum_reference_step():
    """Every rank's plain-SGD delta (-lr * its gradient) from the shared
    reference weights, combined by Adasum per parameter."""
    deltas = []
    for x, y in batches:
        reference.zero_grad()
        F.cross_entropy(reference(x), y).backward()
        deltas.append([-ref_opt.param_groups[0]["lr"] * p.grad.double() for p in reference.parameters()])
    with torch.no_grad():
        for i, p in enumerate(reference.parameters()):
            p.add_(adasum_tree([d[i] for d in deltas]).float())


def benchmark_step():
    optimizer.zero_grad()
    output = model(data)
    loss = F.cross_entropy(output, target)
    loss.backward()
    optimizer.step()
    if args.check and args.use_adasum:
        adasum_reference_step()
        steps[0] += 1
    elif args.check:  # the same step on the mean of every rank's loss (= the average gradient)
        ref_opt.zero_grad()
        (sum(F.cross_entropy(reference(x), y) for x, y in batches) / hvd.size()).backward()
        ref_opt.step()
        steps[0] += 1


def log(s, nl=True):
    if hvd.rank() != 0:
        return
    print(s, end="\n" if nl else "")


log(f"Model: {args.model}")
log(f"Batch size: {args.batch_size}")
device = "GPU" if args.cuda else "CPU"
log(f"Number of {device}s: {hvd.size()}")
log("Running warmup...")
timeit.timeit(benchmark_step, number=args.num_warmup_batches)
log("Running benchmark...")
img_secs = []
for x in range(args.num_iters):
    time = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
    img_sec = args.batch_size * args.num_batches_per_iter / time
    log(f"Iter #{x}: {img_sec:.1f} img/sec per {device}")
    img_secs.append(img_sec)
mean = sum(img_secs) / len(img_secs)
conf = 1.96 * (sum((v - mean) ** 2 for v in img_secs) / len(img_secs)) ** 0.5
log(f"Img/sec per {device}: {mean:.1f} +-{conf:.1f}")
log(f"Total img/sec on {hvd.size()} {device}(s): {hvd.size() * mean:.1f} +-{hvd.size() * conf:.1f}")

if args.check:
    r = hvd.rank()
    failures = []
    expected_steps = args.num_warmup_batches + args.num_iters * args.num_batches_per_iter
    if steps[0] != expected_steps:
        failures.append(f"{steps[0]} steps, expected {expected_steps}")
    params = [p.detach().cpu() for p in model.parameters()]
    # fp16 rounds every averaged gradient to 11 significant bits: with lr
    # 0.01 * size over a few steps the parameters stay within 1e-4 of float32.
    # (Adasum: the library combines float32 deltas, new - old weights rather
    # than -lr * grad, with float64 dot products summed in another order than
    # the reference's; still within float32 rounding of it.)
    tol = 1e-4 if args.fp16_allreduce else 1e-6
    worst = 0.0
    for i, (p, q) in enumerate(zip(params, reference.parameters())):
        err = (p - q.detach()).abs().max().item()
        worst = max(worst, err)
        if err > tol:
            failures.append(f"parameter {i}: max difference {err} from the reference (tolerance {tol})")
    print(f"rank {r}: max difference from the float32 reference: {worst:.3g}")
    if args.fp16_allreduce and worst < 1e-7:
        # float32 averaging matches the reference to rounding (0 on 2 ranks);
        # gradients that went through float16 cannot
        failures.append(f"--fp16-allreduce: the parameters match the float32 reference ({worst}): the gradients "
                        f"were not compressed")
    moved = max((p - q).abs().max().item() for p, q in zip(params, initial))
    if moved < 10 * tol:
        failures.append(f"training moved the parameters by at most {moved}: nothing was learnt")
    everyone = hvd.allgather_object(params)
    for q in range(1, hvd.size()):
        if not all(torch.equal(a, b) for a, b in zip(everyone[0], everyone[q])):
            failures.append(f"parameters of rank {q} differ from rank 0's")
    with torch.no_grad():
        x0, y0 = batches[0]
        common_loss = F.cross_entropy(model.cpu()(x0), y0).item()
    losses = hvd.allgather_object(common_loss)
    if len(set(losses)) != 1:
        failures.append(f"loss on one common batch differs across ranks: {losses}")
    if failures:
        print(f"rank {r}: FAIL: " + "; ".join(failures), file=sys.stderr)
        sys.exit(1)
    print(f"rank {r}: check passed: {steps[0]} steps, parameters match the reference within {tol} and every "
          f"rank, common-batch loss {common_loss:.6f} on all {hvd.size()} ranks")
