"""math_tool: problems solved with a sandboxed python tool and a \\boxed{} final answer.

Generated arithmetic/algebra problems (``problems``) or a parquet/jsonl file such as MATH
(``data``); answers checked by ``equivalence`` (math-verify behind a thin normalisation); code run
by ``sandbox``; the environment in ``env``, its prompt in ``prompt``, the BC expert in ``expert``.
"""

from arl.envs.math_tool.data import MathRecord, load_records, split_indices
from arl.envs.math_tool.env import MathToolEnv, extract_code, parse_tool_action
from arl.envs.math_tool.equivalence import is_equivalent, normalise_answer
from arl.envs.math_tool.expert import expert_response
from arl.envs.math_tool.problems import TEMPLATES, Problem, generate_problem
from arl.envs.math_tool.prompt import render_compact_prompt, render_prompt
from arl.envs.math_tool.sandbox import Sandbox, SandboxConfig, SandboxResult

__all__ = [
    "TEMPLATES",
    "MathRecord",
    "MathToolEnv",
    "Problem",
    "Sandbox",
    "SandboxConfig",
    "SandboxResult",
    "expert_response",
    "extract_code",
    "generate_problem",
    "is_equivalent",
    "load_records",
    "normalise_answer",
    "parse_tool_action",
    "render_compact_prompt",
    "render_prompt",
    "split_indices",
]
