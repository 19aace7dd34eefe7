"""The figures of a finished training run, from its TensorBoard scalars (used by ``bench/gpu_check.sh``).

Per iteration (medians; the first iteration dropped when there are more, it pays for start-up):
rollout tokens/s (``rollout/tokens_per_s``), training tokens/s (``train/tokens`` x PPO epochs over
``perf/update_s``: every token of the batch goes through forward and backward once per epoch), the
model FLOPs utilisation of the update (6 x parameters x training tokens/s over the device's peak),
the weight-sync seconds (``perf/sync_s``), the iteration seconds, the peak accelerator memory
(``perf/peak_memory_gb``, CUDA only) and the largest gap between the rollout engine's log-probs
and the trainer's (``is/rollout_max_abs_diff``, the maximum over iterations; logged when the
trainer recomputes them, ``rl.old_log_probs=recompute``).

Run: ``python bench/run_figures.py <run dir> [--params N] [--epochs 1] [--peak-tflops 989]
[--max-logprob-diff 0.5]``. Without ``--params`` the parameters are counted in the run's exported
policy (``<run>/policy_hf/*.safetensors``). ``--max-logprob-diff`` fails the run when that gap is
missing or not below the bound (the engine and the trainer disagree: a broken weight sync, say).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path


def scalars(run_dir: Path) -> dict[str, list[float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard" / "rl"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [e.value for e in sorted(acc.Scalars(tag), key=lambda e: e.step)] for tag in acc.Tags()["scalars"]}


def count_params(policy_dir: Path) -> int:
    """Parameters of an exported HF policy, read from its safetensors headers (tied tensors are stored once)."""
    from safetensors import safe_open

    files = sorted(policy_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {policy_dir}")
    total = 0
    for path in files:
        with safe_open(str(path), framework="np") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open has keys() but no __iter__
                total += math.prod(f.get_slice(key).get_shape())
    return total


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
        "rollout_max_abs_diff": max(s["is/rollout_max_abs_diff"]) if s.get("is/rollout_max_abs_diff") else None,
    }
    tps = out["train_tokens_per_s"]
    out["mfu"] = 6 * params * tps / (peak_tflops * 1e12) if (tps and peak_tflops) else None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--params", type=float, default=None,
                    help="trained parameters, for the MFU (default: counted in <run>/policy_hf)")
    ap.add_argument("--epochs", type=int, default=1, help="rl.ppo_epochs of the run")
    ap.add_argument("--peak-tflops", type=float, default=None, help="the device's dense peak (H200 bf16: 989)")
    ap.add_argument("--max-logprob-diff", type=float, default=None,
                    help="fail unless is/rollout_max_abs_diff was logged and stays below this (bf16: 0.5)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    params = args.params if args.params is not None else count_params(args.run_dir / "policy_hf")
    print(f"  {'parameters':22s} {params:,.0f}")
    out = figures(args.run_dir, params, args.epochs, args.peak_tflops)
    for key, value in out.items():
        print(f"  {key:22s} {_shown(key, value)}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    if not out["optimizer_steps"]:
        print("FAIL: the run made no optimiser step", file=sys.stderr)
        return 1
    return check_logprob_diff(out["rollout_max_abs_diff"], args.max_logprob_diff)


def _shown(key: str, value: float | None) -> str:
    if value is None:
        return "-"
    if key == "mfu":
        return f"{value:.2%}"
    return f"{value:.4g}" if key == "rollout_max_abs_diff" else f"{value:,.3f}"


def check_logprob_diff(diff: float | None, bound: float | None) -> int:
    """0 when no bound is asked or the engine's log-probs stay within it of the trainer's, else 1 (with the reason)."""
    if bound is None:
        return 0
    if diff is None:
        print("FAIL: the run logged no is/rollout_max_abs_diff (run it with rl.old_log_probs=recompute)",
              file=sys.stderr)
        return 1
    if not diff < bound:
        print(f"FAIL: is/rollout_max_abs_diff {diff:.4g} >= {bound:g}: the rollout engine's log-probs are not the "
              "trainer's (weight sync, dtype or sampling settings)", file=sys.stderr)
        return 1
    print(f"  is/rollout_max_abs_diff {diff:.4g} < {bound:g}: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
