"""An independent oracle of one RL iteration's update (docs/design.md sections 2, 5 and 6), in plain PyTorch.

Nothing here imports ``arl.algos``, the module or the sample collation: the oracle reads the
episodes turn by turn, computes every formula with explicit loops (advantages per turn, ratios
per token against the stored old log-probs, the clip, the aggregation, KL k3, the entropy bonus),
scores each sample alone with an unpadded forward pass, clips the gradient norm and applies
AdamW by its update rule. ``tests/integration/test_update_oracle.py`` compares the weights it
ends with against the real ``AgenticRLModule`` run by a real Lightning Trainer.

It also builds the hand-made episodes (:func:`make_episodes`): token ids, rewards, validity,
anchors and stored old log-probs chosen so that advantages have both signs, anchor clusters of
several turns exist, and ratios fall inside and outside every clip range.
"""

from __future__ import annotations

import copy
import math
import random

import torch

from arl.agent.records import Episode, Turn

# ------------------------------------------------------------------------------------- episodes
# (group, returns of the turns of each episode, validity of each turn, anchor of each turn)
GROUPS = [
    # group 0: three episodes; the two last share their first anchor state ("s0") with the first
    [
        ([0.0, 1.0], [True, True], ["s0", "s1"]),
        ([0.0, 0.0, 0.0], [True, False, True], ["s0", "s2", "s1"]),
        ([2.0], [True], ["s0"]),
    ],
    # group 1: two episodes with another initial state; one invalid turn
    [
        ([0.5, 0.0], [False, True], ["t0", "t1"]),
        ([0.0, 0.0], [True, True], ["t0", "t1"]),
    ],
]


def _anchor_key(text: str) -> int:
    import hashlib

    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little", signed=True)


def make_episodes(vocab: int, mode: str, seed: int = 0) -> list[Episode]:
    """Hand-made episodes of :data:`GROUPS`; ``rollout_log_probs`` are zero placeholders (set by
    :func:`store_old_log_probs`). In ``trajectory`` mode each turn's prompt continues the
    previous prompt and response verbatim, as the agent loop's trajectory mode guarantees."""
    rng = random.Random(seed)

    def ids(n):
        return [rng.randrange(5, vocab - 5) for _ in range(n)]

    episodes = []
    eid = 0
    for g, members in enumerate(GROUPS):
        for rewards, valid, anchors in members:
            ep = Episode(group_id=g, episode_id=eid, seed=100 + g, env_name="oracle", task_type="oracle")
            eid += 1
            stream: list[int] = []
            for reward, ok, anchor in zip(rewards, valid, anchors):
                if mode == "trajectory":
                    prompt = stream + ids(rng.randint(3, 5))
                else:
                    prompt = ids(rng.randint(4, 9))
                response = ids(rng.randint(2, 5))
                ep.turns.append(Turn(prompt, response, [0.0] * len(response), "", "a" if ok else "", ok,
                                     "" if ok else "bad", float(reward), False, _anchor_key(anchor)))
                stream = prompt + response
            ep.turns[-1].done = True
            ep.won = sum(rewards) > 0
            episodes.append(ep)
    return episodes


@torch.no_grad()
def store_old_log_probs(model, episodes: list[Episode], shifts=(0.0, 0.05, -0.05, 0.4, -0.4, 0.002), seed: int = 1) -> None:
    """Set each turn's stored log-probs to the model's own plus a shift drawn from ``shifts``
    (ratios exp(-shift): inside and outside the PPO clip 0.2 and the GSPO clip 3e-3/4e-3)."""
    rng = random.Random(seed)
    for ep in episodes:
        for t in ep.turns:
            lp = token_log_probs(model, t.prompt_ids, t.response_ids)
            t.rollout_log_probs = [float(v) + rng.choice(shifts) for v in lp]


# ------------------------------------------------------------------------------------- scoring
TEMPERATURE = {"value": 1.0}  # the rollout temperature the trainer scores with (logits / T)


def _forward(model, prompt: list[int], response: list[int]):
    ids = torch.tensor([list(prompt) + list(response)])
    logits = model(input_ids=ids, use_cache=False).logits[0].float()  # (L, V), no padding, no mask
    p = len(prompt)
    rows = logits[p - 1 : p - 1 + len(response)] / TEMPERATURE["value"]  # row j predicts response[j]
    logp = torch.log_softmax(rows, dim=-1)
    chosen = logp[torch.arange(len(response)), torch.tensor(response)]
    entropy = -(logp.exp() * logp).sum(-1)
    return chosen, entropy


