"""The token stream of trajectory mode (``arl.agent.prompts.TrajectoryTemplate``) with the tiny model's tokenizer."""

from __future__ import annotations

import copy

import pytest


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    from arl.run.builders import tiny_model

    return AutoTokenizer.from_pretrained(tiny_model())


def test_the_stream_equals_the_template_rendering(tok):
    from arl.agent.prompts import TrajectoryTemplate, encode_prompt

    template = TrajectoryTemplate(tok)
    template.check()
    first = template.first_ids("Task: a.")
    answer = tok("<action>left</action>", add_special_tokens=False)["input_ids"] + [tok.convert_tokens_to_ids("<|im_end|>")]
    stream = first + answer + template.continuation_ids("Result: b.", answer)
    rendered = encode_prompt(tok, [{"role": "user", "content": "Task: a."},
                                   {"role": "assistant", "content": "<action>left</action>"},
                                   {"role": "user", "content": "Result: b."}])
    assert stream == rendered  # the answer's end of turn is not repeated


def test_an_end_of_turn_that_is_not_the_eos_token_is_not_repeated(tok):
    """A tokenizer whose EOS is <|endoftext|> (Qwen's base models) while its template ends a turn with
    <|im_end|>, which the engine also stops on: an answer that ended on <|im_end|> gets no second one."""
    from arl.agent.prompts import TrajectoryTemplate

    base = copy.deepcopy(tok)
    base.eos_token = "<|endoftext|>"
    im_end = base.convert_tokens_to_ids("<|im_end|>")
    template = TrajectoryTemplate(base)
    answer = base("<action>left</action>", add_special_tokens=False)["input_ids"] + [im_end]
    after_stop = template.continuation_ids("Result: b.", answer)
    cut = template.continuation_ids("Result: b.", answer[:-1])  # an answer cut at max_new_tokens: closed here
    assert after_stop[0] != im_end and cut[0] == im_end and cut[1:] == after_stop
