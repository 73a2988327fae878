"""``adapters.evaluate`` and :mod:`adapters.evaluation`: the oracle upper bound, per-role specs, the
CLI table and JSON."""

from __future__ import annotations

import json

import pytest

from adapters.evaluate import main
from adapters.evaluation import evaluate
from adapters.policies import OraclePolicy, ScriptedPolicy
from adapters.policies.specs import build_policies, parse_policy_spec

SMALL = {"height": 5, "width": 5, "min_distance": 3, "wall_density": 0.1}
CORRIDOR = {"grid": ["..."], "start": [0, 0], "goal": [0, 2]}


def test_oracle_solves_plan_path():
    report = evaluate("plan_path", OraclePolicy(), episodes=4, env_config=SMALL)
    assert report.episodes == 4
    assert report.success_rate == 1.0 and report.team_reward == 1.0
    assert set(report.reward_per_agent) == {"tool", "planner"}
    assert report.reward_per_agent["planner"] == pytest.approx(1.0)
    assert report.mean_turns == 1.0  # the oracle reaches the goal in the first turn
    assert len(report.per_episode) == 4
    table = report.table()
    assert "success rate" in table and "planner" in table


def test_same_seed_same_instances_and_split_matters():
    a = evaluate("plan_path", OraclePolicy(), episodes=3, env_config=SMALL, seed=1)
    b = evaluate("plan_path", OraclePolicy(), episodes=3, env_config=SMALL, seed=1)
    c = evaluate("plan_path", OraclePolicy(), episodes=3, env_config=SMALL, seed=1, split="test")
    ids = [e["instance_id"] for e in a.per_episode]
    assert ids == [e["instance_id"] for e in b.per_episode]
    assert set(ids).isdisjoint(e["instance_id"] for e in c.per_episode)


def test_wrong_answers_fail_and_explicit_instance():
    wrong = ScriptedPolicy(lambda _t: "#### [L]")
    right = ScriptedPolicy(lambda _t: "thinking...\n#### [R,R]")
    cfg = {"mode": "single", "max_turns": 2}
    bad = evaluate("plan_path", wrong, episodes=2, env_config=cfg, instance=CORRIDOR)
    good = evaluate("plan_path", right, episodes=2, env_config=cfg, instance=CORRIDOR)
    assert bad.success_rate == 0.0 and bad.mean_turns == 2.0
    assert good.success_rate == 1.0 and good.reward_per_agent == {"planner": 1.0}
    assert bad.split == "instance"


def test_build_policies_per_role_specs():
    roles = ["tool", "planner"]
    pols, mapping = build_policies(["oracle"], roles)
    assert mapping == {"tool": "oracle", "planner": "oracle"} and len(pols) == 1
    pols, mapping = build_policies(["tool=oracle", "planner=oracle"], roles)
    assert mapping == {"tool": "oracle", "planner": "oracle"}
    with pytest.raises(ValueError, match="unknown role"):
        build_policies(["coder=oracle", "oracle"], roles)
    with pytest.raises(ValueError, match="no policy for role"):
        build_policies(["tool=oracle"], roles)
    with pytest.raises(ValueError, match="more than one"):
        build_policies(["oracle", "oracle"], roles)
    with pytest.raises(ValueError, match="unknown policy spec"):
        parse_policy_spec("no-such-thing")


def test_cli_prints_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(
        [
            "--env", "plan_path", "--policy", "tool=oracle", "--policy", "planner=oracle",
            "--episodes", "3", "--env-config", "height=5", "--env-config", "width=5",
            "--max-turns", "2", "--json", str(out),
        ]
    )  # fmt: skip
    assert rc == 0
    text = capsys.readouterr().out
    assert "success rate" in text and "1.000" in text
    data = json.loads(out.read_text())
    assert data["success_rate"] == 1.0 and data["episodes"] == 3
    assert data["policies"] == {"tool": "oracle", "planner": "oracle"}


def test_cli_demos_and_system_prompt_reach_the_model(capsys):
    from adapters.integrations.openai_server import start_in_thread

    seen = []

    def answer(messages):
        seen.append(messages)
        return "#### [R]"

    server = start_in_thread(ScriptedPolicy(answer, pass_messages=True), model_name="rec")
    try:
        rc = main(
            ["--env", "plan_path", "--mode", "single", "--policy", f"openai:{server.url}#rec",
             "--demos", "1", "--system-prompt", "Be brief.", "--episodes", "1",
             "--max-turns", "1"]
        )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert rc == 0 and len(seen) == 1
    roles = [m["role"] for m in seen[0]]
    assert roles == ["system", "user", "assistant", "user"]
    assert seen[0][0]["content"] == "Be brief."
    assert seen[0][2]["content"].splitlines()[-1].startswith("####")  # the oracle's answer
    assert seen[0][1]["content"] != seen[0][3]["content"]  # a different (train) instance
    assert "success rate" in capsys.readouterr().out