def token_log_probs(model, prompt, response) -> torch.Tensor:
    return _forward(model, prompt, response)[0]


# ------------------------------------------------------------------------------------- advantages
def _mean_std(values: list[float]) -> tuple[float, float]:
    if len(values) <= 1:
        return 0.0, 1.0  # docs/design.md section 6: a group of one has mean 0, std 1
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)  # unbiased
    return mean, math.sqrt(var)


def kl_rewards(reference, episodes: list[Episode], coef: float) -> dict[tuple[int, int], float]:
    """``algo.kl.in_loss=false``: each turn's reward minus coef x the sum over its tokens of k3
    between the stored old log-probs (the policy that sampled) and the reference."""
    out = {}
    with torch.no_grad():
        for ep in episodes:
            for k, t in enumerate(ep.turns):
                ref = token_log_probs(reference, t.prompt_ids, t.response_ids)
                x = ref - torch.tensor(t.rollout_log_probs)
                out[(ep.episode_id, k)] = t.reward - coef * float((torch.exp(x) - x - 1.0).clamp(-10, 10).sum())
    return out


def turn_advantages(episodes: list[Episode], advantage: dict, rewards: dict | None = None) -> dict[tuple[int, int], float]:
    """Advantage of every turn, keyed by (episode id, turn index), from docs/design.md section 6; the turn
    rewards are the episodes' own unless ``rewards`` gives others (the KL-shaped ones)."""
    penalty = float(advantage["invalid_penalty"])
    name = advantage["name"]
    assert advantage.get("penalty_only_groups", "normalise") == "normalise", "the oracle covers the official treatment"
    eps = 1e-6
    reward = rewards or {(ep.episode_id, k): t.reward for ep in episodes for k, t in enumerate(ep.turns)}
    turns = [(ep, k, t) for ep in episodes for k, t in enumerate(ep.turns)]
    ret = {ep.episode_id: sum(reward[(ep.episode_id, k)] for k in range(len(ep.turns))) for ep in episodes}
    score = {(ep.episode_id, k): ret[ep.episode_id] + (0.0 if t.valid else penalty) for ep, k, t in turns}
    groups = sorted({ep.group_id for ep in episodes})
    out: dict[tuple[int, int], float] = {}
    if name == "grpo":
        assert advantage["cross_steps"], "the oracle covers the default cross-step statistics"
        for g in groups:
            keys = [(ep.episode_id, k) for ep, k, _ in turns if ep.group_id == g]
            mean, std = _mean_std([score[key] for key in keys])
            for key in keys:
                out[key] = (score[key] - mean) / (std + eps) if advantage["norm_by_std"] else score[key] - mean
        return out
    assert name == "gigpo", name
    gamma, w, by_std = float(advantage["gamma"]), float(advantage["step_weight"]), advantage["norm"] == "mean_std_norm"
    step_return = {}
    for ep in episodes:
        running = 0.0
        for k in range(len(ep.turns) - 1, -1, -1):
            running = reward[(ep.episode_id, k)] + gamma * running
            step_return[(ep.episode_id, k)] = running + (0.0 if ep.turns[k].valid else penalty)
    for g in groups:
        keys = [(ep.episode_id, k) for ep, k, _ in turns if ep.group_id == g]
        mean, std = _mean_std([score[key] for key in keys])
        episode_part = {key: (score[key] - mean) / (std + eps) if by_std else score[key] - mean for key in keys}
        clusters: dict[int, list[tuple[int, int]]] = {}
        for ep, k, t in turns:
            if ep.group_id == g:
                clusters.setdefault(t.anchor_key, []).append((ep.episode_id, k))
        for members in clusters.values():
            values = [step_return[m] for m in members]
            c_mean = sum(values) / len(values)
            c_std = math.sqrt(sum((v - c_mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
            for m in members:
                step = step_return[m] - c_mean
                if by_std:
                    step = step / (c_std + eps)
                out[m] = episode_part[m] + w * step
    return out


# ------------------------------------------------------------------------------------- samples
def samples_of(episodes: list[Episode], mode: str) -> list[list[tuple[list[int], list[int], list[float], tuple[int, int]]]]:
    """One entry per training sample, in the order the trainer builds them: a list of its turns
    as (prompt, response, stored old log-probs, (episode id, turn index)). Turn mode: one turn per
    sample; trajectory mode: all the turns of an episode (their responses are the sample's tokens)."""
    out = []
    for ep in episodes:
        turns = [(t.prompt_ids, t.response_ids, t.rollout_log_probs, (ep.episode_id, k)) for k, t in enumerate(ep.turns)]
        if mode == "turn":
            out.extend([turn] for turn in turns)
        else:
            out.append(turns)
    return out


# ------------------------------------------------------------------------------------- the loss
def _policy_terms(loss: dict, logp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor) -> torch.Tensor:
    """Per-token policy loss of one sample's tokens (all (n,))."""
    low, high = 1.0 - float(loss["clip_ratio_low"]), 1.0 + float(loss["clip_ratio_high"])
    name = loss["name"]
    if name == "ppo_clip":
        ratio = torch.exp((logp - old).clamp(-20, 20))
        l_ppo = torch.maximum(-adv * ratio, -adv * ratio.clamp(low, high))
        dual = -adv * float(loss["clip_ratio_c"])
        return torch.where(adv < 0, torch.minimum(l_ppo, dual), l_ppo)
    if name == "gspo":
        d = (logp - old).detach()
        log_s = d.mean()  # the sequence's length-normalised log ratio
        if loss.get("seq_ratio", "geometric") == "outlier_weighted":  # a softmax of beta |log r| weighs the tokens
            log_s = (torch.softmax(float(loss["outlier_beta"]) * d.abs(), dim=0) * d).sum()
        s_t = torch.exp((log_s + logp - logp.detach()).clamp(max=10.0))
        terms = torch.maximum(-adv * s_t, -adv * s_t.clamp(low, high))
        if loss.get("token_bound") is not None:  # the whole sequence clipped when its furthest token is past the bound
            eps = float(loss["token_bound"])
            ratio = torch.exp(d)
            past = ((adv > 0) & (ratio.max() > 1 + eps)) | ((adv < 0) & (ratio.min() < 1 - eps))
            terms = torch.where(past, terms.detach(), terms)
        return terms
    if name == "cispo":
        weight = torch.exp((logp - old).clamp(-20, 20)).clamp(low, high).detach()
        return -weight * adv * logp
    if name == "sapo":
        ratio = torch.exp((logp - old).clamp(-20, 20))
        tau = torch.where(adv > 0, torch.tensor(float(loss["tau_pos"])), torch.tensor(float(loss["tau_neg"])))
        return -(4.0 / tau) * torch.sigmoid(tau * (ratio - 1.0)) * adv
    if name == "reinforce":
        return -adv * logp
    raise ValueError(name)


def _aggregate(per_sample: list[torch.Tensor], agg: str, n_tokens: int, n_seqs: int) -> torch.Tensor:
    if agg == "token-mean":
        return sum(v.sum() for v in per_sample) / max(n_tokens, 1)
    if agg == "seq-mean-token-mean":
        return sum(v.sum() / len(v) for v in per_sample) / max(n_seqs, 1)
    if agg == "seq-mean-token-sum":
        return sum(v.sum() for v in per_sample) / max(n_seqs, 1)
    raise ValueError(f"the oracle does not cover {agg}")


def mini_batch_loss(model, reference, batch, advantages, algo: dict, on_policy: bool = False) -> torch.Tensor:
    """The loss of one mini-batch (a list of samples), every sample scored alone; ``on_policy``:
    the old log-probs are the policy's own (stop-gradient)."""
    n_tokens = sum(len(resp) for sample in batch for _, resp, _, _ in sample)
    pg_terms, kl_terms, ent_terms, pg_masks = [], [], [], []
    for sample in batch:
        logps, olds, advs, refs, ents = [], [], [], [], []
        for prompt, response, old, key in sample:
            # trajectory mode: a turn's prompt is the whole stream before it, so scoring the turn
            # alone gives its tokens the context they have in the sample
            lp, ent = _forward(model, prompt, response)
            with torch.no_grad():
                ref, _ = _forward(reference, prompt, response)
            logps.append(lp)
            ents.append(ent)
            refs.append(ref)
            olds.append(torch.tensor(old))
            advs.append(torch.full((len(response),), advantages[key]))
        logp, old, adv, ref, ent = map(torch.cat, (logps, olds, advs, refs, ents))
        if on_policy:
            old = logp.detach()
        pg = _policy_terms(algo["loss"], logp, old, adv)
        keep = 1.0
        # seq_mask: drop negative-advantage sequences the policy moved away from
        if (algo["seq_mask"]["enabled"] and adv.mean() < 0
                and (old - logp).mean().item() > float(algo["seq_mask"]["delta"])):
            keep = 0.0
        pg_terms.append(pg * keep)
        pg_masks.append(keep)
        x = ref - logp
        kl_terms.append((torch.exp(x) - x - 1.0).clamp(-10, 10))
        ent_terms.append(ent)
    agg = algo["loss"]["agg"]
    n_seqs = len(batch)
    loss = _aggregate(pg_terms, agg, n_tokens, n_seqs)
    if algo["kl"]["in_loss"]:
        loss = loss + float(algo["kl"]["coef"]) * _aggregate(kl_terms, agg, n_tokens, n_seqs)
    loss = loss - float(algo["entropy_coef"]) * _aggregate(ent_terms, agg, n_tokens, n_seqs)
    return loss


# ------------------------------------------------------------------------------------- the step
class AdamW:
    """torch.optim.AdamW's update rule (decoupled weight decay, bias-corrected moments), by hand."""

    def __init__(self, params, lr, weight_decay=0.0, betas=(0.9, 0.999), eps=1e-8):
        self.params = list(params)
        self.lr, self.wd, self.b1, self.b2, self.eps = lr, weight_decay, betas[0], betas[1], eps
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]
        self.t = 0

    @torch.no_grad()
    def step(self):
        self.t += 1
        bc1, bc2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            g = p.grad
            p.mul_(1 - self.lr * self.wd)
            m.mul_(self.b1).add_(g, alpha=1 - self.b1)
            v.mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
            p.sub_(self.lr / bc1 * m / (v.sqrt() / math.sqrt(bc2) + self.eps))


def clip_grad_norm(params, max_norm: float) -> float:
    grads = [p.grad for p in params if p.grad is not None]
    total = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))
    coef = min(max_norm / (total + 1e-6), 1.0)
    for g in grads:
        g.mul_(coef)
    return total


