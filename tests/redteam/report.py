"""Print the red-team table: every forgery's reward and the honest wrong answer's, per backend,
with the host CPU the forged step cost, and the rows of planted checkpoint payloads.

    python tests/redteam/report.py [--checkout DIR] [--no-docker] [--only PREFIX,...]

``--checkout DIR`` imports ``envs`` / ``sandboxes`` / ``verifiers`` / ``adapters`` from another
source tree (e.g. an older commit exported with ``git archive``), to see what the forgeries
earned there. ``--only 4A_,4B_`` keeps the rows whose names start so (``4E_``: the payload rows,
``5``: the fifth round's).

Fifth-round rows (issue 48): each root cause has its own test file here
(``test_round5_*.py``); its row runs that file against the checkout (the checkout's own test
fixtures beside it) and says how many of its tests held. Against a checkout from before the
fixes every row reads "NO".

Payload rows (root cause E): a run of the checkout's trainer (the char model, MarsRL's agent
pipeline with segments) is checkpointed; a pickle whose ``__reduce__`` creates a file is
planted in each file of the checkpoint and in ``config.yaml``, and the run is resumed; "forged"
is 1 when the payload ran, "honest" (the untouched run) is 0.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkout", default=str(Path(__file__).resolve().parents[2]))
    ap.add_argument("--no-docker", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated name prefixes")
    args = ap.parse_args(argv)
    only = tuple(p for p in args.only.split(",") if p)
    sys.path.insert(0, args.checkout)
    spec = importlib.util.spec_from_file_location(
        "redteam_attacks", Path(__file__).with_name("attacks.py")
    )
    assert spec is not None and spec.loader is not None
    attacks = importlib.util.module_from_spec(spec)
    sys.modules["redteam_attacks"] = attacks
    spec.loader.exec_module(attacks)
    import sandboxes

    boxes = {"local": sandboxes.LocalSandbox(workers=2)}
    if not args.no_docker:
        try:
            boxes["docker"] = sandboxes.DockerSandbox(workers=2)
        except sandboxes.SandboxError as exc:
            print(f"docker skipped: {exc}", file=sys.stderr)
    print("| forgery | setting | role | backend | forged | honest wrong | host CPU s | defeated |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        for f in attacks.ALL:
            if only and not f.name.startswith(only):
                continue
            for name, sb in boxes.items() if f.sandboxed else [("-", None)]:
                _clear_caches()
                honest = f.play(f.honest, sb)
                cpu = time.process_time()
                try:
                    value = f.play(f.forged, sb)
                    forged, ok = f"{value:.3f}", value <= honest + 1e-9
                except Exception as exc:  # an older checkout may raise out of env.step
                    forged, ok = f"raised {type(exc).__name__}", False
                cpu = time.process_time() - cpu
                row = (f.name, f.setting, f.role, name, forged, f"{honest:.3f}", f"{cpu:.2f}")
                print("| " + " | ".join((*row, "yes" if ok else "NO")) + " |", flush=True)
    finally:
        for sb in boxes.values():
            sb.close()
    if not only or any("4E_payload".startswith(p) for p in only):
        for name, ran in payload_rows(attacks):
            row = (f"4E_payload_in_{name}", "trainer", "--resume", "-", f"{float(ran):.3f}")
            print("| " + " | ".join((*row, "0.000", "-", "NO" if ran else "yes")) + " |")
    rounds5 = [r for r in ROUND5 if not only or r[0].startswith(only) or "5".startswith(only)]
    if rounds5:
        print("\n| root cause | attacked | tests | held | failed | skipped | defeated |")
        print("|---|---|---|---|---|---|---|")
        for name, attacked, held, failed, skipped in round5_rows(args.checkout, rounds5):
            ok = "yes" if held and not failed else "NO"
            total = held + failed + skipped
            row = (name, attacked, str(total), str(held), str(failed), str(skipped), ok)
            print("| " + " | ".join(row) + " |", flush=True)


# issue 48: (row, what was attacked, the test file that holds the attack)
ROUND5 = [
    ("5A_data_names_code", "viewer, --resume", "test_round5_data_ids.py"),
    ("5B_tester_sees_golden", "code tester, sandbox", "test_round5_tester_channel.py"),
    ("5C_policy_server_unguarded", "adapters.serve", "test_round5_policy_server.py"),
    ("5D_sessions_evicted", "serve_env", "test_round5_sessions.py"),
    ("5E_reset_cost", "reset, serve_env", "test_round5_reset_cost.py"),
]


def round5_rows(
    checkout: str, rows: list[tuple[str, str, str]]
) -> list[tuple[str, str, int, int, int]]:
    """Run each fifth-round test file against ``checkout``: ``(row, attacked, held, failed,
    skipped)``. The file goes beside a copy of the checkout's own ``tests`` package (its
    fixtures), in a process that imports the checkout's packages."""
    import os
    import shutil
    import subprocess
    import tempfile
    import xml.etree.ElementTree as ET

    here = Path(__file__).resolve().parent
    out = []
    with tempfile.TemporaryDirectory(prefix="redteam-round5-") as tmp:
        shutil.copytree(Path(checkout) / "tests", Path(tmp) / "tests")
        env = {**os.environ, "PYTHONPATH": str(Path(checkout).resolve())}
        for name, attacked, test_file in rows:
            shutil.copy(here / test_file, Path(tmp) / "tests" / "redteam" / test_file)
            xml = Path(tmp) / f"{name}.xml"
            cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o",
                   "addopts=", "-o", "markers=slow serial docker gpu", f"--junitxml={xml}",
                   f"tests/redteam/{test_file}"]  # fmt: skip
            subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, timeout=1800)
            if not xml.exists():
                out.append((name, attacked, 0, 1, 0))
                continue
            suite = ET.parse(xml).getroot()
            suite = suite if suite.tag == "testsuite" else suite[0]
            total, skipped = int(suite.get("tests", 0)), int(suite.get("skipped", 0))
            failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
            out.append((name, attacked, total - failed - skipped, failed, skipped))
    return out


