"""The figures of a finished training run, from its TensorBoard scalars (used by ``bench/gpu_check.sh``).

Per iteration (medians; the first iteration dropped when there are more, it pays for start-up):
rollout tokens/s (``rollout/tokens_per_s``), training tokens/s (``train/tokens`` x PPO epochs over
``perf/update_s``: every token of the batch goes through forward and backward once per epoch), the
model FLOPs utilisation of the update (6 x parameters x training tokens/s over the device's peak),
the weight-sync seconds (``perf/sync_s``), the iteration seconds and the peak accelerator memory
(``perf/peak_memory_gb``, CUDA only).

Run: ``python bench/run_figures.py <run dir> [--params N] [--epochs 1] [--peak-tflops 989]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def scalars(run_dir: Path) -> dict[str, list[float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard" / "rl"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [e.value for e in sorted(acc.Scalars(tag), key=lambda e: e.step)] for tag in acc.Tags()["scalars"]}


def _median(values: list[float]) -> float | None:
    values = values[1:] if len(values) > 1 else values
    return statistics.median(values) if values else None


def figures(run_dir: Path, params: float, epochs: int = 1, peak_tflops: float | None = None) -> dict[str, float | None]:
    s = scalars(run_dir)
    update = s.get("perf/update_s", [])
    tokens = s.get("train/tokens", [])
    train_tps = [t * epochs / u for t, u in zip(tokens, update) if u > 0]
    out = {
        "iterations": float(len(update)),
        "iteration_s": _median(s.get("perf/iteration_s", [])),
        "rollout_tokens_per_s": _median(s.get("rollout/tokens_per_s", [])),
        "train_tokens_per_s": _median(train_tps),
        "weight_sync_s": _median(s.get("perf/sync_s", [])),
        "peak_memory_gb": max(s["perf/peak_memory_gb"]) if s.get("perf/peak_memory_gb") else None,
        "optimizer_steps": s["train/optimizer_steps"][-1] if s.get("train/optimizer_steps") else None,
    }
    tps = out["train_tokens_per_s"]
    out["mfu"] = 6 * params * tps / (peak_tflops * 1e12) if (tps and peak_tflops) else None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--params", type=float, required=True, help="trained parameters (for the MFU)")
    ap.add_argument("--epochs", type=int, default=1, help="rl.ppo_epochs of the run")
    ap.add_argument("--peak-tflops", type=float, default=None, help="the device's dense peak (H200 bf16: 989)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    out = figures(args.run_dir, args.params, args.epochs, args.peak_tflops)
    for key, value in out.items():
        shown = "-" if value is None else (f"{value:.2%}" if key == "mfu" else f"{value:,.3f}")
        print(f"  {key:22s} {shown}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    if not out["optimizer_steps"]:
        print("FAIL: the run made no optimiser step", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