def oracle_update(model0, episodes, algo: dict, mode: str, n_steps: int, lr: float, weight_decay: float,
                  grad_clip: float, perm_seed: int, adam_eps: float = 1e-8,
                  temperature: float = 1.0) -> tuple[dict[str, torch.Tensor], list[float]]:
    """The weights after one iteration: ``n_steps`` AdamW steps over the samples shuffled by
    ``torch.randperm`` under ``perm_seed`` and split into nearly equal mini-batches
    (``torch.tensor_split``), as the trainer's protocol (docs/architecture.md) does. With a
    single step the ratio is taken against the policy itself (``old = sg(log pi)``), as the
    official actor does on-policy (verl ``dp_actor.py``), whatever old log-probs are stored.

    Returns the final state dict and the gradient norm of every step.
    """
    TEMPERATURE["value"] = temperature
    model = copy.deepcopy(model0).train()
    reference = copy.deepcopy(model0).eval()
    shaped = None if algo["kl"]["in_loss"] else kl_rewards(reference, episodes, float(algo["kl"]["coef"]))
    advantages = turn_advantages(episodes, algo["advantage"], shaped)
    samples = samples_of(episodes, mode)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = AdamW(params, lr=lr, weight_decay=weight_decay, eps=adam_eps)
    torch.manual_seed(perm_seed)
    perm = torch.randperm(len(samples))
    norms = []
    for chunk in torch.tensor_split(perm, n_steps):
        for p in params:
            p.grad = None
        loss = mini_batch_loss(model, reference, [samples[i] for i in chunk.tolist()], advantages, algo,
                               on_policy=n_steps == 1)
        loss.backward()
        norms.append(clip_grad_norm(params, grad_clip))
        opt.step()
    TEMPERATURE["value"] = 1.0
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, norms
