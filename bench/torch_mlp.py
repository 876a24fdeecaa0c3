"""PyTorch anchor for bench/mlp_bench.sh and bench/gpu_mlp_bench.sh: the same
MLP, batch and optimizer as bench/mlp_synthetic.json (or, with width 4096,
bench/mlp_wide_synthetic.json), synthetic data from a pre-generated pool in
host memory. On cuda, each step copies its batch to the GPU and reads the loss
back, as Rill's source and sink do; TF32 is off, as in Rill.
Prints one JSON line: samples/s over the timed steps.
  torch_mlp.py threads warmup timed batch [device=cpu] [width=512]"""
import json
import sys
import time

import torch

threads, warmup, timed, batch = (int(a) for a in sys.argv[1:5])
device = sys.argv[5] if len(sys.argv) > 5 else "cpu"
width = int(sys.argv[6]) if len(sys.argv) > 6 else 512
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


for i in range(warmup):
    step(i)
if device != "cpu":
    torch.cuda.synchronize()
start = time.perf_counter()
for i in range(timed):
    step(warmup + i)
if device != "cpu":
    torch.cuda.synchronize()
seconds = time.perf_counter() - start
print(json.dumps({"samples_per_sec": timed * batch / seconds, "threads": torch.get_num_threads()}))
