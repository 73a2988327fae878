"""CoMAS's inference setups (CoMAS 4.1, MASLab's implementations): the calls each one makes with
a scripted policy, and ``--suite paper:comas --setup`` end to end on the fixtures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from adapters.evaluate import main
from adapters.evaluation.setups import SetupPolicy, with_setups
from adapters.policies import ScriptedPolicy
from adapters.policies.base import SamplingParams

FIX = Path(__file__).resolve().parents[2] / "data" / "fixtures"
TASK = "What is 2 + 3? Put the answer in \\boxed{}."


class Recorder:
    """Answers by call position and records every conversation it is shown."""

    def __init__(self, reply):
        self.calls: list[list[dict[str, str]]] = []
        self.reply = reply

    def __call__(self, messages):
        self.calls.append(messages)
        return self.reply(messages, len(self.calls) - 1)


def _policy(setup, reply):
    rec = Recorder(reply)
    return SetupPolicy(ScriptedPolicy(rec, pass_messages=True), setup), rec


def test_consistency_five_answers_then_a_synthesis():
    policy, rec = _policy("consistency", lambda m, k: f"answer {k}" if k < 5 else "\\boxed{5}")
    (comps,) = policy.generate([TASK], SamplingParams(temperature=0.7, seed=1))
    assert [c.text for c in comps] == ["\\boxed{5}"]
    assert len(rec.calls) == 6 and all(
        c == [{"role": "user", "content": TASK}] for c in rec.calls[:5]
    )
    final = rec.calls[5][-1]["content"]
    assert all(f"Solution {i + 1}:\nanswer {i}" in final for i in range(5)) and TASK in final


def test_debate_three_agents_two_rounds_then_a_synthesis():
    policy, rec = _policy("debate", lambda m, k: f"opinion {k}")
    (comps,) = policy.generate([TASK], SamplingParams(seed=2))
    assert len(rec.calls) == 3 + 3 + 1
    for j, conv in enumerate(rec.calls[3:6]):  # round 2: own answer, then the other two
        assert conv[1] == {"role": "assistant", "content": f"opinion {j}"}
        others = {f"opinion {i}" for i in range(3)} - {f"opinion {j}"}
        assert all(o in conv[2]["content"] for o in others)
        assert f"opinion {j}\n" not in conv[2]["content"] and TASK in conv[2]["content"]
    final = rec.calls[6][-1]["content"]
    assert all(f"opinion {k}" in final for k in (3, 4, 5)) and "opinion 0" not in final
    assert comps[0].text == "opinion 6"


def test_autogen_stops_at_terminate_or_after_three_assistant_turns():
    policy, rec = _policy("autogen", lambda m, k: "\\boxed{5}\nTERMINATE")
    (comps,) = policy.generate([TASK])
    assert len(rec.calls) == 1 and comps[0].text == "\\boxed{5}"
    assert rec.calls[0][0]["role"] == "system" and "TERMINATE" in rec.calls[0][0]["content"]
    policy, rec = _policy("autogen", lambda m, k: f"draft {k}")  # nobody ends the chat
    (comps,) = policy.generate([TASK])
    roles = ["assistant", "proxy", "assistant", "proxy", "assistant"]
    assert len(rec.calls) == len(roles) and comps[0].text == "draft 4"
    proxy = rec.calls[1]  # the proxy sees the task as its own message, the answer as the user's
    assert proxy == [
        {"role": "assistant", "content": TASK},
        {"role": "user", "content": "draft 0"},
    ]
    assert rec.calls[2][-1] == {"role": "user", "content": "draft 1"}
    policy, rec = _policy("autogen", lambda m, k: "ok TERMINATE" if k == 1 else f"draft {k}")
    (comps,) = policy.generate([TASK])  # the proxy ends it: the assistant's answer stands
    assert len(rec.calls) == 2 and comps[0].text == "draft 0"


def test_setup_specs_and_unknown_setups():
    built = with_setups(lambda spec: ScriptedPolicy(lambda _p: spec, name=spec))("debate:x")
    assert isinstance(built, SetupPolicy) and built.setup == "debate" and built.name == "debate:x"
    with pytest.raises(ValueError, match="unknown setup"):
        SetupPolicy(ScriptedPolicy(lambda _p: ""), "vote")


def test_paper_comas_setups_are_rows_of_the_table(tmp_path, capsys):
    d = tmp_path / "data"
    d.mkdir()
    shutil.copy(FIX / "gsm8k.jsonl", d / "gsm8k.jsonl")
    out = tmp_path / "out"
    rc = main(
        ["--suite", "paper:comas", "--data-dir", str(d), "--setup", "vanilla,debate",
         "--policy", "oracle", "--policy", "constant:\\boxed{-1}", "--limit", "2",
         "--out", str(out), "--no-progress"]
    )  # fmt: skip
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    got = {(r["benchmark"], r["policy"]): r["pass@1"]["mean"] for r in res["rows"]}
    assert got[("gsm8k", "debate:oracle")] == 1.0 and got[("gsm8k", "oracle")] == 1.0
    assert got[("gsm8k", "debate:constant:\\boxed{-1}")] == 0.0
    table = (out / "table.md").read_text()
    assert "| debate:oracle | 100.00 |" in table
    with pytest.raises(SystemExit):
        main(["--suite", "paper:sage", "--policy", "oracle", "--setup", "debate"])
    assert "paper:sage reports vanilla" in capsys.readouterr().err
