"""The README's Python examples run as written, and its quick-start commands match CI."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, flags=re.S)


def test_environment_example_runs_and_prints_rewards():
    block = next(b for b in _python_blocks() if "envs.make" in b)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "README.md", "exec"), {})
    lines = out.getvalue().splitlines()
    assert lines, "the example printed nothing"
    assert lines[0].startswith("tool ") and "fmt" in lines[0]
    assert any(line.startswith("planner ") for line in lines)


def test_sandbox_example_runs():
    block = next(b for b in _python_blocks() if "sandboxes.LocalSandbox" in b)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "README.md", "exec"), {})
    assert out.getvalue().split()[:2] == ["0", "42"]


def test_quick_start_commands_match_ci():
    bash_blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    commands = [line.strip() for b in bash_blocks for line in b.splitlines() if line.strip()]
    assert (
        commands[0] == "bash scripts/setup.sh && .venv/bin/python -m adapters.train --env sokoban"
    )
    assert commands[1] == "bash scripts/test.sh"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "\nbash scripts/test.sh\n" in ci
