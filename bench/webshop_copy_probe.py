"""Probe: can the embedded tiny model copy a WebShop product id, and what does it take?

The tiny model clones WebShop's action format but its purchases fail. Two skills meet on a results
page: *choosing* the product that matches the task, and *copying* its 10-character id into
``click[<id>]``. This probe trains a fresh tiny model on results-page turns alone (the compact
prompt of the real env, the expert's history, the page with its 5 results) and separates them:

- ``--target first``: the answer is the first result's id (``<think>ID</think><action>click[ID]</action>``):
  copying alone, from a place that never moves;
- ``--target expert``: the expert's own answer on that page: choosing and copying.

Printed, per evaluation point: ``id right`` (greedy answer clicks the target id), ``on page`` (it
clicks one of the page's ids, whichever: the copy worked), ``id chars`` (teacher-forced accuracy of
the id's tokens) and the copying attention: for each layer, the largest mean attention (over the id
tokens of the answer, best head) onto the page token that the next id character copies from. An
attention near 1 at some layer is a formed copy head; near 1/(page tokens) is none.

Also printed once: how the ids tokenise (pieces per id, share of one-character pieces).

Run: ``PYTHONPATH=src python bench/webshop_copy_probe.py [--target first|expert] [--steps 1500]
[--layers 4 --hidden 128 --heads 4] [--train-turns 4000] [--id-pairs]``; ``--policy <bc_policy_hf>``
measures a trained policy (a BC run's) on the same held-out pages instead of training one.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import re
import statistics
import sys
import time
from pathlib import Path

import torch

try:
    import arl  # noqa: F401
except ModuleNotFoundError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from arl.agent.prompts import HistoryItem, encode_prompt, render_history
from arl.envs.base import VAL_SEED_BASE
from arl.envs.webshop.env import WebShopEnv
from arl.envs.webshop.expert import expert_response
from arl.models.tiny import TinyConfig, build_model

ID_RE = re.compile(r"\bB0[A-Z0-9]{8}\b")
ACTION_RE = re.compile(r"<action>(.*?)</action>")


@dataclasses.dataclass
class Turn:
    prompt_ids: list[int]
    answer: str  # the target answer text
    target_id: str  # the id the answer clicks
    page_ids: list[str]  # ids listed on the page, in order


def results_turns(seeds, tokenizer, target: str, history_window: int = 2) -> list[Turn]:
    """The results-page turns of expert episodes on ``seeds`` where the expert opens a product."""
    env = WebShopEnv(prompt_style="compact", max_steps=15)
    turns = []
    for seed in seeds:
        obs, info = env.reset(seed)
        history: list[HistoryItem] = []
        for _ in range(15):
            answer = expert_response(env)
            action = ACTION_RE.search(answer).group(1)
            page_ids = ID_RE.findall(obs) if info.get("page") == "results" else []
            clicked = action[6:-1] if action.startswith("click[") else ""
            if page_ids and clicked in page_ids:
                text = env.spec.render_prompt(obs, render_history(history, history_window), info)
                prompt_ids = encode_prompt(tokenizer, [{"role": "user", "content": text}])
                if target == "first":
                    tid = page_ids[0]
                    answer_t = f"<think>{tid} matches the task, open it</think><action>click[{tid}]</action>"
                else:
                    tid, answer_t = clicked, answer
                turns.append(Turn(prompt_ids, answer_t, tid, page_ids))
            result = env.step(action)
            history.append(HistoryItem(obs, action, result.reward))
            if result.done:
                break
            obs, info = result.observation, {**info, **result.info}
    return turns


def encode(turn: Turn, tokenizer) -> tuple[list[int], list[int]]:
    """Input ids and labels (-100 on the prompt) of one turn with its answer and end token."""
    answer = tokenizer(turn.answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return turn.prompt_ids + answer, [-100] * len(turn.prompt_ids) + answer


def batch_of(rows, pad_id):
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), pad_id)
    labels = torch.full((len(rows), width), -100)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (ids, lab) in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, : len(lab)] = torch.tensor(lab)
        mask[i, : len(ids)] = 1
    return input_ids, labels, mask


def id_token_spans(ids: list[int], tokenizer, text_id: str) -> list[tuple[int, int]]:
    """(start, end) token spans of every occurrence of ``text_id`` in the decoded ``ids``."""
    offsets, pos = [], 0
    for tid in ids:
        piece = tokenizer.decode([tid])
        offsets.append((pos, pos + len(piece)))
        pos += len(piece)
    text = "".join(tokenizer.decode([t]) for t in ids)
    spans = []
    for m in re.finditer(re.escape(text_id), text):
        toks = [i for i, (a, b) in enumerate(offsets) if a < m.end() and b > m.start()]
        spans.append((toks[0], toks[-1] + 1))
    return spans


@torch.no_grad()
def evaluate(model, tokenizer, turns: list[Turn], max_new: int = 48) -> dict[str, float]:
    model.eval()
    right = on_page = 0
    chars_right = chars_total = 0
    n_layers = model.config.num_hidden_layers
    attn_best = [[] for _ in range(n_layers)]
    by_prev = {"unique": [0, 0], "ambiguous": [0, 0]}
    for turn in turns:
        prompt = torch.tensor([turn.prompt_ids])
        out = model.generate(prompt, max_new_tokens=max_new, do_sample=False,
                             eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        text = tokenizer.decode(out[0, prompt.shape[1]:], skip_special_tokens=False)
        m = ACTION_RE.search(text)
        clicked = m.group(1)[6:-1] if m and m.group(1).startswith("click[") else ""
        right += clicked == turn.target_id
        on_page += clicked in turn.page_ids
        # teacher forcing: id tokens of the answer, and where their attention goes
        ids, _labels = encode(turn, tokenizer)
        x = torch.tensor([ids])
        res = model(x, output_attentions=True)
        pred = res.logits[0].argmax(-1)
        n_prompt = len(turn.prompt_ids)
        answer_spans = [s for s in id_token_spans(ids, tokenizer, turn.target_id) if s[0] >= n_prompt]
        page_spans = [s for s in id_token_spans(turn.prompt_ids, tokenizer, turn.target_id)]
        if not answer_spans or not page_spans:
            continue
        a0, a1 = answer_spans[0]
        p0, p1 = page_spans[-1]  # the page's listing (the last occurrence before the answer)
        page_tokens = turn.prompt_ids
        for k in range(a0, a1):  # the token at k is predicted at k - 1
            ok = int(pred[k - 1] == ids[k])
            chars_right += ok
            chars_total += 1
            # one-token induction finds the source by the previous token: ambiguous when that token
            # stands before other tokens on the page too
            prev = ids[k - 1]
            followers = {page_tokens[i + 1] for i in range(len(page_tokens) - 1) if page_tokens[i] == prev}
            bucket = "unique" if len(followers) <= 1 else "ambiguous"
            by_prev[bucket][0] += ok
            by_prev[bucket][1] += 1
        if a1 - a0 == p1 - p0:  # the same pieces: position k - 1 copies from page token p0 + (k - a0)
            for layer, att in enumerate(res.attentions):
                per_head = [statistics.fmean(float(att[0, h, k - 1, p0 + (k - a0)]) for k in range(a0 + 1, a1))
                            for h in range(att.shape[1])]
                attn_best[layer].append(max(per_head))
    model.train()
    n = len(turns)
    return {
        "id right": right / n,
        "on page": on_page / n,
        "id chars": chars_right / max(chars_total, 1),
        "after unique prev": by_prev["unique"][0] / max(by_prev["unique"][1], 1),
        "after ambiguous prev": by_prev["ambiguous"][0] / max(by_prev["ambiguous"][1], 1),
        "ambiguous share": by_prev["ambiguous"][1] / max(chars_total, 1),
        **{f"copy attn L{i}": statistics.fmean(v) if v else float("nan") for i, v in enumerate(attn_best)},
    }


def id_pieces(tokenizer, turns: list[Turn]) -> str:
    lengths, single = [], []
    for turn in turns[:200]:
        for pid in turn.page_ids:
            pieces = [tokenizer.decode([t]) for t in tokenizer(pid, add_special_tokens=False)["input_ids"]]
            lengths.append(len(pieces))
            single.extend(len(p) == 1 for p in pieces)
    return (f"id tokenisation: {statistics.fmean(lengths):.2f} pieces per 10-character id "
            f"(min {min(lengths)}, max {max(lengths)}); {statistics.fmean(single):.1%} of pieces are one character")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=["first", "expert"], default="first")
    ap.add_argument("--tokenizer", default=None, help="an HF folder (default: the WebShop tiny model's)")
    ap.add_argument("--train-turns", type=int, default=4000)
    ap.add_argument("--eval-turns", type=int, default=100)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--id-pairs", action="store_true", help="add every two-character id piece as one token")
    ap.add_argument("--policy", default=None,
                    help="measure this trained policy (an HF folder, e.g. a BC run's bc_policy_hf) and train nothing")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer

    if args.policy is not None:
        from transformers import AutoModelForCausalLM

        tokenizer = AutoTokenizer.from_pretrained(args.policy)
        held = results_turns(range(VAL_SEED_BASE, VAL_SEED_BASE + args.eval_turns * 2), tokenizer, args.target)
        model = AutoModelForCausalLM.from_pretrained(args.policy, attn_implementation="eager")
        metrics = evaluate(model, tokenizer, held[: args.eval_turns])
        print(f"{args.policy} on {len(held[: args.eval_turns])} held-out results pages, target={args.target}")
        print("| " + " | ".join(metrics) + " |\n|" + "---:|" * len(metrics))
        print("| " + " | ".join(f"{v:.3f}" for v in metrics.values()) + " |")
        return
    if args.tokenizer is None:
        from arl.run.builders import tiny_model

        folder = tiny_model(TinyConfig(vocab_size=2048, corpus_envs=["webshop"], corpus_seeds=400))
    else:
        folder = args.tokenizer
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if args.id_pairs:  # every pair of id characters one token: an id is B0 and four pairs
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
        tokenizer.add_tokens(["B0"] + [a + b for a in alphabet for b in alphabet])
    t0 = time.time()
    train = results_turns(range(args.train_turns * 5 // 4), tokenizer, args.target)[: args.train_turns]
    held = results_turns(range(VAL_SEED_BASE, VAL_SEED_BASE + args.eval_turns * 2), tokenizer, args.target)
    held = held[: args.eval_turns]
    print(f"{len(train)} training turns, {len(held)} held-out turns ({time.time() - t0:.0f} s)")
    print(id_pieces(tokenizer, held))
    cfg = TinyConfig(vocab_size=len(tokenizer), hidden_size=args.hidden, intermediate_size=4 * args.hidden,
                     num_hidden_layers=args.layers, num_attention_heads=args.heads,
                     num_key_value_heads=args.kv_heads, head_dim=args.hidden // args.heads, init_seed=args.seed)
    model = build_model(cfg, len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id)
    model.config._attn_implementation = "eager"  # attentions are read back
    print(f"model: {args.layers} layers x {args.hidden} wide, {args.heads} heads; "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters; target={args.target}")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50))
    rows = [encode(t, tokenizer) for t in train]
    rng = random.Random(args.seed)
    header = None
    t0 = time.time()
    for step in range(1, args.steps + 1):
        input_ids, labels, mask = batch_of(rng.sample(rows, args.batch), tokenizer.pad_token_id)
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        if step % args.eval_every == 0 or step == args.steps:
            metrics = evaluate(model, tokenizer, held)
            if header is None:
                header = ["step", "loss", "min"] + list(metrics)
                print("| " + " | ".join(header) + " |")
                print("|" + "---:|" * len(header))
            cells = [str(step), f"{loss.item():.3f}", f"{(time.time() - t0) / 60:.1f}"]
            cells += [f"{v:.3f}" for v in metrics.values()]
            print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
