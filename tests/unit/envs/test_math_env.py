"""MathToolEnv: the TextEnv contract, exact rewards and observations, hostile actions, the expert."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arl.agent.experts import get_expert
from arl.agent.parsing import parse_response
from arl.agent.prompts import HistoryItem, render_history
from arl.envs.base import INFO_KEYS, StepResult, TextEnv
from arl.envs.math_tool import MathToolEnv, extract_code, parse_tool_action
from arl.envs.math_tool.env import MSG_BAD_BOX, MSG_EMPTY_CODE, MSG_FORMAT, MSG_NONE, START_OBSERVATION
from arl.envs.math_tool.expert import expert_response
from arl.envs.registry import make_env
from arl_testing import SHARED_DATA, compose

MATH_FILE = SHARED_DATA / "math" / "train_new.parquet"
EXTRA_KEYS = ("turn", "max_turns", "tool_calls", "action_kind", "template", "answer")
FENCE = "```"


def py(code: str) -> str:
    return f"{FENCE}python\n{code}\n{FENCE}"


def _check_info(info: dict) -> None:
    for key in INFO_KEYS + EXTRA_KEYS:
        assert key in info, key
    assert info["admissible_actions"] is None
    assert isinstance(info["won"], bool) and info["score"] in (0.0, 1.0)
    assert info["anchor"].startswith(info["task"])


# --- contract -------------------------------------------------------------------------------------
def test_contract_registry_and_spec():
    env = make_env("math_tool")
    assert isinstance(env, MathToolEnv) and isinstance(env, TextEnv)
    assert env.spec.name == "math_tool" and env.spec.max_turns == 5
    assert env.spec.check_admissible is False and env.spec.invalid_action == "noop"
    obs, info = env.reset(0)
    _check_info(info)
    assert obs == START_OBSERVATION
    assert info["task"] == "Compute 1/2 + 4/7. Give the answer as a reduced fraction."
    assert info["task_type"] == "arithmetic" and info["template"] == "fractions"
    assert info["anchor"] == info["task"] and info["turn"] == 0
    assert get_expert("math_tool") is expert_response
    env.close()


def test_prompt_shows_problem_instructions_and_history():
    env = MathToolEnv()
    obs, info = env.reset(0)
    prompt = env.spec.render_prompt(obs, "", info)
    assert "```python" in prompt and "\\boxed{answer}" in prompt
    assert "<think>...</think><action>...</action>" in prompt
    assert f"Problem: {info['task']}" in prompt
    assert prompt.endswith(f"Current observation (Turn 1 of 5):\n{START_OBSERVATION}")
    assert len(prompt.split()) < 90
    action = py("print(1/2 + 4/7)")
    result = env.step(action)
    history = render_history([HistoryItem(obs, action, result.reward)], 2, show_observations=True)
    second = env.spec.render_prompt(result.observation, history, {**info, **result.info})
    assert f"[Turn 1] Observation:\n{START_OBSERVATION}\nAction: {action}" in second
    assert second.endswith("Current observation (Turn 2 of 5):\nCode execution result: 1.0714285714285714")
    compact = MathToolEnv(prompt_style="compact")
    obs, info = compact.reset(0)
    small = compact.spec.render_prompt(obs, "", info)
    assert small.startswith("Math.") and f"Problem: {info['task']}" in small and len(small.split()) < 40


def test_reset_is_deterministic_and_splits_differ():
    a, b = MathToolEnv(), MathToolEnv()
    for seed in range(20):
        assert a.reset(seed) == b.reset(seed)
        assert a.ground_truth == b.ground_truth
    train = [MathToolEnv().reset(s)[1]["task"] for s in range(10)]
    val = [MathToolEnv(split="val").reset(s)[1]["task"] for s in range(10)]
    assert train != val
    only = MathToolEnv(templates=["linear_equation"])
    assert all(only.reset(s)[1]["template"] == "linear_equation" for s in range(10))


# --- rewards and observations ----------------------------------------------------------------------------
def test_code_then_correct_answer():
    env = MathToolEnv()
    env.reset(0)  # 1/2 + 4/7 = 15/14
    code = env.step(py("from fractions import Fraction as F\nprint(F(1, 2) + F(4, 7))"))
    assert code == StepResult("Code execution result: 15/14", 0.0, False, code.info)
    assert code.info["tool_calls"] == 1 and code.info["action_kind"] == "code"
    assert code.info["anchor"] == f"{env.question}\nCode execution result: 15/14"
    final = env.step("so the answer is \\boxed{\\frac{15}{14}}")
    assert final.reward == 1.0 and final.done and final.info["won"] and final.info["score"] == 1.0
    assert final.observation == "Final answer: \\boxed{\\frac{15}{14}}. Correct."
    assert final.info["answer"] == "\\frac{15}{14}"
    after = env.step(py("print(1)"))
    assert after.done and after.reward == 0.0 and after.info["tool_calls"] == 1


@pytest.mark.parametrize("answer, reward", [("15/14", 1.0), ("1.0714285714285714", 0.0), ("14/15", 0.0), ("", 0.0)])
def test_answer_rewards(answer, reward):
    env = MathToolEnv()
    env.reset(0)
    result = env.step(f"\\boxed{{{answer}}}")
    assert result.done and result.reward == reward and result.info["won"] is (reward == 1.0)


def test_no_op_turns_and_the_turn_limit():
    env = MathToolEnv(max_turns=3)
    env.reset(0)
    first = env.step("noop")
    assert first == StepResult(MSG_FORMAT, 0.0, False, first.info) and first.info["action_kind"] == "invalid"
    second = env.step("I think it is 2")
    assert second.observation == MSG_NONE and not second.done
    assert second.info["anchor"] == env.question  # no-ops do not change the state
    third = env.step("\\boxed{15/14")
    assert third.observation == f"{MSG_BAD_BOX}\nNo turns left." and third.done and third.reward == 0.0


def test_code_details():
    env = MathToolEnv(max_output_chars=20, max_turns=10)
    env.reset(0)
    assert env.step(py("print('a')") + "\n" + py("print('b')")).observation == "Code execution result: b"
    assert env.step(py("print('x' * 100)")).observation == "Code execution result: " + "x" * 20 + " ...(truncated)"
    assert env.step(py("   ")).observation == MSG_EMPTY_CODE
    assert env.step(py("1/0")).observation == "Code execution result: ZeroDivisionError: d ...(truncated)"
    both = env.step(py("print(1234)\n1/0")).observation
    assert both == "Code execution result: ZeroDivisionError: d ...(truncated)"
    env = MathToolEnv(max_output_chars=60)
    env.reset(0)
    both = env.step(py("print('y' * 100)\n1/0")).observation
    assert both == "Code execution result: " + "y" * 24 + " ...(truncated)\nZeroDivisionError: division by zero"
    env = MathToolEnv(max_code_chars=25, max_turns=8)
    env.reset(0)
    assert env.step(py("print(123456789012345678)")).observation.startswith("Code too long (26 characters")
    assert env.step(py("print('\\x1b[31mred\\x00')")).observation == "Code execution result: [31mred"


def test_action_parsing():
    assert parse_tool_action(py("print(1)")).kind == "code"
    assert parse_tool_action(py("print('\\\\boxed{5}')")).kind == "code"  # a box inside code is code
    assert parse_tool_action(py("print(1)") + " so \\boxed{5}") == parse_tool_action("\\boxed{5}")
    assert parse_tool_action("\\boxed{5}").content == "5"
    assert parse_tool_action("\\boxed{5").kind == "bad_answer"
    assert parse_tool_action("```python\nprint(2)").content == "print(2)"  # unclosed fence
    assert parse_tool_action("```py\nprint(3)\n```").content == "print(3)\n"
    assert parse_tool_action("```\nprint(3)\n```").kind == "none"  # untagged fences are not python
    assert parse_tool_action(None).kind == "none"
    assert extract_code("a ```python x=1``` b ```python\ny=2\n``` c") == "y=2\n"


def test_works_from_a_worker_thread(tmp_path):
    """Rollouts may step envs off the main thread: no signal-based timeout may be needed there."""
    from concurrent.futures import ThreadPoolExecutor

    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"question": "Simplify sqrt(8).", "gt_answer": "2\\sqrt{2}"}))

    def episode() -> tuple[str, float]:
        env = MathToolEnv(data_path=str(path), split="all")
        env.reset(0)
        code = env.step(py("print(8 ** 0.5)")).observation
        return code, env.step("\\boxed{\\sqrt{8}}").reward  # goes to math-verify

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: episode(), range(2)))
    assert results == [("Code execution result: 2.8284271247461903", 1.0)] * 2


# --- data files ---------------------------------------------------------------------------------------------
def test_data_file_mode(tmp_path):
    path = tmp_path / "p.jsonl"
    rows = [{"question": f"What is {i} + {i}?", "gt_answer": str(2 * i), "subject": "Prealgebra"} for i in range(20)]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    env = MathToolEnv(data_path=str(path), split="all")
    obs, info = env.reset(3)
    assert info["task"] == "What is 3 + 3?" and info["task_type"] == "Prealgebra" and obs == START_OBSERVATION
    assert env.step("\\boxed{6}").reward == 1.0
    val = MathToolEnv(data_path=str(path), split="val", val_fraction=0.25)
    train = MathToolEnv(data_path=str(path), split="train", val_fraction=0.25)
    assert len(val.indices) == 5 and len(train.indices) == 15 and not set(val.indices) & set(train.indices)
    with pytest.raises(ValueError, match="scripted solutions for generated problems only"):
        expert_response(env)
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        MathToolEnv(data_path=str(tmp_path / "nope.parquet"))


def test_math_parquet_mode():
    if not MATH_FILE.exists():
        pytest.skip(f"MATH data not found at {MATH_FILE}")
    env = MathToolEnv(data_path=str(MATH_FILE), split="all")
    _, info = env.reset(0)
    assert info["task_type"] == "Intermediate Algebra" and env.ground_truth == "118"
    assert env.step("The answer is $\\boxed{118}$.").reward == 1.0
    val = MathToolEnv(data_path=str(MATH_FILE), split="val")
    assert len(val.indices) == 852


def test_bad_config_is_clear():
    with pytest.raises(ValueError, match="unknown math template.*valid templates"):
        MathToolEnv(templates=["calculus"])
    with pytest.raises(ValueError, match="prompt_style"):
        MathToolEnv(prompt_style="long")
    with pytest.raises(ValueError, match="max_turns"):
        MathToolEnv(max_turns=0)
    with pytest.raises(ValueError, match="unknown sandbox option"):
        MathToolEnv(sandbox={"timeout": 3})
    with pytest.raises(ValueError, match="split"):
        MathToolEnv(split="test")
    with pytest.raises(RuntimeError, match="reset"):
        MathToolEnv().step("\\boxed{1}")


def test_hydra_config_builds_the_env():
    cfg = compose(["env=math_tool"])
    assert cfg.env.name == "math_tool" and cfg.env.max_turns == cfg.env.kwargs.max_turns == 5
    env = make_env(cfg.env.name, **cfg.env.kwargs)
    assert env.spec.max_turns == 5 and env.reset(1)[1]["task"]


# --- hostile actions -------------------------------------------------------------------------------------
HOSTILE = [
    "",
    " ",
    "x" * 100_000,
    "\\boxed{" * 1000,
    "}" * 1000 + "\\boxed{1}",
    "\x00\x01\x02\x1b[2J\x7f",
    "<think><think></think><action><action>\\boxed{1}</action>",
    "</action>```python",
    "```python",
    "```python\n```python\nprint(1)\n```\n```",
    "```python\nprint('```')\n```",
    "\\boxed{\\frac{1}{",
    "\\boxed",
    "\\boxed{}",
    "```python\n" + "print(1)\n" * 20_000 + "```",
    "```python\nprint('\ud800')\n```",
    "```python\n\x00\n```",
    "```python\nimport sys; sys.exit(3)\n```",
    "```python\nraise SystemExit('bye')\n```",
    "```python\nimport os; os._exit(0)\n```",
]


def _assert_sane(result: StepResult, env: MathToolEnv) -> None:
    assert isinstance(result, StepResult) and isinstance(result.observation, str)
    assert result.reward in (0.0, 1.0) and isinstance(result.done, bool)
    assert len(result.observation) <= env.max_output_chars + 200
    _check_info(result.info)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("action", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_actions_never_raise(action):
    env = MathToolEnv(sandbox={"timeout_s": 3.0})
    env.reset(0)
    _assert_sane(env.step(action), env)
    _assert_sane(env.step(action), env)


FRAGMENTS = st.sampled_from(
    ["<think>", "</think>", "<action>", "</action>", "```python\n", "```py ", "```", "\n", "\\boxed{", "}", "{",
     "\\frac{1}{2}", "15/14", "print(2)", "print(", "\x00", "\u202e", "$", "\\", "x = ", "1/0", " "]
)


@pytest.mark.timeout(300)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(FRAGMENTS, st.text(max_size=8)), max_size=12).map("".join))
def test_step_never_raises_on_any_text(text):
    env = MathToolEnv(sandbox={"timeout_s": 3.0})
    env.reset(0)
    for _ in range(2):
        _assert_sane(env.step(text), env)


# --- the expert ------------------------------------------------------------------------------------------
def _expert_episode(env: MathToolEnv, seed: int) -> tuple[float, int]:
    env.reset(seed)
    for turn in range(1, env.max_turns + 1):
        parsed = parse_response(expert_response(env), None)
        assert parsed.valid, parsed
        result = env.step(parsed.action)
        if result.done:
            return result.reward, turn
    return 0.0, env.max_turns


@pytest.mark.timeout(300)
def test_expert_solves_generated_problems_in_two_turns():
    """Real episodes (one sandbox run each) over all templates; the snippets of 1,800 problems are
    checked in-process in test_math_problems, 500 full episodes under -m slow."""
    env = MathToolEnv()
    outcomes, templates = [], set()
    for seed in range(30):
        outcomes.append(_expert_episode(env, seed))
        templates.add(env.template)
    assert outcomes == [(1.0, 2)] * 30
    assert len(templates) == 6


def test_expert_turns():
    env = MathToolEnv()
    env.reset(0)
    first = expert_response(env)
    assert first == (
        "<think>Add the fractions exactly with Fraction.</think><action>```python\n"
        "from fractions import Fraction as F\nprint(F(1, 2) + F(4, 7))\n```</action>"
    )
    env.step(parse_response(first).action)
    assert expert_response(env) == "<think>The code printed 15/14.</think><action>\\boxed{15/14}</action>"
    with pytest.raises(RuntimeError, match="reset"):
        expert_response(MathToolEnv())


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_expert_solves_500_generated_problems():
    env = MathToolEnv(cache_tool_results=False)
    assert all(_expert_episode(env, seed) == (1.0, 2) for seed in range(500))


def test_auto_split_plays_held_out_problems_on_validation_seeds(tmp_path):
    from arl.envs.base import VAL_SEED_BASE

    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"question": f"q{i}", "gt_answer": str(i)}) + "\n" for i in range(20)))
    auto = MathToolEnv(data_path=str(path), val_fraction=0.25)
    train = MathToolEnv(data_path=str(path), split="train", val_fraction=0.25)
    val = MathToolEnv(data_path=str(path), split="val", val_fraction=0.25)
    for s in range(12):
        assert auto.reset(s)[1]["task"] == train.reset(s)[1]["task"]
        assert auto.reset(VAL_SEED_BASE + s)[1]["task"] == val.reset(s)[1]["task"]
    train_q = {train.reset(s)[1]["task"] for s in range(40)}
    val_q = {auto.reset(VAL_SEED_BASE + s)[1]["task"] for s in range(40)}
    assert len(val_q) == 5 and not train_q & val_q
    # generated problems: validation seeds come from the val seed space
    assert MathToolEnv().reset(VAL_SEED_BASE + 3)[1]["task"] == MathToolEnv(split="val").reset(3)[1]["task"]
