"""Native tool calls end to end (arl.agent.tool_calls, the gateway, the agent loop, math_tool's native format):
a tiny model (its math tokenizer) cloned for a few hundred steps on the expert's native episodes, so that it
calls the ``python`` function the Hermes way, greedily, on the seeds below.

- the example function-calling agent (``examples/openai_math_tool_agent.py``, the ``openai`` client with
  ``tools=``) plays the same greedy episodes as the built-in loop, token for token and reward for reward, with
  turn samples and with trajectory samples, and the trainer's log-probs of its recorded calls equal the
  engine's;
- a streamed answer's tool calls assemble in the ``openai`` client into the non-streamed answer's;
- ``env=program`` with that agent, and ``env=math_tool env.kwargs.tool_format=native``, train through
  ``src/train.py``.
"""

from __future__ import annotations

import json

import pytest
import torch

from arl_testing import ROOT

pytest.importorskip("uvicorn", reason="the ecosystem extra: pip install -e '.[ecosystem]'")
openai = pytest.importorskip("openai", reason="the ecosystem extra: pip install -e '.[ecosystem]'")

AGENT = ["python", str(ROOT / "examples" / "openai_math_tool_agent.py")]
KWARGS = {"tool_format": "native", "prompt_style": "compact", "max_turns": 3}
SEEDS = (11, 12, 13)
GREEDY = {"temperature": 0.0, "max_new_tokens": 160}


@pytest.fixture(scope="module")
def native_policy(tmp_path_factory):
    """(model, tokenizer, folder) of the tiny model cloned on the expert's native episodes of :data:`SEEDS`."""
    from arl.agent.experts import expert_episodes
    from arl.agent.loop import AgentLoop, LoopOptions
    from arl.agent.samples import build_samples, collate_tokens
    from arl.models.loading import load_policy, save_hf
    from arl.models.tiny import TinyConfig
    from arl.modules.forward import forward_log_probs
    from arl.rollout.hf_engine import HFEngine
    from arl.run.builders import tiny_model

    torch.manual_seed(0)
    model, tok = load_policy(tiny_model(TinyConfig(corpus_envs=["math_tool"], corpus_seeds=150)))
    loop = AgentLoop(HFEngine(model, tok), tok, "math_tool", KWARGS,
                     LoopOptions(max_turns=3, sample_mode="trajectory", progress_every=None))
    episodes = expert_episodes(loop, SEEDS)
    loop.close()
    assert all(e.won and len(e.turns) == 2 for e in episodes)  # a call, then the boxed answer
    batch = collate_tokens(build_samples(episodes, "trajectory")[0], tok.pad_token_id)  # both turns, one row
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=0.0)
    model.train()
    for _ in range(250):
        logp, _ = forward_log_probs(model, batch)
        loss = -(logp * batch["response_mask"]).sum() / batch["response_mask"].sum()
        if float(loss.detach()) < 0.03:
            break
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    assert float(loss.detach()) < 0.03, float(loss.detach())
    folder = save_hf(model, tok, tmp_path_factory.mktemp("native") / "policy_hf")
    return model, tok, folder


def _program_loop(model, tok, **kw):
    from arl.agent.programs import ProgramLoop
    from arl.rollout.hf_engine import HFEngine

    return ProgramLoop(HFEngine(model, tok), tok, AGENT, max_concurrency=1,
                       pass_env=("ARL_PROMPT_STYLE", "ARL_MAX_TURNS"), **kw)


@pytest.mark.parametrize("sample_mode", ["turn", pytest.param("trajectory", marks=pytest.mark.long)])
def test_a_tools_agent_plays_the_built_in_loops_greedy_episodes(native_policy, sample_mode, monkeypatch):
    from arl.agent.loop import AgentLoop, LoopOptions, Task
    from arl.agent.samples import build_samples, collate_tokens
    from arl.modules.forward import forward_log_probs
    from arl.rollout.engine import SamplingParams
    from arl.rollout.hf_engine import HFEngine

    model, tok, _ = native_policy
    monkeypatch.setenv("ARL_PROMPT_STYLE", KWARGS["prompt_style"])
    monkeypatch.setenv("ARL_MAX_TURNS", str(KWARGS["max_turns"]))
    params = SamplingParams(**GREEDY)
    programs = _program_loop(model, tok)
    built_in = AgentLoop(HFEngine(model, tok), tok, "math_tool", KWARGS,
                         LoopOptions(max_turns=3, sample_mode=sample_mode, progress_every=None))
    if sample_mode == "trajectory":
        programs.use_trajectory_samples()
    assert programs.sample_mode == built_in.sample_mode == sample_mode
    calls = 0
    for k, seed in enumerate(SEEDS):  # one at a time: both sides decode batches of one
        (through_gateway,) = programs.run([Task(k, seed)], 1, params)
        (direct,) = built_in.run([Task(k, seed)], 1, params)
        assert not through_gateway.env_error and through_gateway.num_turns == direct.num_turns >= 1
        for a, b in zip(through_gateway.turns, direct.turns):
            assert a.prompt_ids == b.prompt_ids and a.response_ids == b.response_ids
            assert a.reward == pytest.approx(b.reward) and a.valid == b.valid
            assert max(abs(x - y) for x, y in zip(a.rollout_log_probs, b.rollout_log_probs)) < 1e-5
            calls += bool((b.message or {}).get("tool_calls"))
            assert bool((a.message or {}).get("tool_calls")) == bool((b.message or {}).get("tool_calls"))
        assert through_gateway.won == direct.won and through_gateway.ret == pytest.approx(direct.ret)
        samples, _ = build_samples([through_gateway], sample_mode)
        assert len(samples) == (1 if sample_mode == "trajectory" else through_gateway.num_turns)
        batch = collate_tokens(samples, tok.pad_token_id)
        with torch.no_grad():
            logp, _ = forward_log_probs(model, batch)
        assert float(((logp - batch["rollout_log_probs"]).abs() * batch["response_mask"]).max()) < 1e-4
    assert calls >= len(SEEDS) - 1  # the greedy clone calls the tool (the episodes are tool-call episodes)
    built_in.close()


