"""PyTorch anchor for bench/mlp_bench.sh: the same MLP, batch and optimizer as
bench/mlp_synthetic.json, on CPU, synthetic data from a pre-generated pool.
Prints one JSON line: samples/s over the timed steps."""
import json
import sys
import time

import torch

threads, warmup, timed, batch = (int(a) for a in sys.argv[1:5])
torch.set_num_threads(threads)
torch.manual_seed(1)
pool_x = torch.rand(12800, 784)
pool_y = torch.randint(0, 10, (12800,))
model = torch.nn.Sequential(
    torch.nn.Linear(784, 512), torch.nn.ReLU(),
    torch.nn.Linear(512, 512), torch.nn.ReLU(),
    torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
loss_fn = torch.nn.CrossEntropyLoss()
batches = pool_x.shape[0] // batch


def step(i):
    k = i % batches
    x, y = pool_x[k * batch:(k + 1) * batch], pool_y[k * batch:(k + 1) * batch]
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    return loss


for i in range(warmup):
    step(i)
start = time.perf_counter()
for i in range(timed):
    step(warmup + i)
seconds = time.perf_counter() - start
print(json.dumps({"samples_per_sec": timed * batch / seconds, "threads": torch.get_num_threads()}))
