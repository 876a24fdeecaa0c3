# What the GPT-2 124M benchmarks share (sourced by bench/gpt2_bench.sh and
# bench/gpt2_amp_bench.sh):
#   gpt2_tokens FILE        16 x 1024 x 8 + 1 random GPT-2 token ids in llm.c's format
#   gpt2_fused_job IN OUT   the job with each layer's matmul, causal softmax and
#                           matmul as one attention op (kernels/ops/attention.cc)
# Both run $python (python3 unless set).
gpt2_tokens() {
  "${python:-python3}" - "$1" <<'PY'
import random, struct, sys
n = 16 * 1024 * 8 + 1
random.seed(0)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *[random.randrange(50257) for _ in range(n)]))
PY
}

gpt2_fused_job() {
  "${python:-python3}" - "$1" "$2" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))
block = job["blocks"][0]
ops = []
for op in block["ops"]:
    if op["name"].endswith(".scores") or op["name"].endswith(".y0"):
        continue
    if op["name"].endswith(".att"):
        ops.append({"name": "h{i}.y0", "type": "attention", "inputs": ["h{i}.q", "h{i}.k", "h{i}.v"],
                    "outputs": ["h{i}.y0", "h{i}.lse"], "attrs": {"causal": True, "scale": op["attrs"]["scale"]}})
        continue
    ops.append(op)
block["ops"] = ops
json.dump(job, open(sys.argv[2], "w"))
PY
}
