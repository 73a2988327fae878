"""vLLM backend tests: they run in the separate ``.venv-vllm`` (``bash scripts/setup_vllm.sh``).

``.venv-vllm/bin/python -m pytest tests/vllm -q``. Where the ``vllm`` package is not installed
(the main ``.venv``) every test here is skipped at once, without importing anything heavy; with
``MAS_REQUIRE_VLLM=1`` they fail instead. One engine (the embedded SmolLM2 checkpoint, float32,
LoRA enabled) is shared by the whole directory, since starting it is the main cost.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

MAX_LORA_RANK = 8


def _unavailable() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return (
            "vllm is not installed in this environment; the vLLM tests run in .venv-vllm "
            "(bash scripts/setup_vllm.sh; .venv-vllm/bin/python -m pytest tests/vllm)"
        )
    if os.environ.get("MAS_REQUIRE_VLLM") == "1":  # installed: make sure it really imports
        try:
            import vllm  # noqa: F401
        except Exception as exc:  # a broken install must not pass as a skip
            return f"vllm is installed but does not import: {type(exc).__name__}: {exc}"
    return None


@pytest.fixture(scope="session", autouse=True)
def _vllm_required() -> None:
    reason = _unavailable()
    if reason is None:
        return
    if os.environ.get("MAS_REQUIRE_VLLM") == "1":
        pytest.fail(f"MAS_REQUIRE_VLLM=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def engine(_vllm_required):
    """The shared VLLMPolicy: embedded SmolLM2, float32, LoRA enabled."""
    import time

    from adapters.policies.vllm_policy import VLLMPolicy

    t0 = time.perf_counter()
    policy = VLLMPolicy(
        None,
        dtype="float32",
        max_model_len=1024,
        enable_lora=True,
        max_lora_rank=MAX_LORA_RANK,
        max_loras=2,
        enable_sleep_mode=True,
    )
    policy.start_seconds = time.perf_counter() - t0
    yield policy
    policy.close()


@pytest.fixture(scope="session")
def hf(_vllm_required):
    """``(model, tokenizer)``: the same checkpoint in transformers, float32, one thread."""
    import torch

    from adapters.policies.models import load_policy_model

    torch.set_num_threads(1)
    return load_policy_model(None, device="cpu", dtype=torch.float32)
