"""PyTorch anchor for bench/mlp_bench.sh and bench/gpu_mlp_bench.sh: the same
MLP, batch and optimizer as bench/mlp_synthetic.json (or, with width 4096,
bench/mlp_wide_synthetic.json), synthetic data from a pre-generated pool in
host memory. On cuda, each step copies its batch to the GPU and reads the loss
back, as Rill's source and sink do; TF32 is off, as in Rill.
Prints one JSON line: samples/s over the timed steps (and, on cuda, the peak
device memory PyTorch allocated).
  torch_mlp.py threads warmup timed batch [device=cpu] [width=512] [mode=eager]
Modes on cuda, the anchors of bench/gpu_mlp_bench.sh:
  eager    as above
  compile  the model under torch.compile, otherwise as eager
  graph    the whole step (forward, backward, SGD) captured once as a CUDA
           graph and replayed, the pool already in device memory, the loss
           not read back: what launch overhead and copies leave
  gemm     the step's 8 GEMMs alone (3 forward, 3 weight gradients, 2 input
           gradients), back to back: the GEMM limit of this step"""
import json
import sys
import time

import torch

threads, warmup, timed, batch = (int(a) for a in sys.argv[1:5])
device = sys.argv[5] if len(sys.argv) > 5 else "cpu"
width = int(sys.argv[6]) if len(sys.argv) > 6 else 512
mode = sys.argv[7] if len(sys.argv) > 7 else "eager"
torch.set_num_threads(threads)
torch.backends.cuda.matmul.allow_tf32 = False
torch.manual_seed(1)
pool = 20 * batch if width > 512 else 12800
pool_x = torch.rand(pool, 784)
pool_y = torch.randint(0, 10, (pool,))
model = torch.nn.Sequential(
    torch.nn.Linear(784, width), torch.nn.ReLU(),
    torch.nn.Linear(width, width), torch.nn.ReLU(),
    torch.nn.Linear(width, 10)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
loss_fn = torch.nn.CrossEntropyLoss()
batches = pool_x.shape[0] // batch
if mode == "compile":
    model = torch.compile(model)


def step(i):
    k = i % batches
    x, y = pool_x[k * batch:(k + 1) * batch], pool_y[k * batch:(k + 1) * batch]
    if device != "cpu":
        x, y = x.to(device), y.to(device)
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    return loss.item() if device != "cpu" else loss


if mode == "graph":
    gpu_x, gpu_y = pool_x.to(device), pool_y.to(device)
    static_x, static_y = gpu_x[:batch].clone(), gpu_y[:batch].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the graph, as the capture needs
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            loss_fn(model(static_x), static_y).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = loss_fn(model(static_x), static_y)
        static_loss.backward()
        opt.step()

    def step(i):  # noqa: F811
        k = i % batches
        static_x.copy_(gpu_x[k * batch:(k + 1) * batch])
        static_y.copy_(gpu_y[k * batch:(k + 1) * batch])
        graph.replay()
elif mode == "gemm":
    dims = [784, width, width, 10]
    acts = [torch.rand(batch, d, device=device) for d in dims]
    weights = [torch.rand(dims[l], dims[l + 1], device=device) for l in range(3)]

    def step(i):  # noqa: F811
        for l in range(3):  # forward
            torch.mm(acts[l], weights[l], out=acts[l + 1])
        for l in range(3):  # weight gradients
            torch.mm(acts[l].t(), acts[l + 1], out=weights[l])
        for l in (2, 1):    # input gradients (the first layer needs none)
            torch.mm(acts[l + 1], weights[l].t(), out=acts[l])


for i in range(warmup):
    step(i)
if device != "cpu":
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
start = time.perf_counter()
for i in range(timed):
    step(warmup + i)
if device != "cpu":
    torch.cuda.synchronize()
seconds = time.perf_counter() - start
out = {"samples_per_sec": timed * batch / seconds, "threads": torch.get_num_threads(), "mode": mode}
if device != "cpu":
    out["peak_device_bytes"] = torch.cuda.max_memory_allocated()
print(json.dumps(out))
