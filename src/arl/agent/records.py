"""Episode records: what the agent loop hands to the trainer (docs/design.md section 4).

Response token ids and their log-probs are stored exactly as the engine sampled them; text is
kept only for logging and parsing, never re-tokenised for training.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


def anchor_key(anchor: str) -> int:
    """A stable signed 64-bit hash of an anchor state (same text -> same key, across runs)."""
    digest = hashlib.blake2b(anchor.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


@dataclass
class Turn:
    """One turn of one episode."""

    prompt_ids: list[int]
    response_ids: list[int]
    rollout_log_probs: list[float]
    response_text: str
    action: str  # the parsed action ("" when invalid)
    valid: bool
    reason: str  # why invalid ("" when valid)
    reward: float
    done: bool
    anchor_key: int
    truncated: bool = False  # the response hit max_new_tokens
    expert_text: str | None = None  # the expert's answer to this turn's state (DAgger rollouts only)
    observation: str = ""  # the environment's text this turn answered (for reading episodes; not trained on)
    policy_version: int | None = None  # the policy version that sampled every token of it (asynchronous rollouts)
    stream_start: bool = False  # trajectory samples: a later turn that starts a new token stream (a gateway call
    #                             whose messages did not continue the last call's)
    message: dict | None = None  # native tool calls: the answer as a chat message (its text and calls), as the
    #                              conversation's later prompts render it


@dataclass
class Episode:
    """One episode: a member of a group that shares a task and an initial state."""

    group_id: int
    episode_id: int
    seed: int
    env_name: str
    task_type: str
    turns: list[Turn] = field(default_factory=list)
    won: bool = False
    score: float = 0.0
    env_error: bool = False  # a worker crashed or timed out: counted, excluded from the update
    context_full: bool = False  # trajectory mode (or native tool calls): the prompt reached max_prompt_tokens, episode cut
    opening: list = field(default_factory=list)  # native tool calls: the conversation's first messages (system, user)

    @property
    def ret(self) -> float:
        """Undiscounted sum of the environment rewards."""
        return float(sum(t.reward for t in self.turns))

    @property
    def num_turns(self) -> int:
        return len(self.turns)


def episode_record(episode: Episode) -> dict:
    """One played episode as a JSON-ready dict, to read turn by turn: the summary the reports pair
    game by game (``seed``, ``env``, ``task_type``, ``won``, ``return``, ``turns`` and ``valid_turns``
    counts) and ``turn_log``, per turn the observation it answered, the policy's whole response,
    the action parsed from it, whether it was valid (and why not), the reward, whether the answer
    hit ``max_new_tokens`` and the GiGPO anchor key (as 16 hex digits: turns of one game with the
    same key share an anchor state). ``src/eval.py`` and the validation files of a training run
    write it; ``src/view.py`` reads it."""
    return {
        "seed": episode.seed,
        "env": episode.env_name,  # a mix's member name (env=mix), else the env's
        "task_type": episode.task_type,
        "won": bool(episode.won),
        "return": float(episode.ret),
        "turns": len(episode.turns),
        "valid_turns": sum(bool(t.valid) for t in episode.turns),
        "episode_id": episode.episode_id,
        "score": float(episode.score),
        "env_error": bool(episode.env_error),
        "turn_log": [
            {"observation": t.observation, "response": t.response_text, "action": t.action, "valid": bool(t.valid),
             "reason": t.reason, "reward": float(t.reward), "truncated": bool(t.truncated),
             "anchor": f"{t.anchor_key & (2**64 - 1):016x}",
             **({} if t.policy_version is None else {"policy_version": int(t.policy_version)})}
            for t in episode.turns
        ],
    }
