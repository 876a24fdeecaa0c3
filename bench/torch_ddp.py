"""PyTorch DDP anchor for bench/ddp_bench.sh and bench/net_bench.sh: the MLP of
bench/mlp_synthetic.json data-parallel over 2 processes (gloo), one thread
each, global batch 512 (256 per rank). Rank 0 prints one JSON line: samples/s
over the timed steps.

    torch_ddp.py WARMUP TIMED GLOBAL_BATCH PORT
        both ranks, spawned here, on loopback
    torch_ddp.py WARMUP TIMED GLOBAL_BATCH PORT RANK MASTER_ADDR IFACE
        one rank of 2, as on a machine of its own: rank 0 listens on
        MASTER_ADDR:PORT, and gloo sends over the interface IFACE

With HOOK=fp16 the gradients travel as 16-bit floats (DDP's
fp16_compress_hook, no error feedback; its bf16 hook needs NCCL), the anchor
for Rill's train.compression "bf16": the same bytes."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world, warmup, timed, global_batch, port, master="127.0.0.1"):
    os.environ["MASTER_ADDR"] = master
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
    if os.environ.get("HOOK") == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
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
    if len(sys.argv) > 5:
        rank, master, iface = int(sys.argv[5]), sys.argv[6], sys.argv[7]
        os.environ["GLOO_SOCKET_IFNAME"] = iface
        run(rank, 2, warmup, timed, global_batch, port, master)
    else:
        mp.spawn(run, args=(2, warmup, timed, global_batch, port), nprocs=2)
