#!/usr/bin/env python3
"""The GPT of a Rill job file in PyTorch, for bench/gpt2_bench.sh,
bench/gpt_cpu_bench.sh and tests/torch/gpt_torch_check.py (the
architecture samples/gpt/gpt_moby.json writes: separate q, k, v matmuls,
tanh-GELU MLP, tied token embedding, weights [in, out] used as x @ w), built
from the job's shapes, trained with AdamW on random tokens in float32 (TF32
off), eager. Prints one JSON line: tokens per second over the timed steps and
the peak device memory.

    torch_gpt.py JOB DEVICE WARMUP STEPS [THREADS]

With DDP_RANK (0 or 1), DDP_MASTER and DDP_PORT set it is one rank of 2 in
PyTorch DDP over gloo (rank 0 listens on DDP_MASTER:DDP_PORT; GLOO_SOCKET_IFNAME
names the interface), each with half the job's batch: the anchor of
bench/net_bench.sh's gpt part. Rank 0 prints the line, with samples (rows of
the global batch) per second.

With ATTENTION=sdpa, attention is PyTorch's fused
scaled_dot_product_attention (causal; in float32 its memory-efficient
kernel, which never writes the [T, T] scores) as nanoGPT writes it; else
the separate matmuls and masked softmax Rill's job computes.

With PRECISION=bf16 (or f16) the forward runs under torch.autocast in that
dtype, as nanoGPT and llm.c's PyTorch reference train on GPUs, and AdamW is
the fused one (f16 adds a GradScaler); with COMPILE=1 the model is
torch.compile'd too. The JSON line says which ran.
"""
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist


def block_shapes(job):
    block = job["blocks"][0]
    shapes = {v["name"]: v["shape"] for v in job["variables"]}
    for i in range(block["repeat"]):
        for v in block["variables"]:
            shapes[v["name"].replace("{i}", str(i))] = v["shape"]
    heads = next(op["attrs"]["shape"][2] for op in block["ops"] if op["type"] == "reshape" and len(op["attrs"]["shape"]) == 4)
    return shapes, block["repeat"], heads


class Gpt(torch.nn.Module):
    """GPT-2 as the job writes it: weights [in, out] used as x @ w; norm
    weights (`.g`) about 1, every other value N(0, 0.02), from seed 0."""

    def __init__(self, shapes, layers, heads):
        super().__init__()
        torch.manual_seed(0)
        self.names = list(shapes)
        self.p = torch.nn.ParameterDict()
        for name, shape in shapes.items():
            value = 1.0 + 0.1 * torch.randn(shape) if name.endswith(".g") else 0.02 * torch.randn(shape)
            self.p[name.replace(".", "__")] = torch.nn.Parameter(value)
        self.layers, self.heads = layers, heads
        self.sdpa = os.environ.get("ATTENTION") == "sdpa"

    def w(self, name):
        return self.p[name.replace(".", "__")]

    def forward(self, idx, targets):
        b, t = idx.shape
        x = self.w("wte")[idx] + self.w("wpe")[:t]
        c = x.shape[-1]
        hd = c // self.heads
        ln = lambda h, n: torch.nn.functional.layer_norm(h, (c,), self.w(n + ".g"), self.w(n + ".b"), 1e-5)
        lin = lambda h, n: h @ self.w(n + ".w") + self.w(n + ".b")
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool, device=idx.device))
        for i in range(self.layers):
            p = f"h{i}"
            h = ln(x, p + ".ln1")
            split = lambda y: y.view(b, t, self.heads, hd).transpose(1, 2)
            q, k, v = split(lin(h, p + ".attn.q")), split(lin(h, p + ".attn.k")), split(lin(h, p + ".attn.v"))
            if self.sdpa:
                y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = torch.softmax(((q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))).masked_fill(~mask, float("-inf")), dim=-1)
                y = att @ v
            x = x + lin(y.transpose(1, 2).reshape(b, t, c), p + ".attn.proj")
            x = x + self.mlp(ln(x, p + ".ln2"), i, lin)
        logits = ln(x, "lnf") @ self.w("wte").t()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        aux = self.aux_loss()
        return loss if aux is None else loss + aux

    def mlp(self, h, i, lin):
        """Layer i's MLP on its normed input (a mixture of experts overrides it)."""
        return lin(torch.nn.functional.gelu(lin(h, f"h{i}.mlp.fc"), approximate="tanh"), f"h{i}.mlp.proj")

    def aux_loss(self):
        """What the layers add to the loss beside the cross-entropy: nothing here."""
        return None


def main():
    job_path, device, warmup, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if len(sys.argv) > 5:
        torch.set_num_threads(int(sys.argv[5]))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with open(job_path) as f:
        job = json.load(f)
    shapes, layers, heads = block_shapes(job)
    batch, context = job["train"]["batch_size"], job["inputs"][0]["shape"][0]
    vocab = shapes["wte"][0]
    model = Gpt(shapes, layers, heads).to(device)
    rank = int(os.environ["DDP_RANK"]) if "DDP_RANK" in os.environ else None
    global_batch = batch
    if rank is not None:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = os.environ["DDP_MASTER"], os.environ["DDP_PORT"]
        dist.init_process_group("gloo", rank=rank, world_size=2)
        batch //= 2
        model = torch.nn.parallel.DistributedDataParallel(model)
    precision = os.environ.get("PRECISION", "f32")
    amp = {"bf16": torch.bfloat16, "f16": torch.float16}.get(precision)
    fused = amp is not None and device.startswith("cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=job["optimizer"]["lr"], betas=(0.9, 0.95), weight_decay=0.1,
                            **({"fused": True} if fused else {}))
    scaler = torch.amp.GradScaler("cuda") if precision == "f16" else None
    forward = torch.compile(model) if os.environ.get("COMPILE") == "1" else model
    data = torch.randint(0, min(vocab, 50257), (batch, context + 1), device=device)

    def step():
        opt.zero_grad(set_to_none=True)
        if amp is None:
            loss = forward(data[:, :-1], data[:, 1:])
        else:
            with torch.autocast(device_type=device.split(":")[0], dtype=amp):
                loss = forward(data[:, :-1], data[:, 1:])
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return loss

    for _ in range(warmup):
        step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    if rank is not None:
        dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
    loss.item()
    if rank is not None:
        dist.barrier()
    seconds = time.perf_counter() - start
    if rank is not None:
        dist.destroy_process_group()
        if rank != 0:
            return
    params = sum(p.numel() for p in model.parameters())
    peak = torch.cuda.max_memory_allocated() if device.startswith("cuda") else 0
    print(json.dumps({"tokens_per_sec": global_batch * context * steps / seconds,
                      "samples_per_sec": global_batch * steps / seconds, "params": params, "peak_device_bytes": peak,
                      "loss": loss.item(), "precision": precision, "compiled": os.environ.get("COMPILE") == "1",
                      "cpu_kernels": cpu_kernels()}))


def cpu_kernels():
    """The CPU code behind the figures: ATen's vectorized loops (its CPU
    capability, which ATEN_CPU_CAPABILITY caps) and OpenBLAS's core type."""
    loops = "unknown"
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage:" in line:
            loops = line.split(":", 1)[1].strip()
    blas = "unknown"
    try:
        import ctypes
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        blas = lib.openblas_get_corename().decode()
    except (OSError, AttributeError):  # no libopenblas.so.0, or one without openblas_get_corename
        pass
    return {"loops": loops, "blas": blas}


if __name__ == "__main__":
    main()
