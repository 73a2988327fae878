"""What every command line shares: arguments parsed before anything heavy is imported, and one
``error:`` line (exit status 2) for a mistake a person can fix.

A command is a parser and a body; :func:`run` is the one call that joins them::

    def build_parser() -> argparse.ArgumentParser: ...     # imports nothing heavy
    def _main(args: argparse.Namespace) -> int: ...         # imports torch & co. when it runs

    def main(argv=None) -> int:
        return cli.run(build_parser, _main, argv)

:func:`run` adds ``--debug`` to the parser, parses (``--help`` and argument errors answer before
the body imports anything: argparse prints the usage and an ``error:`` line, exit 2), then runs
the body and turns what a person caused into one line on stderr and exit status 2, without a
traceback:

* :class:`UsageError`, raised by a command (directly, or by :func:`bad_input` around a check of
  one of its inputs: a policy spec, an env config, an instance, a path);
* a missing optional dependency (``ImportError``): the line names the extra that provides it,
  ``pip install -e ".[serve]"`` (:data:`EXTRAS`);
* ``KeyboardInterrupt``: ``interrupted``, exit 130.

Before the body runs, :func:`~adapters.policies.models.apply_cpu_bf16_env` reads
``MAS_CPU_BF16``: ``emulated`` makes the command take the path of a CPU without native bfloat16
(float32 generation, the kernels capped at AVX2), on any machine.

Anything else is a bug or a failure of the machine and keeps its traceback. ``--debug`` (or
``MAS_DEBUG=1``) lets every exception through with its traceback.

**Data never names code.** A setting registered outside this repository is loaded by what a
person types: ``--env package.module:id``, or ``--import package.module``
(:func:`add_import_flag`; ``adapters.train`` and ``adapters.view`` have it). An env id read from
a file (a run's ``config.yaml`` on ``--resume``, an evaluation record) imports nothing
(:func:`envs.registered_spec`); one whose module is not loaded ends in one line naming the flag
that loads it (:func:`module_not_loaded`).

Input checks belong in the command before its long work starts: a bad ``--policy`` is reported
before an evaluation loads a model, an unreachable server after a short connect timeout
(:meth:`~adapters.policies.openai_compat.OpenAIPolicy.check_reachable`), a model path that does not
exist before a training run creates its directory (:func:`~adapters.policies.models.
check_model_source`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = [
    "EXTRAS",
    "UsageError",
    "add_import_flag",
    "bad_input",
    "error_line",
    "import_modules",
    "module_not_loaded",
    "run",
    "serve_until_interrupted",
]

# the optional dependencies of pyproject.toml by import name -> the extra that installs them
# (tests/adapters/test_cli_errors.py checks this table against pyproject.toml)
EXTRAS = {
    "torch": "train",
    "transformers": "train",
    "gguf": "train",
    "peft": "train",
    "accelerate": "train",
    "datasets": "train",
    "tensorboard": "train",
    "matplotlib": "train",
    "scipy": "train",
    "safetensors": "train",
    "docker": "docker",
    "trl": "trl",
    "openenv": "serve",
    "fastapi": "serve",
    "uvicorn": "serve",
    "pydantic": "serve",
    "ray": "ray",
    "vllm": "vllm",
}


class UsageError(Exception):
    """A mistake in what the command was given; the message says which input and what to do."""


@contextlib.contextmanager
def bad_input(what: str) -> Iterator[None]:
    """Turn the ``ValueError``, ``TypeError``, ``LookupError`` or ``OSError`` of a check of one
    input into a :class:`UsageError` that names it (``what``: the flag, e.g. ``"--policy"``;
    ``""`` when the message names it already).

    >>> with bad_input("--seed"):
    ...     int("x")
    Traceback (most recent call last):
    ...
    adapters.cli.UsageError: --seed: invalid literal for int() with base 10: 'x'
    """
    try:
        yield
    except UsageError:
        raise
    except (ValueError, TypeError, LookupError, OSError) as exc:
        text = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        raise UsageError(f"{what}: {text}" if what else str(text)) from exc


def add_import_flag(parser: argparse.ArgumentParser) -> None:
    """``--import MODULE`` (repeatable, ``args.imports``): modules to import before the command
    reads anything, such as the module that registers a setting outside this repository."""
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (repeatable): the module that registers a setting outside this "
        "repository. An env id read from a file never imports its module by itself",
    )


def import_modules(names: Sequence[str]) -> None:
    """Import the modules of ``--import`` (one that cannot be found is a :class:`UsageError`)."""
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise UsageError(f"--import {name}: {exc}") from exc


def module_not_loaded(what: str, exc: Any) -> UsageError:
    """The one line for an :class:`envs.ModuleNotLoadedError` raised for an id that ``what``
    (a file, a run directory) names: which flag loads the module.

    >>> import envs
    >>> try:
    ...     envs.registered_spec("pkg.mod:toy")
    ... except envs.ModuleNotLoadedError as e:
    ...     print(module_not_loaded("runs/r/config.yaml", e))
    runs/r/config.yaml names env 'pkg.mod:toy', whose module is not loaded: pass --import pkg.mod to load it (if you trust it: importing a module runs its code)
    """  # noqa: E501
    return UsageError(
        f"{what} names env {exc.env_id!r}, whose module is not loaded: pass --import "
        f"{exc.module} to load it (if you trust it: importing a module runs its code)"
    )


def error_line(exc: BaseException) -> str | None:
    """The one line for an exception a person can act on, or ``None`` (a bug: keep the
    traceback).

    >>> error_line(ModuleNotFoundError("No module named 'fastapi'", name="fastapi"))
    'fastapi is not installed; it comes with the serve extra: pip install -e ".[serve]"'
    >>> error_line(RuntimeError("boom")) is None
    True
    """
    if isinstance(exc, UsageError):
        return str(exc)
    if isinstance(exc, ImportError):
        top = (exc.name or "").split(".")[0]
        extra = EXTRAS.get(top)
        if extra is not None:
            return (
                f"{top} is not installed; it comes with the {extra} extra: "
                f'pip install -e ".[{extra}]"'
            )
        return str(exc)
    return None


def run(
    build_parser: Callable[[], argparse.ArgumentParser],
    body: Callable[[argparse.Namespace], int | None],
    argv: Sequence[str] | None = None,
) -> int:
    """Parse ``argv`` with ``build_parser()``, run ``body(args)``, and return the exit status
    (module docstring)."""
    parser = build_parser()
    if not any("--debug" in a.option_strings for a in parser._actions):
        parser.add_argument("--debug", action="store_true", help="show the traceback of any error")
    args = parser.parse_args(argv)
    debug = bool(getattr(args, "debug", False)) or os.environ.get("MAS_DEBUG") == "1"
    try:
        with bad_input(""):  # before any body imports torch: MAS_CPU_BF16=emulated
            from adapters.policies.models import apply_cpu_bf16_env

            apply_cpu_bf16_env()
        return int(body(args) or 0)
    except KeyboardInterrupt:
        if debug:
            raise
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        line = None if debug else error_line(exc)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return 2


def serve_until_interrupted(server: Any) -> None:
    """Run a ``socketserver`` server until Ctrl-C, then close it (the serving commands)."""
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
