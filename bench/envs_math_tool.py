"""Benchmark of the math_tool environment on this machine: one table.

Rows:

- ``reset`` (generated problems; and the MATH parquet file when present, file already cached);
- ``code step``: ``MathToolEnv.step`` with a tool call, i.e. one sandboxed subprocess, for each
  sandbox backend available here (bwrap; fallback = rlimits + seccomp + landlock), result cache off;
- ``code step, cached``: the same code again with the tool-result cache on (G members of a group);
- ``answer step``: ``step`` with a ``\\boxed{}`` answer (numeric fast path);
- ``equivalence``: ``is_equivalent`` on numeric pairs (exact rationals), on symbolic pairs that go
  to math-verify (cache cleared: each pair really checked), and the per-pair cost on MATH answers.

Run: ``PYTHONPATH=src python bench/envs_math_tool.py [--steps 40] [--checks 300]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

try:
    import arl  # noqa: F401
except ImportError:  # run from a checkout without PYTHONPATH=src
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from arl.envs.math_tool import MathToolEnv, Sandbox, generate_problem
from arl.envs.math_tool.equivalence import is_equivalent, library_equivalent, normalise_answer


def math_file() -> Path:
    root = os.environ.get("ARL_SHARED_DATA")
    data = Path(root) if root else Path(__file__).resolve().parents[2] / "shared" / "data"
    return data / "math" / "train_new.parquet"


def rate(fn, n: int) -> tuple[float, float]:
    """(calls per second, mean ms) of ``fn(i)`` for i in range(n)."""
    start = time.perf_counter()
    for i in range(n):
        fn(i)
    seconds = time.perf_counter() - start
    return n / seconds, 1e3 * seconds / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--resets", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=40, help="sandboxed code steps per backend")
    parser.add_argument("--checks", type=int, default=300, help="equivalence checks per row")
    args = parser.parse_args()

    rows: list[tuple[str, float, float]] = []
    env = MathToolEnv()
    rows.append(("reset (generated)", *rate(lambda i: env.reset(i), args.resets)))
    path = math_file()
    if path.exists():
        data_env = MathToolEnv(data_path=str(path), split="all")
        rows.append(("reset (MATH parquet, cached)", *rate(lambda i: data_env.reset(i), args.resets)))

    backends = [("fallback", False)] + ([("bwrap", True)] if Sandbox().bwrap_available() else [])
    for name, use_bwrap in backends:
        env = MathToolEnv(sandbox={"use_bwrap": use_bwrap}, cache_tool_results=False, max_turns=10**9)
        env.reset(0)
        env.step("```python\nprint(0)\n```")  # warm up (bwrap probe, page cache)
        code = generate_problem(0).code
        rows.append((f"code step ({name})", *rate(lambda i, env=env, code=code: env.step(f"```python\n{code}\n```"),
                                                   args.steps)))
    env = MathToolEnv(max_turns=10**9)
    env.reset(0)
    env.step("```python\nprint(6 * 7)\n```")
    cached = "```python\nprint(6 * 7)\n```"
    rows.append(("code step (cached result)", *rate(lambda i: env.step(cached), args.steps * 50)))

    env = MathToolEnv()
    seeds = list(range(args.checks))
    answers = {s: generate_problem(s).answer for s in seeds}

    def answer_step(i: int) -> None:
        env.reset(i)
        env.step(f"\\boxed{{{answers[i]}}}")

    rows.append(("reset + answer step", *rate(answer_step, args.checks)))

    numeric = [("0.5", "\\frac{1}{2}"), ("15/14", "\\frac{15}{14}"), ("12\\%", "12"), ("-3", "-\\frac{6}{2}")]
    rows.append(("equivalence, numeric", *rate(lambda i: is_equivalent(*numeric[i % len(numeric)]), args.checks * 10)))
    symbolic = [("2\\sqrt{2}", "\\sqrt{8}"), ("[0,3)", "[0, 3)"), ("x^2+2x+1", "(x+1)^2"), ("\\{1,2\\}", "\\{2,1\\}")]
    library_equivalent("1", "1")  # start the math-verify helper outside the timing

    def symbolic_check(i: int) -> None:
        library_equivalent.cache_clear()
        is_equivalent(*symbolic[i % len(symbolic)])

    rows.append(("equivalence, symbolic (math-verify)", *rate(symbolic_check, args.checks)))
    if path.exists():
        import pyarrow.parquet as pq

        column = pq.read_table(path, columns=["gt_answer"]).column("gt_answer").to_pylist()
        truths = [t for t in column if t][: args.checks]
        library_equivalent.cache_clear()
        rows.append(
            ("equivalence, MATH gt vs itself (math-verify)",
             *rate(lambda i: library_equivalent(normalise_answer(truths[i]), normalise_answer(truths[i])), len(truths)))
        )

    print(f"math_tool env ({os.cpu_count()} CPUs; sandbox steps: {args.steps} per backend)")
    header = f"{'operation':46} {'per second':>11} {'ms each':>9}"
    print(header)
    print("-" * len(header))
    for name, per_s, ms in rows:
        print(f"{name:46} {per_s:11.1f} {ms:9.3f}")


if __name__ == "__main__":
    main()
