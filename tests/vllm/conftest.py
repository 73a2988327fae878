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


SERVER_FLAGS = (
    "--dtype",
    "float32",
    "--max-model-len",
    "1024",
    "--enforce-eager",
    "--seed",
    "0",
    "--logprobs-mode",
    "processed_logprobs",
    "--generation-config",
    "vllm",
    "--worker-extension-cls",
    "adapters.policies.vllm_policy.VLLMWorkerExtension",
    "--enable-lora",
    "--max-lora-rank",
    str(MAX_LORA_RANK),
    "--max-loras",
    "2",
)


def start_vllm_server(model: str, log_path, timeout_s: float = 900.0):
    """A real OpenAI-compatible vLLM server (``python -m vllm.entrypoints.openai.api_server``,
    the module ``vllm serve`` runs) on a free port, configured as
    :mod:`adapters.policies.vllm_server` requires; returns ``(process, url)`` once it answers."""
    import socket
    import subprocess
    import sys
    import time
    import urllib.request
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ)
    env.update(
        VLLM_SERVER_DEV_MODE="1",
        VLLM_ALLOW_RUNTIME_LORA_UPDATING="True",
        VLLM_CPU_KVCACHE_SPACE="1",
        PYTHONPATH=str(root) + os.pathsep + env.get("PYTHONPATH", ""),
    )
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model]
    cmd += ["--host", "127.0.0.1", "--port", str(port), *SERVER_FLAGS]
    log = open(log_path, "w")  # noqa: SIM115 - closed by stop_vllm_server
    proc = subprocess.Popen(
        cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    proc.log = log  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            log.flush()
            raise RuntimeError(f"vllm server exited:\n{Path(log_path).read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=5):
                return proc, url
        except OSError:
            time.sleep(2)
    stop_vllm_server(proc)
    raise RuntimeError(f"vllm server did not answer in {timeout_s:.0f} s")


def stop_vllm_server(proc) -> None:
    """Stop the server and its engine process (the process group this test started)."""
    import signal
    import subprocess

    for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    proc.log.close()


@pytest.fixture(scope="session")
def server(_vllm_required, tmp_path_factory):
    """URL of a running vLLM server for the embedded SmolLM2 checkpoint (float32, LoRA on)."""
    from adapters.policies.models import ensure_embedded_checkpoint

    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    proc, url = start_vllm_server(str(ensure_embedded_checkpoint()), log)
    yield url
    stop_vllm_server(proc)