def test_openai_spec_against_a_local_server(tmp_path):
    from adapters.integrations.openai_server import start_in_thread

    server = start_in_thread(ScriptedPolicy(lambda _t: "#### [R,R]"), model_name="scripted")
    try:
        spec = f"openai:{server.url}"
        policy = parse_policy_spec(spec)  # no #MODEL: the server's first model
        assert policy.model == "scripted"
        report = evaluate(
            "plan_path",
            policy,
            episodes=2,
            env_config={"mode": "single"},
            instance=CORRIDOR,
        )
        assert report.success_rate == 1.0
    finally:
        server.shutdown()
        server.server_close()


def test_later_episodes_play_the_same_instances_and_are_reported_as_they_finish():
    whole = evaluate("plan_path", OraclePolicy(), episodes=3, env_config=SMALL, seed=2)
    seen = []
    tail = evaluate(
        "plan_path", OraclePolicy(), episodes=2, env_config=SMALL, seed=2, first=1,
        on_episode=seen.append,
    )  # fmt: skip
    assert [e["instance_id"] for e in tail.per_episode] == [
        e["instance_id"] for e in whole.per_episode[1:]
    ]
    assert [e["index"] for e in tail.per_episode] == [1, 2]
    assert sorted(e.instance_id for e in seen) == sorted(e["instance_id"] for e in tail.per_episode)
    rec = whole.per_episode[0]
    assert rec["role_reward"] == {"tool": 1.0, "planner": 1.0} and rec["completion_tokens"] == 0


def test_constant_specs_are_the_trivial_baselines():
    """``constant:TEXT`` answers TEXT everywhere and ``constant:`` nothing (issue 26, item 5): on
    the 1 x 3 corridor, ``#### [R,R]`` walks start -> goal, the empty answer is a format failure
    that scores 0 and never succeeds."""
    cfg = {"mode": "single", "max_turns": 2}
    right = parse_policy_spec("constant:#### [R,R]")
    noop = parse_policy_spec("constant:")
    assert right.name == "constant:#### [R,R]" and noop.name == "constant:"
    good = evaluate("plan_path", right, episodes=2, env_config=cfg, instance=CORRIDOR)
    bad = evaluate("plan_path", noop, episodes=2, env_config=cfg, instance=CORRIDOR)
    assert good.success_rate == 1.0 and good.reward_per_agent == {"planner": 1.0}
    assert bad.success_rate == 0.0 and bad.reward_per_agent == {"planner": 0.0}
    pols, mapping = build_policies(["tool=constant:a=b", "planner=oracle"], ["tool", "planner"])
    assert mapping == {"tool": "constant:a=b", "planner": "oracle"}
    assert [c.text for c in pols["constant:a=b"].generate(["x"])[0]] == ["a=b"]


def test_chat_template_kwargs_reach_every_policy_that_renders_a_template():
    from adapters.evaluate import _template_kwargs, build_parser
    from adapters.policies.specs import parse_policy_spec

    args = build_parser().parse_args(
        ["--env", "math", "--policy", "tiny", "--chat-template-kwargs", "enable_thinking=false"]
    )
    kwargs = _template_kwargs(args)
    assert kwargs == {"enable_thinking": False}
    from adapters.policies.openai_compat import OpenAIPolicy
    from adapters.policies.specs import set_chat_template_kwargs

    # built directly: parsing an ``openai:`` spec first checks that the server answers
    server = OpenAIPolicy("http://127.0.0.1:9/v1", model="m")
    set_chat_template_kwargs(server, kwargs)
    assert server.extra_body == {"chat_template_kwargs": {"enable_thinking": False}}
    template = (
        "{% for m in messages %}{{ m['content'] }}{% endfor %}"
        "{% if enable_thinking is defined and not enable_thinking %}[no-think]{% endif %}"
    )
    rendered = []
    for kw in (kwargs, None):
        model = parse_policy_spec("tiny", chat_template_kwargs=kw)
        model.tokenizer.chat_template = template
        rendered.append(model.render([{"role": "user", "content": "q"}]))
    assert rendered == ["q[no-think]", "q"]


