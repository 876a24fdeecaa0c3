"""Training through failures (bench/faults_bench.sh): the MLP of
bench/mlp_synthetic.json (global batch 512) on 3 keyed agents of one cpu
each on loopback addresses, a non-master agent killed (SIGKILL) every PERIOD
seconds and started again at once, as a supervisor would. The same steps
three ways, side by side:
  steady   no failures, before and after the others: the useful rate is
           their mean
  live     --min-nodes 2: the job goes on from the other nodes' memory, and
           the node joins again at a step boundary from node 0's memory
  restart  the job runs again from its newest checkpoint (every CKPT steps)
           on every node (--max-restarts)
With LAYOUT "zero" the job shards Adam's state over the nodes (train.zero),
so no node holds the whole model: live goes on from the replicas each node
copies to the next every REPLICA steps (--replica-every), and a row
"replicas" runs live's options without failures, for what the copies cost.
Every run keeps checkpoints every CKPT steps and may restart (live falls
back to a restart when it cannot go on). One run each: the training
efficiency moves by several percent between runs on a loaded machine;
the steps lost do not. Per run: wall seconds,
steps run (the job's steps plus those lost), step efficiency (steps kept /
steps run), training efficiency (useful steps per second against steady),
failures handled live and by restarts, and per failure the seconds from
its handling to the next first step (median, max).
  faults_bench.py RILL PERIOD DURATION CKPT PORT [LAYOUT=dp|zero] [REPLICA=10]
"""
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

rill, period, duration, ckpt, port = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
layout = sys.argv[6] if len(sys.argv) > 6 else "dp"
replica = int(sys.argv[7]) if len(sys.argv) > 7 else 10
if layout not in ("dp", "zero"):
    sys.exit(f"layout {layout!r}: dp or zero")
layout_args = ["--set", "train.zero=true"] if layout == "zero" else []
job = "bench/mlp_synthetic.json"
machines = ",".join(f"127.0.0.{r + 1}:{port}" for r in range(3))
master = f"127.0.0.1:{port}"
tmp = tempfile.mkdtemp(prefix="rill-faults-")
key = os.path.join(tmp, "cluster.key")
subprocess.run([rill, "keygen", key], check=True, stdout=subprocess.DEVNULL)
agents = {}


def start_agent(rank):
    log = open(os.path.join(tmp, f"agent{rank}.log"), "a")
    agents[rank] = subprocess.Popen(
        [rill, "agent", "--machines", machines, "--rank", str(rank), "--key", key, "--devices", "cpu:1",
         "--join-timeout", "60", "--http", "off"], stdout=log, stderr=subprocess.STDOUT)


def formed():
    status = subprocess.run([rill, "status", "--master", master, "--key", key], capture_output=True, text=True)
    return status.returncode == 0 and "up (master)" in status.stdout and "not joined" not in status.stdout \
        and "joining" not in status.stdout and " lost" not in status.stdout


def wait_formed(seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if formed():
            return
        time.sleep(0.2)
    sys.exit(f"the cluster did not form within {seconds} s (logs in {tmp})")


def submit(steps, name, extra, kill_every=0.0):
    result = os.path.join(tmp, f"{name}.json")
    command = [rill, "submit", job, "--master", master, "--key", key, "--result", result, "--steps", str(steps),
               "--set", "train.batch_size=512", "--set", "train.log_every=50"] + layout_args + extra
    started = time.time()
    submitted = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kills = 0
    next_kill = started + kill_every
    deadline = started + 10 * duration + 120
    while submitted.poll() is None and time.time() < deadline:
        time.sleep(0.05)
        if kill_every > 0 and time.time() >= next_kill:
            rank = random.choice([1, 2])
            agents[rank].send_signal(signal.SIGKILL)
            agents[rank].wait()
            start_agent(rank)
            kills += 1
            next_kill = time.time() + kill_every
    if submitted.poll() is None:
        submitted.kill()
        sys.exit(f"{name}: the job did not end within {deadline - started:.0f} s (logs in {tmp})")
    seconds = time.time() - started
    with open(result) as f:
        r = json.load(f)
    if r["status"] != "ok":
        sys.exit(f"{name}: {r.get('error')} (logs in {tmp})")
    return seconds, kills, r


random.seed(1)
for rank in range(3):
    start_agent(rank)
try:
    wait_formed()
    _, _, calibration = submit(200, "calibration", [])
    steps_per_s = calibration["steady_samples_per_sec"] / 512
    steps = max(200, int(steps_per_s * duration))
    ckpt_dir = lambda name: ["--set", f"checkpoint.dir={tmp}/{name}", "--set", f"checkpoint.every={ckpt}",
                             "--set", "checkpoint.keep=2"]
    rows = []
    live_args = ["--min-nodes", "2"] + (["--replica-every", str(replica)] if layout == "zero" else [])
    runs = [("steady", [], 0)] + ([("replicas", live_args, 0)] if layout == "zero" else []) + \
        [("live", live_args, period), ("restart", [], period), ("steady", [], 0)]
    for name, extra, kill_every in runs:
        wait_formed()
        run = f"{name}{len(rows)}"  # its own checkpoint folder and result
        s, kills, r = submit(steps, run, ckpt_dir(run) + ["--max-restarts", "1000"] + extra, kill_every)
        rows.append((name, s, kills, r))
    print(f"3 agents x cpu:1, MLP batch 512{', ZeRO' if layout == 'zero' else ''}, {steps} steps; a non-master agent "
          f"killed every {period:g} s and started again; checkpoints every {ckpt} steps"
          f"{f'; replicas every {replica} steps' if layout == 'zero' else ''}")
    print(f"{'run':8s} {'seconds':>8s} {'kills':>5s} {'live':>4s} {'restart':>7s} {'steps run':>9s} "
          f"{'step eff':>8s} {'train eff':>9s} {'to first step s (median, max)':>30s}")
    # The useful rate: the mean of a steady run before and one after (this
    # machine's pace drifts by several percent between runs).
    useful = steps / statistics.mean(s for name, s, _, _ in rows if name == "steady")
    for name, s, kills, r in rows:
        restarts = r.get("restarts", [])
        lost = sum(x["steps_lost"] for x in restarts)
        live = sum(1 for x in restarts if x["from"] == "memory")
        stalls = [x["seconds_to_first_step"] for x in restarts]
        stall = f"{statistics.median(stalls):.2f}, {max(stalls):.2f}" if stalls else "-"
        print(f"{name:8s} {s:8.1f} {kills:5d} {live:4d} {len(restarts) - live:7d} {steps + lost:9d} "
              f"{steps / (steps + lost):8.3f} {(steps / s) / useful:9.3f} {stall:>30s}")
finally:
    for p in agents.values():
        if p.poll() is None:
            p.kill()
            p.wait()
    subprocess.run(["rm", "-rf", tmp])
