"""The episode viewer (issue 39, item 1): what the page holds, read from replayed records, and
the page itself in a real headless Chromium (Debian's package, driven over the DevTools
protocol): no console errors, every episode listed, hostile completions kept as text, and a
Sokoban board on screen cell by cell equal to the env's own state."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import re

import pytest

import envs
from adapters.evaluation import evaluate
from adapters.evaluation.viewer import find_sources, page_data, render_page, write_viewer
from adapters.policies.specs import build_policies
from envs.core.render import COLORS

from ..headless_chromium import Chromium, find_chromium

SOKOBAN_SINGLE = {"mode": "single", "max_turns": 3}
HOSTILE = [
    "<script>document.title='pwned'</script>",
    "</script><script>document.title='pwned'</script>",
    "<img src=x onerror=\"document.title='pwned'\">",
    "<a href=\"javascript:document.title='pwned'\">click</a>",
    "<style>body{display:none}</style><!-- ]]> -->",
    "<iframe src='https://example.com/'></iframe>\u202e",
]


def _report(env_id: str, specs: list[str], episodes: int = 2, **cfg) -> dict:
    roles = envs.make(env_id, **cfg).unwrapped.possible_agents
    policies, mapping = build_policies(specs, roles)
    rep = evaluate(env_id, policies, role_policy=mapping, episodes=episodes, env_config=cfg, seed=3)
    return json.loads(json.dumps(rep.to_dict()))  # as the JSON files hold it


def _run_dir(tmp_path, before: dict, after: dict):
    run = tmp_path / "run"
    run.mkdir()
    (run / "eval_before.json").write_text(json.dumps(before))
    (run / "eval_after.json").write_text(json.dumps(after))
    return run


def _payload(html: str) -> dict:
    raw = re.search(r'<script id="data" type="application/octet-stream">([^<]*)</script>', html)
    assert raw is not None
    return json.loads(gzip.decompress(base64.b64decode(raw.group(1))))


# ------------------------------------------------------------------------------ the data


def test_prompts_rewards_and_boards_come_from_replaying_the_record(tmp_path):
    """The page's steps carry the prompt the env showed, the reward parts with reasons, the
    delayed award of the tool's step (Sokoban pays it once the planner has moved) and a board
    per state. The boards come from the env, not from the prompt text: a record whose prompts
    say something else gets the same boards; one without prompts gets them rebuilt by the
    replay."""
    rep = _report(
        "sokoban", ["tool=oracle", "planner=constant:#### [U,U,U,U,U,U,U,U,U,U]"], episodes=2
    )
    src = rep["per_episode"][0]
    assert all(t["prompt"] for t in src["transcript"])  # evaluation records keep the prompts
    data = page_data(_write(tmp_path / "a.json", rep))
    ep = data["episodes"][0]
    assert len(ep["grids"]) == len(ep["steps"]) + 1 and not ep["note"]
    for step, t in zip(ep["steps"], src["transcript"]):
        assert step["prompt"] == t["prompt"] and step["completion"] == t["completion"]
        assert step["replayed"] == pytest.approx(t["reward"])
        assert set(step["parts"]["components"]) in ({"fmt", "exec", "pot"}, {"fmt", "leg", "dlk"})
    tool, planner = ep["steps"][0], ep["steps"][1]
    assert tool["awarded_at"] == 1 and planner["awards"][0]["for_step"] == 0
    assert "walks into a wall" in json.dumps(planner["parts"]["reasons"])  # ten moves up: a wall
    raw = envs.make("sokoban").unwrapped
    raw.reset(seed=src["reset_seed"], options=src["reset_options"])
    start = [data["palette"][i] for i in ep["grids"][0]["cells"]]
    assert start == [c for row in raw.cell_grid().to_dict()["cells"] for c in row]

    for t in src["transcript"]:
        t["prompt"] = "#######\n#@ $ .#\n#######"  # another board, in the text only
    lied = page_data(_write(tmp_path / "b.json", rep))["episodes"][0]
    assert lied["grids"] == ep["grids"]
    for t in src["transcript"]:
        del t["prompt"]  # records written before prompts were kept
    rebuilt = page_data(_write(tmp_path / "c.json", rep))["episodes"][0]
    assert [s["prompt"] for s in rebuilt["steps"]] == [s["prompt"] for s in ep["steps"]]


def test_a_doctored_record_is_flagged_and_an_unreplayable_one_shown_as_recorded(tmp_path):
    rep = _report("plan_path", ["constant:#### [R,R]"], episodes=1, mode="single")
    rep["per_episode"][0]["transcript"][0]["reward"] = 0.987
    ep = page_data(_write(tmp_path / "a.json", rep))["episodes"][0]
    assert "pays other rewards than the record" in ep["note"] and "recorded 0.987" in ep["note"]
    rep["per_episode"][0]["env"] = "no_such_setting"
    ep = page_data(_write(tmp_path / "b.json", rep))["episodes"][0]
    assert ep["note"].startswith("not replayed (ValueError: unknown env id")
    assert ep["grids"] is None and ep["steps"][0]["completion"] == "#### [R,R]"


def test_replaying_stops_at_the_budget_and_says_so(tmp_path):
    path = _write(tmp_path / "r.json", _report("sokoban", ["oracle"], episodes=2, **SOKOBAN_SINGLE))
    spent = page_data(path, budget_s=0.0)["episodes"]
    assert all("replay budget (0 s) ran out" in ep["note"] and ep["grids"] is None for ep in spent)
    assert all(ep["steps"][0]["prompt"] for ep in spent)  # still shown, as recorded
    assert all(ep["grids"] and not ep["note"] for ep in page_data(path)["episodes"])


def test_sources_of_a_run_a_suite_and_a_report(tmp_path):
    rep = _report("plan_path", ["oracle"], episodes=1, mode="single")
    run = _run_dir(tmp_path, rep, rep)
    (run / "eval_references.json").write_text(json.dumps({"no-op": rep, "oracle": rep}))
    for name in ("eval_step000020.json", "eval_open_loop.json"):
        (run / name).write_text(json.dumps(rep))
    (run / "eval_datasets_before.json").write_text('{"aime24": 0.5}')  # no episodes: left out
    kind, sources = find_sources(run)
    assert kind == "training run"
    labels = [s.label for s in sources]
    assert labels == ["before", "step 20", "after", "no-op", "oracle", "open loop"]
    suite = {"rows": [{"setting": "plan_path", "policy": "oracle", "per_episode": []}]}
    (tmp_path / "results.json").write_text(json.dumps(suite))
    assert find_sources(tmp_path / "results.json")[0] == "suite"
    (tmp_path / "other.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="is not an evaluation report"):
        find_sources(tmp_path / "other.json")
    with pytest.raises(ValueError, match="does not exist"):
        find_sources(tmp_path / "missing")
    data = page_data(run)
    assert data["compare"][0] == [labels.index("before"), labels.index("after")]  # first


def test_the_page_is_self_contained_and_hostile_text_is_never_markup(tmp_path):
    specs = ["tool=constant:" + "".join(HOSTILE), "planner=constant:" + HOSTILE[2]]
    rep = _report("sokoban", specs, episodes=1)
    page, n = write_viewer(_write(tmp_path / "hostile.json", rep))
    html = page.read_text()
    assert n == 1 and page == tmp_path / "hostile.html"
    assert html.count("<script") == 2 and "onerror" not in html and "pwned" not in html
    assert "http" not in html.lower().replace("http-equiv", "")  # no URL anywhere
    csp = re.search(r'Content-Security-Policy" content="([^"]*)"', html).group(1)
    script = re.search(r"<script>(.*)</script>", html, re.S).group(1)
    style = re.search(r"<style>(.*)</style>", html, re.S).group(1)
    for text in (script, style):
        digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in csp
    assert "default-src 'none'" in csp and "unsafe-inline" not in csp
    data = _payload(html)
    assert data["episodes"][0]["steps"][0]["completion"] == "".join(HOSTILE)
    assert render_page({**data, "episodes": [{"x": float("nan")}]})  # NaN is not JSON: dropped


def _write(path, data):
    path.write_text(json.dumps(data))
    return path


# ------------------------------------------------------------------------------ the browser


@pytest.fixture(scope="module")
def browser():
    if find_chromium() is None:
        if os.environ.get("MAS_REQUIRE_BROWSER") == "1":
            pytest.fail("MAS_REQUIRE_BROWSER=1 but there is no chromium (apt-get install chromium)")
        pytest.skip("no chromium on PATH (bash scripts/setup.sh --test installs Debian's)")
    with Chromium() as b:
        yield b


def test_page_loads_without_errors_and_lists_every_episode(browser, tmp_path):
    before = _report("plan_path", ["constant:#### [U]"], episodes=3, mode="single")
    after = _report("plan_path", ["oracle"], episodes=3, mode="single")
    page, n = write_viewer(_run_dir(tmp_path, before, after))
    browser.events.clear()
    assert browser.open(page.as_uri()) == "1"
    assert n == 6 and browser.evaluate("document.querySelectorAll('details.episode').length") == 6
    assert browser.evaluate("document.getElementById('count').textContent") == (
        "showing 6 of 6 episodes"
    )
    # the compare view pairs the 3 instances, before -> after, and marks what changed
    browser.evaluate(
        "(() => { const s = document.querySelector('.controls select'); s.value = 'compare';"
        " s.dispatchEvent(new Event('change')); })()"
    )
    assert browser.evaluate("document.querySelectorAll('details.pair').length") == 3
    tags = browser.evaluate("[...document.querySelectorAll('.pair .tag')].map(t => t.textContent)")
    pairs = zip(before["per_episode"], after["per_episode"])
    solved = [(b["success"], a["success"]) for b, a in pairs]
    assert all(a for _b, a in solved) and not all(b for b, _a in solved)  # the oracle solves all
    assert tags == ["same" if b else "improved" for b, _a in solved]
    browser.evaluate("document.querySelectorAll('details.pair').forEach(d => d.open = true)")
    browser.evaluate("new Promise(r => setTimeout(r, 50))")
    assert browser.evaluate("document.querySelectorAll('.pair .step.changed').length") >= 6
    assert browser.errors() == []


def test_hostile_completions_stay_text_in_the_browser(browser, tmp_path):
    specs = ["tool=constant:" + "".join(HOSTILE), "planner=constant:" + HOSTILE[3]]
    page, _ = write_viewer(_write(tmp_path / "h.json", _report("sokoban", specs, episodes=2)))
    browser.events.clear()
    browser.open(page.as_uri())
    browser.evaluate(
        "document.querySelectorAll('details').forEach(d => { d.open = true;"
        " d.dispatchEvent(new Event('toggle')); })"
    )
    counts = browser.evaluate(
        "['script', 'img', 'a', 'iframe', 'style', 'object', 'embed', 'link', 'form']"
        ".map(t => document.getElementsByTagName(t).length)"
    )
    assert counts == [2, 0, 0, 0, 1, 0, 0, 0, 0]  # only the page's own script and style
    assert browser.evaluate("document.title") == "evaluation: h.json"
    text = browser.evaluate("document.body.innerText")
    for payload in HOSTILE[:4]:
        assert payload in text  # shown, as text
    assert browser.errors() == []


def test_sokoban_screenshot_shows_the_env_board(browser, tmp_path):
    """The start board of episode 0, cropped from a screenshot: every cell's centre has the
    colour of what the env's own state has there (wall, floor, goal, box, player)."""
    from PIL import Image

    rep = _report("sokoban", ["constant:#### [R,D]"], episodes=1, **SOKOBAN_SINGLE)
    page, _ = write_viewer(_write(tmp_path / "s.json", rep))
    browser.events.clear()
    browser.open(page.as_uri() + "#episode-0")
    box = browser.rect("#episode-0 .board")
    img = Image.open(io.BytesIO(browser.screenshot(box))).convert("RGB")
    rec = rep["per_episode"][0]
    raw = envs.make("sokoban", **SOKOBAN_SINGLE).unwrapped
    raw.reset(seed=rec["reset_seed"], options=rec["reset_options"])
    cells = raw.cell_grid().cells
    seen = set()
    for r, row in enumerate(cells):
        for c, cell in enumerate(row):
            want = COLORS[cell.disc or cell.marker or cell.background]
            got = img.getpixel((1 + c * 23 + 11, 1 + r * 23 + 11))  # 22 px cells, 1 px lines
            assert max(abs(a - b) for a, b in zip(got, want)) <= 3, (r, c, got, want)
            seen.add(cell.disc or cell.marker or cell.background)
    assert {"wall", "box", "player", "goal"} <= seen
    assert browser.errors() == []