def test_compile_decode_reaches_model_policies(tmp_path, graph_starts):
    """``--compile-decode`` builds model policies with compiled decode steps (and gives the
    report of the eager loop on the same greedy episodes); a bad value is an argument error."""
    reports = []
    for mode in ("off", "eager"):
        out = tmp_path / f"{mode}.json"
        rc = main(
            ["--env", "plan_path", "--mode", "single", "--policy", "tiny", "--episodes", "2",
             "--max-turns", "1", "--max-new-tokens", "8", "--compile-decode", mode,
             "--json", str(out), "--no-view", "--no-progress"]
        )  # fmt: skip
        assert rc == 0
        reports.append(json.loads(out.read_text()))
    assert graph_starts and set(graph_starts) == {"eager"}
    texts = [[t["completion"] for e in r["per_episode"] for t in e["transcript"]] for r in reports]
    assert texts[0] == texts[1]
    with pytest.raises(SystemExit):
        main(["--env", "plan_path", "--policy", "tiny", "--compile-decode", "fast"])


def test_out_with_one_setting_is_refused_not_ignored(capsys):
    # --out is a suite's directory; one setting's report goes to --json
    with pytest.raises(SystemExit):
        main(["--env", "plan_path", "--policy", "oracle", "--out", "somewhere"])
    assert "--json FILE" in capsys.readouterr().err


def test_role_token_limits_cap_that_role_only(capsys):
    """``role_max_new_tokens`` evaluates a role under a smaller limit (the one its training
    samples under: the grid CPU runs' planner, 64 tokens); the other roles keep
    ``max_new_tokens`` and the report says each role's limit. The CLI refuses a role the setting
    lacks and a limit that is not a positive integer."""
    calls: dict[str, list[tuple[int, int]]] = {"tool": [], "planner": []}
    policies = {}
    for role in calls:
        policy = parse_policy_spec("tiny")
        generate = policy.generate

        def recorded(prompts, params=None, _role=role, _generate=generate):
            out = _generate(prompts, params)
            calls[_role] += [(params.max_new_tokens, len(c.token_ids)) for cs in out for c in cs]
            return out

        policy.generate = recorded  # type: ignore[method-assign]
        policies[role] = policy
    report = evaluate(
        "plan_path",
        policies,
        role_policy={"tool": "tool", "planner": "planner"},
        episodes=2,
        env_config={**SMALL, "max_turns": 1},
        max_new_tokens=12,
        role_max_new_tokens={"planner": 3},
    )
    assert report.token_limits == {"tool": 12, "planner": 3}
    assert calls["planner"] and {n for n, _ in calls["planner"]} == {3}
    assert max(k for _, k in calls["planner"]) <= 3
    assert {n for n, _ in calls["tool"]} == {12} and max(k for _, k in calls["tool"]) > 3
    with pytest.raises(ValueError, match="role token limits for \\['critic'\\]"):
        evaluate("plan_path", OraclePolicy(), episodes=1, role_max_new_tokens={"critic": 3})
    for bad, said in (("critic=3", "no role 'critic'"), ("planner=0", "positive integer")):
        assert main(["--env", "plan_path", "--policy", "oracle", "--role-max-new-tokens", bad])
        assert said in capsys.readouterr().err


def test_report_says_what_each_role_generates_with():
    """The report records each model role's weights (dtype, and fp16 or int8 packing:
    adapters.policies.quantize), and nothing for a scripted policy."""
    from adapters.policies import TransformersPolicy
    from adapters.policies.models import tiny_model
    from adapters.policies.quantize import available

    if not available("fp16"):
        pytest.skip("this torch build has no fbgemm float16-weight kernels")
    model, tok = tiny_model(seed=0)
    packed, _ = tiny_model(seed=0)
    policies = {
        "tool": TransformersPolicy(packed, tok, device="cpu", quantize="fp16"),
        "planner": TransformersPolicy(model, tok, device="cpu"),
    }
    report = evaluate(
        "plan_path",
        policies,
        role_policy={"tool": "tool", "planner": "planner"},
        episodes=1,
        env_config={**SMALL, "max_turns": 1},
        max_new_tokens=4,
    )
    assert report.generation == {"tool": "float32 + fp16", "planner": "float32"}
    assert evaluate("plan_path", OraclePolicy(), episodes=1).generation == {}
