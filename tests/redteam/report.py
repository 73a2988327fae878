"""Print the red-team table: every forgery's reward and the honest wrong answer's, per backend.

    python tests/redteam/report.py [--checkout DIR] [--no-docker]

``--checkout DIR`` imports ``envs`` / ``sandboxes`` / ``verifiers`` from another source tree
(e.g. an older commit exported with ``git archive``), to see what the forgeries earned there.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkout", default=str(Path(__file__).resolve().parents[2]))
    ap.add_argument("--no-docker", action="store_true")
    args = ap.parse_args(argv)
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
    print("| forgery | setting | role | backend | forged | honest wrong | defeated |")
    print("|---|---|---|---|---|---|---|")
    try:
        for f in attacks.ALL:
            for name, sb in boxes.items() if f.sandboxed else [("-", None)]:
                honest = f.play(f.honest, sb)
                try:
                    value = f.play(f.forged, sb)
                    forged, ok = f"{value:.3f}", value <= honest + 1e-9
                except Exception as exc:  # an older checkout may raise out of env.step
                    forged, ok = f"raised {type(exc).__name__}", False
                row = (
                    f.name,
                    f.setting,
                    f.role,
                    name,
                    forged,
                    f"{honest:.3f}",
                    "yes" if ok else "NO",
                )
                print("| " + " | ".join(row) + " |")
    finally:
        for sb in boxes.values():
            sb.close()


if __name__ == "__main__":
    main()