def _clear_caches() -> None:
    """Results are cached per program and tests, not per backend (as tests/redteam/conftest.py
    does before every test): each row is played from scratch."""
    import envs.code.testing
    import envs.pools
    import verifiers.math_answer
    import verifiers.plain_tests

    for cache in (
        getattr(envs.code.testing, "_REPORTS", None),
        getattr(envs.code.testing, "_TESTER", None),
        getattr(envs.pools, "_CACHE", None),
        getattr(verifiers.math_answer, "_CACHE", None),
        getattr(verifiers.plain_tests, "_DISCOVERED", None),
    ):
        if cache is not None:
            cache.clear()


def payload_rows(attacks: Any) -> list[tuple[str, bool]]:
    """Root cause E: (file, whether a payload planted in it ran on --resume), for each file of
    a checkpoint of the imported trainer and the run's config.yaml."""
    import shutil
    import tempfile

    try:
        from adapters.training.trainer import Trainer
        from tests.adapters.conftest import char_models

        root = Path(tempfile.mkdtemp(prefix="redteam-resume-"))
        attacks.checkpointed_run(root)
    except ImportError as exc:
        print(f"payload rows skipped: {exc}", file=sys.stderr)
        return []
    ckpt = sorted((root / "run" / "checkpoints").glob("step_*"))[-1].name
    names = sorted(p.name for p in (root / "run" / "checkpoints" / ckpt).iterdir() if p.is_file())
    rows = []
    for name in [*names, "config.yaml"]:
        run = root / f"planted-{name}"
        shutil.copytree(root / "run", run)
        target = run / name if name == "config.yaml" else run / "checkpoints" / ckpt / name
        marker = root / f"ran-{name}"
        attacks.plant_payload(target, str(marker))
        with contextlib.suppress(Exception):
            Trainer.resume(run, models=char_models()).close()
        rows.append((name, marker.exists()))
    shutil.rmtree(root, ignore_errors=True)
    return rows


if __name__ == "__main__":
    main()