def test_streamed_tool_calls_assemble_in_the_openai_client(native_policy):
    from arl.agent.gateway import RecordingGateway
    from arl.envs.math_tool.env import MathToolEnv
    from arl.rollout.engine import SamplingParams
    from arl.rollout.hf_engine import HFEngine

    model, tok, _ = native_policy
    env = MathToolEnv(**KWARGS)
    observation, info = env.reset(SEEDS[0])
    messages = [{"role": "user", "content": env.spec.render_prompt(observation, "", info)}]
    with RecordingGateway(HFEngine(model, tok), tok, SamplingParams(**GREEDY)) as gateway:
        sid = gateway.open_session()
        client = openai.OpenAI(base_url=gateway.base_url(sid), api_key="arl")
        whole = client.chat.completions.create(model="arl-policy", messages=messages, tools=list(env.spec.tools))
        with client.chat.completions.stream(model="arl-policy", messages=messages, tools=list(env.spec.tools)) as stream:
            streamed = stream.get_final_completion()
        gateway.close_session(sid)
    (call,) = whole.choices[0].message.tool_calls
    assert whole.choices[0].finish_reason == streamed.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "python" and "print(" in json.loads(call.function.arguments)["code"]
    (again,) = streamed.choices[0].message.tool_calls
    assert (again.function.name, again.function.arguments) == (call.function.name, call.function.arguments)
    assert again.id.startswith("call_") and again.id != call.id  # ids are per request
    assert streamed.choices[0].message.content == whole.choices[0].message.content


def _scalars(folder, tag: str) -> list[float]:
    """Every value of scalar ``tag`` in the TensorBoard events under ``folder``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    values = []
    for events in sorted(folder.rglob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events))
        acc.Reload()
        if tag in acc.Tags()["scalars"]:
            values += [e.value for e in acc.Scalars(tag)]
    return values


@pytest.mark.long
@pytest.mark.parametrize("form", ["program", "built_in"])
def test_native_tool_calls_train(native_policy, form, tmp_path, monkeypatch):
    """From the native clone, two RL iterations through the real pipeline: ``env=program`` with the
    function-calling agent, and ``env=math_tool env.kwargs.tool_format=native``; no episode fails, the losses
    are finite, and on unseen validation problems the clone still makes calls that parse."""
    from arl.run.pipeline import train
    from arl_testing import compose

    _, _, folder = native_policy
    monkeypatch.setenv("ARL_PROMPT_STYLE", KWARGS["prompt_style"])
    env = (["env=program", f"env.kwargs.command=[python,{AGENT[1]}]", "env.kwargs.pass_env=[ARL_PROMPT_STYLE]"]
           if form == "program" else ["env=math_tool", "env.kwargs.tool_format=native", "env.kwargs.prompt_style=compact"])
    cfg = compose([*env, "bc.enabled=false", "debug=smoke", f"model.init_from={folder}", "rollout.max_new_tokens=160",
                   "rollout.temperature=0.3", "rollout.val_temperature=0"], output_dir=str(tmp_path))
    results = train(cfg)
    errors = _scalars(tmp_path / "tensorboard", "rollout/env_errors")
    losses = _scalars(tmp_path / "tensorboard", "actor/pg_loss")
    assert errors and max(errors) == 0.0 and len(losses) >= 2 and all(torch.isfinite(torch.tensor(losses)))
    assert results["val_after_rl"]["val/valid_action_ratio"] > 0.0  # calls that parsed, on unseen problems


@pytest.mark.long
def test_behaviour_cloning_and_rl_on_the_native_format(tmp_path):
    """``env=math_tool env.kwargs.tool_format=native debug=smoke``: the expert's native episodes are the BC data
    (each answer its ``<tool_call>`` block or its boxed answer, ended by the end-of-turn token), then RL."""
    from arl.bc.dataset import load_episodes
    from arl.models.loading import load_policy
    from arl.run.pipeline import train
    from arl_testing import compose

    cfg = compose(["env=math_tool", "env.kwargs.tool_format=native", "debug=smoke", "rollout.max_new_tokens=160"],
                  output_dir=str(tmp_path))
    results = train(cfg)
    assert len(_scalars(tmp_path / "tensorboard", "actor/pg_loss")) >= 2
    _, tok = load_policy(results["policy_hf"])
    items = load_episodes(results["bc_dataset"], tok, "turn", "math_tool")
    turns = [t for item in items for t in item.episode.turns]
    assert turns and all(t.response_ids[-1] == tok.eos_token_id and t.valid for t in turns)
    calls = [t for t in turns if "<tool_call>" in t.response_text]
    assert calls and all(t.message["tool_calls"][0]["function"]["name"] == "python" for t in calls)
    later = [item.episode.turns[1] for item in items if len(item.episode.turns) > 1]
    assert later and all("<tool_response>" in tok.decode(t.prompt_ids) for t in later)  # the result as the tool's
