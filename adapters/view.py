"""Look at what the agents did: ``python -m adapters.view RUN_DIR_OR_RESULTS``.

Examples::

    python -m adapters.view runs/sokoban-at-grpo-20250101-120000   # -> that dir/episodes.html
    python -m adapters.view runs/suite-default/results.json          # a suite, every policy
    python -m adapters.view report.json --out /tmp/report.html       # evaluate --env ... --json
    python -m adapters.view runs/my-run --serve                      # also serve it on localhost
    python -m adapters.view benchmarks/results/learning/sokoban      # a table's rows, one each
    python -m adapters.view runs/my-run --failures                   # what the team gets wrong

It writes one self-contained HTML page (no server, no network) with every recorded episode step
by step: prompts, completions, rewards with their components and reasons, delayed awards, the
outcome, the boards of the grid settings drawn from the replayed env, filters by setting,
evaluation, outcome and role, and a side-by-side comparison of two evaluations on the same
instances (before and after training). :mod:`adapters.evaluation.viewer` builds the page and
documents it; training runs, suites and ``evaluate --env ... --json`` write it by default.

``--serve`` serves the page (that file only) at ``http://127.0.0.1:PORT/`` until interrupted;
``--no-replay`` shows the records as they are, without replaying them (no boards; faster).

**The records never name code.** Replaying a record builds its setting, and the setting's id is
read from the file, so it resolves only against settings already registered
(:func:`envs.registered_spec`): a record naming ``"package.module:id"`` whose module is not
loaded stops the command with one line naming the flag that loads it. For a setting registered
outside this repository, pass that flag::

    python -m adapters.view runs/my-toy-run --import toy_pkg.echo   # the module registering it

Only do that for a module you trust: importing it runs its code. A record's ``env_config`` is
checked against the setting's config class before the env is built; a record that fails the check
is shown as recorded, with the reason.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from adapters import cli

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m adapters.view",
        description="Write the episode viewer (one self-contained HTML page) of a training run, "
        "a suite's results or an evaluation report.",
    )
    p.add_argument(
        "path",
        metavar="RUN_DIR_OR_RESULTS",
        help="a training run directory, a suite's results.json (or its directory), or a report "
        "written by python -m adapters.evaluate --json",
    )
    p.add_argument(
        "--out", default=None, help="the page to write (default: episodes.html beside the JSON)"
    )
    p.add_argument(
        "--no-replay",
        action="store_true",
        help="show the records as recorded, without replaying them (no boards)",
    )
    p.add_argument(
        "--failures",
        action="store_true",
        help="print what the agents get wrong instead (tool + planner settings: each failed "
        "episode's primary cause and every turn's class, per evaluation; "
        "adapters.evaluation.failures)",
    )
    p.add_argument("--serve", action="store_true", help="serve the page on localhost afterwards")
    p.add_argument("--host", default="127.0.0.1", help="with --serve (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="with --serve; 0 picks a free port")
    cli.add_import_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(build_parser, _view, argv)


def _view(args: argparse.Namespace) -> int:
    from adapters.evaluation.viewer import find_sources, write_viewer

    cli.import_modules(args.imports)
    with cli.bad_input(""):  # the message names the path
        _kind, sources = find_sources(args.path)
    if not args.no_replay or args.failures:
        _check_settings(args.path, sources)
    if args.failures:
        from adapters.evaluation.failures import breakdown, format_breakdown

        with cli.bad_input(""):
            print(format_breakdown(breakdown({s.label: s.report for s in sources})))
        return 0
    page, n = write_viewer(args.path, args.out, replay_records=not args.no_replay)
    size = page.stat().st_size
    print(f"wrote {page} ({n} episodes, {size / 1024:.0f} KB)")
    if args.serve:
        _serve(page, args.host, args.port)
    return 0


def _check_settings(path: str, sources: Sequence[Any]) -> None:
    """Every setting the records name resolves without importing anything (module docstring);
    an unknown plain id is left to the page, which shows those records as recorded."""
    import envs

    seen: set[str] = set()
    for src in sources:
        for rec in src.report.get("per_episode") or []:
            env = rec.get("env") if isinstance(rec, dict) else None
            if not isinstance(env, str) or env in seen:
                continue
            seen.add(env)
            try:
                envs.registered_spec(env)
            except envs.ModuleNotLoadedError as exc:
                raise cli.module_not_loaded(f"{path}: a record of {src.label!r}", exc) from None
            except ValueError:
                pass


def _serve(page: Path, host: str, port: int) -> None:
    """Serve ``page`` (and nothing else) at ``/`` until interrupted."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    body = page.read_bytes()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] not in ("/", "/" + page.name):
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            return

    with cli.bad_input("--port"):
        server = ThreadingHTTPServer((host, port), Handler)
    print(f"serving it at http://{host}:{server.server_address[1]}/ (Ctrl-C stops)", flush=True)
    cli.serve_until_interrupted(server)


if __name__ == "__main__":
    sys.exit(main())
