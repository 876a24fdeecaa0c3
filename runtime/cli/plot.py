"""rill plot: draws a run's loss curve to a PNG.

Usage: plot.py INPUT OUTPUT
INPUT is a result JSON (rill run --result: its loss_curve, from start_step)
or a metrics file of JSON lines (rill run --metrics, or job-ID.jsonl from
the master's --metrics-dir: step and loss on each line), to which runs
append, each starting with a {"run": ...} line: each run is a line of its
own.
"""
import json
import sys


def read_curves(path):
    """The runs in `path`, each a (label, steps, losses): a result JSON is
    one; a metrics file, which runs append to, has a run from each
    {"run": ...} line (and from a step that does not follow the one before,
    in files written before runs were marked); other lines (checkpoints)
    are left out."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    # A metrics file of one line is one JSON object too: a metrics line
    # (it has a step).
    if isinstance(whole, dict) and "step" not in whole and "run" not in whole and "checkpoint" not in whole:
        if "loss_curve" not in whole:
            raise ValueError(f"{path}: a JSON object without a loss_curve (not a Rill result)")
        first = int(whole.get("start_step", 0)) + 1
        losses = whole["loss_curve"]
        return [("", list(range(first, first + len(losses))), losses)]
    runs = []
    label, steps, losses = "", [], []

    def close():
        if steps:
            runs.append((label, steps, losses))

    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{number}: not a JSON line: {e.msg}") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{number}: not a JSON object")
        if "run" in row and "step" not in row:
            close()
            label, steps, losses = f"{row['run']} from step {row.get('start_step', 0)}", [], []
            continue
        if "step" not in row:
            continue  # a checkpoint's line
        if "loss" not in row:
            raise ValueError(f"{path}:{number}: a metrics line needs 'step' and 'loss'")
        if steps and row["step"] <= steps[-1]:
            close()
            label, steps, losses = f"from step {row['step']}", [], []
        steps.append(row["step"])
        losses.append(row["loss"])
    close()
    if not runs:
        raise ValueError(f"{path}: no metrics lines")
    return runs


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    source, output = sys.argv[1:]
    try:
        runs = read_curves(source)
    except (OSError, ValueError) as e:
        print(f"rill plot: {e}", file=sys.stderr)
        return 1
    try:
        import matplotlib
    except ImportError:
        print("rill plot: matplotlib is missing (Debian: apt-get install python3-matplotlib)", file=sys.stderr)
        return 1
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    for number, (label, steps, losses) in enumerate(runs, 1):
        name = f"run {number}" + (f": {label}" if label else "")
        ax.plot(steps, [float("nan") if v is None else v for v in losses], linewidth=1.2, label=name)
    if len(runs) > 1:
        ax.legend()
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    losses = [v for _, _, run_losses in runs for v in run_losses]
    if all(v is not None and v > 0 for v in losses) and max(losses) / min(losses) > 100:
        ax.set_yscale("log")
    ax.set_title(source.rsplit("/", 1)[-1])
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    try:
        fig.savefig(output)
    except (OSError, ValueError) as e:  # a folder that is not there, a format matplotlib lacks
        print(f"rill plot: cannot write {output}: {e}", file=sys.stderr)
        return 1
    first, last = min(r[1][0] for r in runs), max(r[1][-1] for r in runs)
    drawn = f", {len(runs)} runs drawn apart" if len(runs) > 1 else ""
    print(f"{output}: loss over {len(losses)} points, steps {first} to {last}{drawn}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
