"""The distribution works from an install, not only from the source tree."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import envs

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    (path,) = out.glob("*.whl")
    return path


def test_wheel_contains_packages_and_data(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in (
        "envs/__init__.py",
        "envs/core/base.py",
        "envs/sokoban.py",
        "envs/data/bundled/stdin_basic.jsonl",
        "verifiers/math_answer.py",
        "sandboxes/__init__.py",
        "sandboxes/_server.py",
        "sandboxes/Dockerfile",
        "adapters/train.py",
        "adapters/evaluate.py",
        "adapters/policies/configs/qwen3_1_7b.json",
        "adapters/rollout/engine.py",
        "adapters/evaluation/runner.py",
        "adapters/evaluation/viewer.js",  # the episode viewer's page assets
        "adapters/evaluation/viewer.css",
        "adapters/training/trainer.py",
        "adapters/integrations/trl.py",
    ):
        assert required in names, f"{required} missing from the wheel"
    assert not any(n.startswith("tests/") for n in names)


def test_installed_package_runs_outside_the_source_tree(wheel: Path, tmp_path: Path):
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    code = (
        "import adapters, envs, sandboxes, verifiers\n"
        "for m in (adapters, envs, sandboxes, verifiers):\n"
        f"    assert m.__file__.startswith({str(site)!r}), m.__file__\n"
        "e = envs.make('sokoban'); e.reset(seed=0)\n"
        "r = sandboxes.default().run('print(6 * 7)')\n"
        "from adapters.evaluation.viewer import render_page\n"  # its assets from the install
        "assert 'DecompressionStream' in render_page({'title': 'x'})\n"
        "print(len(envs.list_envs()), r.stdout.strip())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(len(envs.list_envs())), "42"]
    helped = subprocess.run(
        [sys.executable, "-m", "adapters.train", "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert helped.returncode == 0, helped.stderr
    assert "--env" in helped.stdout and "--rollout-backend" in helped.stdout
