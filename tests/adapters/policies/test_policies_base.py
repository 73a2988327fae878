"""The policy interface: sampling parameters, prompt normalisation, stop handling,
ScriptedPolicy."""

from __future__ import annotations

import logging

import pytest

from adapters.policies import (
    Completion,
    SamplingParams,
    ScriptedPolicy,
    check_prompts,
    to_messages,
    truncate_stop,
)
from adapters.policies.chat import left_truncate


def test_sampling_params_defaults_follow_the_paper():
    p = SamplingParams()
    assert (p.n, p.temperature, p.top_p, p.top_k, p.max_new_tokens) == (1, 1.0, 1.0, -1, 256)
    assert p.stop == () and p.seed is None and not p.greedy
    assert SamplingParams(temperature=0).greedy


def test_sampling_params_coerces_stop_and_is_frozen():
    assert SamplingParams(stop="\n").stop == ("\n",)
    assert SamplingParams(stop=["a", "b"]).stop == ("a", "b")
    with pytest.raises(AttributeError):
        SamplingParams().n = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n": 0},
        {"temperature": -0.1},
        {"top_p": 0.0},
        {"top_p": 1.5},
        {"top_k": -2},
        {"max_new_tokens": 0},
        {"stop": ("",)},
        {"seed": "1"},
    ],
)
def test_sampling_params_rejects_bad_values(kwargs):
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)


def test_to_messages_accepts_str_and_message_lists():
    assert to_messages("hi") == [{"role": "user", "content": "hi"}]
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert to_messages(msgs) == msgs


@pytest.mark.parametrize(
    "bad, exc",
    [
        ({"role": "user", "content": "x"}, TypeError),  # a single dict, not a list
        ([], ValueError),
        ([{"role": "wizard", "content": "x"}], ValueError),
        ([{"role": "user"}], ValueError),
        ([{"role": "user", "content": 3}], TypeError),
        (42, TypeError),
    ],
)
def test_to_messages_rejects_malformed_prompts(bad, exc):
    with pytest.raises(exc):
        to_messages(bad)


def test_check_prompts_needs_a_sequence_of_prompts():
    with pytest.raises(TypeError, match="wrap a single prompt"):
        check_prompts("just one prompt")
    assert len(check_prompts(["a", "b"])) == 2


def test_truncate_stop_cuts_at_the_earliest_stop_string():
    assert truncate_stop("x = 1\n\ny = 2", ["\n\n", "="]) == ("x ", True)
    assert truncate_stop("abc", []) == ("abc", False)
    assert truncate_stop("STOP here", ["STOP"]) == ("", True)


def test_left_truncate_keeps_the_end_and_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="adapters.policies.base"):
        assert left_truncate(list(range(10)), 4) == [6, 7, 8, 9]
    assert "dropping the first 6 tokens" in caplog.text
    assert left_truncate([1, 2], 4) == [1, 2]


def test_completion_trainable_needs_ids_and_matching_logprobs():
    assert Completion("a", [1, 2], [-0.1, -0.2]).trainable
    assert not Completion("a").trainable
    assert not Completion("a", [1, 2], [-0.1]).trainable


def test_scripted_policy_calls_fn_per_sample_and_applies_stop():
    calls = []

    def fn(text):
        calls.append(text)
        return f"answer to {text}!! trailing"

    policy = ScriptedPolicy(fn, name="oracle")
    out = policy.generate(
        ["q1", [{"role": "user", "content": "q2"}]], SamplingParams(n=3, stop=("!!",))
    )
    assert [[c.text for c in cs] for cs in out] == [["answer to q1"] * 3, ["answer to q2"] * 3]
    assert calls == ["q1"] * 3 + ["q2"] * 3
    c = out[0][0]
    assert (c.token_ids, c.logprobs, c.prompt_ids, c.finish_reason) == ([], [], [], "stop")
    assert not c.trainable and policy.name == "oracle"


def test_scripted_policy_can_receive_the_message_list():
    policy = ScriptedPolicy(lambda msgs: msgs[0]["content"] + str(len(msgs)), pass_messages=True)
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "u"}]
    assert policy.generate([msgs])[0][0].text == "sys2"


def test_scripted_policy_rejects_non_string_outputs():
    with pytest.raises(TypeError, match="must return a str"):
        ScriptedPolicy(lambda t: 3).generate(["x"])
    with pytest.raises(TypeError):
        ScriptedPolicy("not callable")  # type: ignore[arg-type]
