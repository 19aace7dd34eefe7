"""``MathToolEnv``: math problems solved with a sandboxed python tool (docs/design.md sections 4 and 10).

One episode is one problem. Each turn the policy's action (the text inside ``<action>``) is one of:

* a **final answer**: a ``\\boxed{...}`` outside any code block ends the episode with reward 1
  when the answer is equivalent to the ground truth (:func:`is_equivalent`), else 0;
* a **tool call**: a fenced ```` ```python ```` block (the last one when there are several; an
  unclosed fence runs to the end of the action) is executed in the sandbox and the observation is
  ``Code execution result: <stdout, or the error's last line>``, truncated to
  ``max_output_chars``; reward 0;
* anything else (including ``spec.invalid_action``, sent by the loop for unparsable output, and a
  ``\\boxed{`` that never closes) is a no-op turn with an observation saying what was expected.

The episode also ends, with reward 0, after ``max_turns`` turns. ``step`` accepts any string and
never raises for anything in it.

With ``tool_format="native"`` the python tool is a function the chat template renders (``spec.tools``: one
function ``python`` taking ``{"code": ...}``): a turn's action is either one call of it (a
:func:`~arl.envs.base.format_call_action` block; its observation is the result text itself, it goes back as
the tool's message) or text, where a ``\\boxed{...}`` answers and a fenced code block is not run. More than
one call, another function's name or arguments without a ``code`` string are refused, and so is text that
neither calls nor answers: a no-op turn saying why, marked ``info["invalid_action"]`` (an invalid turn).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from arl.envs.base import VAL_SEED_BASE, EnvSpec, StepResult, parse_call_action
from arl.envs.math_tool.data import MathRecord, load_records, split_indices
from arl.envs.math_tool.equivalence import DEFAULT_TIMEOUT_S, is_equivalent, unwrap_boxed
from arl.envs.math_tool.problems import Problem, check_templates, generate_problem
from arl.envs.math_tool.prompt import (
    NATIVE_PROMPT_RENDERERS,
    PROMPT_RENDERERS,
    PROMPT_STYLES,
    PYTHON_TOOL,
    TOOL_NAME,
)
from arl.envs.math_tool.sandbox import Sandbox, SandboxConfig

INVALID_ACTION = "noop"
START_OBSERVATION = "No code has been run yet."
RESULT_PREFIX = "Code execution result: "
MSG_FORMAT = (
    "Invalid format. Answer as <think>...</think><action>...</action> with a ```python block "
    "or \\boxed{answer} inside <action>."
)
MSG_NONE = (
    "No ```python block and no \\boxed{answer} in the action. Run code in a ```python block, "
    "or give the final answer as \\boxed{answer}."
)
MSG_BAD_BOX = "The \\boxed{ answer has no closing brace. Write the final answer as \\boxed{answer}."
MSG_EMPTY_CODE = "The ```python block is empty."
MSG_NO_TURNS = "No turns left."
MSG_NONE_NATIVE = (
    "No tool call and no \\boxed{answer} in the reply. Call the python tool to run code, or give the final "
    "answer as \\boxed{answer}."
)
MSG_ONE_CALL = "Call one tool a turn; nothing was run."
MSG_BAD_ARGUMENTS = "The python tool takes {\"code\": \"...\"}; nothing was run."
TOOL_FORMATS = ("text", "native")

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)(?![\w])[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


# --- action parsing (pure) -----------------------------------------------------------------------
@dataclass(frozen=True)
class ToolAction:
    """What an action asks for.

    Attributes:
        kind: ``answer``, ``bad_answer`` (a box without closing brace), ``code``, ``none``.
        content: the boxed answer or the code ("" otherwise).
    """

    kind: str
    content: str = ""


def extract_code(text: str) -> str | None:
    """The body of the last ```` ```python ```` (or ``py``) block, ``None`` when there is none."""
    last = None
    for match in _FENCE.finditer(text):
        last = match
    return None if last is None else last.group(1)


def parse_tool_action(text: Any) -> ToolAction:
    """Classify an action string (any input; never raises).

    A ``\\boxed`` outside the python blocks makes it an answer (even when code is present too);
    ``\\boxed`` inside code (e.g. a print) does not count.
    """
    if not isinstance(text, str):
        return ToolAction("none")
    outside = _FENCE.sub(" ", text)
    if "\\boxed" in outside or "\\fbox" in outside:
        answer = unwrap_boxed(outside)
        return ToolAction("bad_answer") if answer is None else ToolAction("answer", answer.strip())
    code = extract_code(text)
    if code is not None:
        return ToolAction("code", code)
    return ToolAction("none")


def sanitise(text: str) -> str:
    """Drop control characters (keep newlines and tabs) so observations stay printable."""
    return _CONTROL.sub("", text.replace("\r\n", "\n"))


def truncate(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters, with a visible marker when cut."""
    if len(text) <= max_chars:
        return text
    return text[:max_chars].rstrip() + " ...(truncated)"


# --- tool results cache --------------------------------------------------------------------------
@dataclass(frozen=True)
class ToolRun:
    """One executed tool call as the env keeps it."""

    code: str
    observation: str  # "Code execution result: ..." as shown to the policy
    stdout: str  # the sanitised (capped) stdout
    ok: bool


class _RunCache:
    """A small thread-safe LRU of tool runs keyed by (code, sandbox config, output length)."""

    def __init__(self, size: int = 4096):
        self.size = size
        self._data: OrderedDict[tuple, ToolRun] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> ToolRun | None:
        with self._lock:
            run = self._data.get(key)
            if run is not None:
                self._data.move_to_end(key)
            return run

    def put(self, key: tuple, run: ToolRun) -> None:
        with self._lock:
            self._data[key] = run
            self._data.move_to_end(key)
            while len(self._data) > self.size:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


RUN_CACHE = _RunCache()


# --- the environment ------------------------------------------------------------------------------
class MathToolEnv:
    """Tool-integrated math as a multi-turn text environment.

    Args:
        max_turns: turns per episode (tool calls and no-ops count; default 5).
        templates: generated-problem templates to draw from (default: all, see ``problems.py``).
        data_path: a ``.parquet``/``.jsonl`` file (verl's chat-message format, or a question and an
            answer column; :mod:`arl.envs.math_tool.data`); when set, ``reset(seed)`` plays record
            ``seed % n`` of the ``split`` instead of a generated problem. A record's system
            message, ``data_source`` and ``extra_info`` come in the episode info
            (``system_prompt``, ``data_source``, ``extra_info``).
        question_key, answer_key: the question and answer columns of ``data_path``; None finds
            them from the file's format.
        split: ``auto`` (default: validation seeds, ``>= 2**30``, play ``val``, the others
            ``train``), ``train``, ``val`` or ``all``; for generated problems it selects a separate
            seed space (``val`` seed 3 is another problem than ``train`` seed 3).
        val_fraction, split_seed: the deterministic train/val split of ``data_path``.
        max_output_chars: tool results are truncated to this many characters.
        max_code_chars: longer code is refused (a no-op turn saying so).
        prompt_style: ``full`` (instructions) or ``compact`` (one-line header, for BC'd models).
        sandbox: :class:`SandboxConfig` fields (timeout_s, cpu_time_s, memory_mb, use_bwrap, ...).
        equivalence_timeout_s: hard limit of one answer check.
        cache_tool_results: reuse the result of identical code (same sandbox settings) instead of
            running it again; G members of a group often write the same code.
        tool_format: ``text`` (a ```` ```python ```` block inside ``<action>``) or ``native`` (the python tool
            as a function of native tool calls; module docstring).
    """

    def __init__(
        self,
        *,
        max_turns: int = 5,
        templates: Sequence[str] | None = None,
        data_path: str | None = None,
        question_key: str | None = None,
        answer_key: str | None = None,
        split: str = "auto",
        val_fraction: float = 0.1,
        split_seed: int = 0,
        max_output_chars: int = 256,
        max_code_chars: int = 8000,
        prompt_style: str = "full",
        sandbox: dict[str, Any] | SandboxConfig | None = None,
        equivalence_timeout_s: float = DEFAULT_TIMEOUT_S,
        cache_tool_results: bool = True,
        tool_format: str = "text",
    ):
        self._check_args(max_turns, max_output_chars, max_code_chars, prompt_style, equivalence_timeout_s)
        if tool_format not in TOOL_FORMATS:
            raise ValueError(f"tool_format={tool_format!r} is not valid; valid: {', '.join(TOOL_FORMATS)}")
        self.tool_format = tool_format
        self.max_turns = int(max_turns)
        self.templates = check_templates(templates)
        self.data_path = data_path
        self.split = split
        self.records: tuple[MathRecord, ...] | None = None
        self.indices: list[int] = []
        self._load_data(data_path, question_key, answer_key, split, val_fraction, split_seed)
        self.max_output_chars = int(max_output_chars)
        self.max_code_chars = int(max_code_chars)
        self.prompt_style = prompt_style
        if isinstance(sandbox, SandboxConfig):
            self.sandbox_config = sandbox
        else:
            self.sandbox_config = SandboxConfig.from_dict(dict(sandbox or {}))
        self.sandbox = Sandbox(self.sandbox_config)
        self.equivalence_timeout_s = float(equivalence_timeout_s)
        self.cache_tool_results = bool(cache_tool_results)
        self.spec = EnvSpec(
            name="math_tool",
            max_turns=self.max_turns,
            invalid_action=INVALID_ACTION,
            render_prompt=(NATIVE_PROMPT_RENDERERS if tool_format == "native" else PROMPT_RENDERERS)[prompt_style],
            check_admissible=False,
            tools=(PYTHON_TOOL,) if tool_format == "native" else (),
        )
        self._clear_episode()

    def _clear_episode(self) -> None:
        """No problem drawn yet: the episode's state empty."""
        self.problem: Problem | None = None
        self.question = ""
        self.ground_truth = ""
        self.task_type = ""
        self.template = ""
        self.record: MathRecord | None = None
        self.tool_runs: list[ToolRun] = []
        self.turn = 0
        self.done = False
        self.won = False
        self.answer = ""
        self.observation = ""

    @staticmethod
    def _check_args(
        max_turns: int, max_output_chars: int, max_code_chars: int, prompt_style: str, equivalence_timeout_s: float,
    ) -> None:
        """Raise ``ValueError`` for a constructor argument out of its range."""
        if int(max_turns) < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if int(max_output_chars) < 16:
            raise ValueError(f"max_output_chars must be >= 16, got {max_output_chars}")
        if int(max_code_chars) < 1:
            raise ValueError(f"max_code_chars must be >= 1, got {max_code_chars}")
        if prompt_style not in PROMPT_STYLES:
            raise ValueError(f"prompt_style={prompt_style!r} is not valid; valid: {', '.join(PROMPT_STYLES)}")
        if not float(equivalence_timeout_s) > 0:
            raise ValueError(f"equivalence_timeout_s must be > 0, got {equivalence_timeout_s}")

    def _load_data(
        self, data_path: str | None, question_key: str | None, answer_key: str | None, split: str,
        val_fraction: float, split_seed: int,
    ) -> None:
        """Load ``data_path``'s records and the indices of the splits ``split`` plays
        (``split_records``, ``indices``); without a data path only check ``split`` and the fraction."""
        if data_path:
            self.records = load_records(data_path, question_key, answer_key)
            splits = ("train", "val") if split == "auto" else (split,)
            self.split_records = {
                name: split_indices(len(self.records), name, val_fraction, split_seed) for name in splits
            }
            for name, idx in self.split_records.items():
                if not idx:
                    raise ValueError(f"split {name!r} of {data_path} is empty (val_fraction={val_fraction})")
            self.indices = self.split_records[splits[0]]
        else:
            split_indices(2, "train" if split == "auto" else split, val_fraction, split_seed)  # validates

    # --- tasks ------------------------------------------------------------------------------
    @property
    def generated(self) -> bool:
        """Whether problems are generated (no ``data_path``)."""
        return self.records is None

    def task_for_seed(self, seed: int) -> tuple[str, str, str, str, Problem | None]:
        """(question, ground truth, task_type, template or subject, generated problem or None)."""
        split, seed = self.split, int(seed)
        if split == "auto":  # validation seeds play the val split, training seeds the train split
            split, seed = ("val", seed - VAL_SEED_BASE) if seed >= VAL_SEED_BASE else ("train", seed)
        if self.records is None:
            key = seed if split in ("train", "all") else f"{split}/{seed}"
            problem = generate_problem(key, self.templates)
            return problem.question, problem.answer, problem.task_type, problem.template, problem
        indices = self.split_records[split]
        record = self.records[indices[seed % len(indices)]]
        self.record = record
        subject = record.subject or "math"
        return record.question, record.answer, subject, subject, None

    # --- TextEnv ------------------------------------------------------------------------------
    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        self.record = None
        self.question, self.ground_truth, self.task_type, self.template, self.problem = self.task_for_seed(int(seed))
        self.tool_runs = []
        self.turn = 0
        self.done = False
        self.won = False
        self.answer = ""
        self.observation = START_OBSERVATION
        return self.observation, self._info("reset")

    def step(self, action: str) -> StepResult:
        if not self.question:
            raise RuntimeError("call reset(seed) before step()")
        if self.done:
            return StepResult(self.observation, 0.0, True, self._info("done"))
        self.turn += 1
        reward = 0.0
        calls = parse_call_action(action) if self.tool_format == "native" else None
        if isinstance(action, str) and action == self.spec.invalid_action:
            kind, observation = "invalid", MSG_FORMAT
        elif calls is not None:
            kind, observation = self._native_call(calls)
        else:
            parsed = parse_tool_action(action)
            kind = parsed.kind
            if kind == "answer":
                self.answer = parsed.content
                self.won = is_equivalent(parsed.content, self.ground_truth, self.equivalence_timeout_s)
                reward = 1.0 if self.won else 0.0
                self.done = True
                shown = truncate(sanitise(parsed.content), self.max_output_chars)
                observation = f"Final answer: \\boxed{{{shown}}}. {'Correct' if self.won else 'Incorrect'}."
            elif kind == "bad_answer":
                observation = MSG_BAD_BOX
            elif kind == "code" and self.tool_format == "text":
                observation = self._run_tool(parsed.content)
            else:
                kind, observation = "none", MSG_NONE_NATIVE if self.tool_format == "native" else MSG_NONE
        if not self.done and self.turn >= self.max_turns:
            self.done = True
            observation = f"{observation}\n{MSG_NO_TURNS}"
        self.observation = observation
        info = self._info(kind)
        if kind == "refused" or (kind == "none" and self.tool_format == "native"):
            info["invalid_action"] = True  # a reply that neither calls the tool well nor answers: an invalid turn
        return StepResult(observation, reward, self.done, info)

    def _native_call(self, calls: list) -> tuple[str, str]:
        """(kind, observation) of a turn of native tool calls: one ``python`` call with a ``code`` string runs
        (the observation is the result text), anything else is refused (kind ``refused``)."""
        if len(calls) != 1:
            return "refused", MSG_ONE_CALL
        call = calls[0]
        if call.name != TOOL_NAME:
            return "refused", f"Unknown tool {call.name[:40]!r}; the tool is {TOOL_NAME}. Nothing was run."
        code = call.arguments.get("code")
        if not isinstance(code, str) or set(call.arguments) != {"code"}:
            return "refused", MSG_BAD_ARGUMENTS
        observation = self._run_tool(code)
        return "code", observation.removeprefix(RESULT_PREFIX)

    def close(self) -> None:
        pass

    # --- internals --------------------------------------------------------------------------
    def _run_tool(self, code: str) -> str:
        if not code.strip():
            return MSG_EMPTY_CODE
        if len(code) > self.max_code_chars:
            return f"Code too long ({len(code)} characters; the limit is {self.max_code_chars})."
        key = (code, self.sandbox_config, self.max_output_chars)
        run = RUN_CACHE.get(key) if self.cache_tool_results else None
        if run is None:
            result = self.sandbox.run(code)
            text = self._result_text(result)
            run = ToolRun(code, RESULT_PREFIX + text, sanitise(result.stdout), result.ok)
            if self.cache_tool_results:
                RUN_CACHE.put(key, run)
        self.tool_runs.append(run)
        return run.observation

    def _result_text(self, result) -> str:
        """stdout, then the error line; the error line is kept whole (up to the limit) and stdout
        gets what is left of ``max_output_chars``."""
        error = sanitise(result.error)
        stdout = sanitise(result.stdout).rstrip("\n")
        if not error:
            return truncate(result.summary() if not stdout.strip() else stdout, self.max_output_chars)
        error = truncate(error, self.max_output_chars)
        room = self.max_output_chars - len(error) - 1
        if stdout.strip() and room > 0:
            return f"{truncate(stdout, room)}\n{error}"
        return error

    @property
    def anchor(self) -> str:
        """The raw state: the problem and the tool results so far (no prompt, no history)."""
        return "\n".join([self.question] + [run.observation for run in self.tool_runs])

    def _info(self, kind: str) -> dict[str, Any]:
        return {
            "task": self.question,
            "task_type": self.task_type,
            "admissible_actions": None,
            "won": self.won,
            "score": 1.0 if self.won else 0.0,
            "anchor": self.anchor,
            "turn": self.turn,
            "max_turns": self.max_turns,
            "tool_calls": len(self.tool_runs),
            "action_kind": kind,
            "template": self.template,
            "answer": self.answer,
            # a data file's record: its system message (the prompt's system message) and its source
            "system_prompt": self.record.system if self.record else "",
            "data_source": self.record.data_source if self.record else "",
            "extra_info": dict(self.record.extra_info) if self.record else {},
        }


__all__ = [
    "INVALID_ACTION",
    "RUN_CACHE",
    "START_OBSERVATION",
    "MathToolEnv",
    "ToolAction",
    "ToolRun",
    "extract_code",
    "parse_tool_action",
    "sanitise",
    "truncate",
]
