"""PyTorch DDP anchor for bench/ddp_bench.sh: the MLP of bench/mlp_synthetic.json
data-parallel over 2 processes (gloo, loopback), one thread each, global batch
512 (256 per rank). Rank 0 prints one JSON line: samples/s over the timed steps."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world, warmup, timed, global_batch, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1)
    pool_x = torch.rand(12800, 784)
    pool_y = torch.randint(0, 10, (12800,))
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    loss_fn = torch.nn.CrossEntropyLoss()
    local = global_batch // world
    batches = pool_x.shape[0] // global_batch

    def step(i):
        k = (i % batches) * global_batch + rank * local
        opt.zero_grad(set_to_none=True)
        loss_fn(ddp(pool_x[k:k + local]), pool_y[k:k + local]).backward()
        opt.step()

    for i in range(warmup):
        step(i)
    dist.barrier()
    start = time.perf_counter()
    for i in range(timed):
        step(warmup + i)
    dist.barrier()
    seconds = time.perf_counter() - start
    if rank == 0:
        print(json.dumps({"samples_per_sec": timed * global_batch / seconds}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    warmup, timed, global_batch, port = (int(a) for a in sys.argv[1:5])
    mp.spawn(run, args=(2, warmup, timed, global_batch, port), nprocs=2)
