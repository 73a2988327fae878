"""Shared fixtures for adapter tests: one torch thread, and a tiny char-level chat model.

``char_model`` needs no download and no GGUF conversion: a character-level tokenizer built in
memory (printable ASCII + a few special tokens, with a chat template) and a 2-layer Llama with
random seeded weights. It makes the generation machinery testable in well under a second.
"""

from __future__ import annotations

import os
import string

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SPECIALS = ["<pad>", "<eos>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    try:
        import torch
    except ImportError:  # pragma: no cover
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def make_char_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = [c for c in string.printable if c not in "\x0b\x0c\r\t"]
    vocab = {t: i for i, t in enumerate(SPECIALS + chars)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(".|\n"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        additional_special_tokens=SPECIALS[3:],
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def make_char_model(seed: int = 0, eos_bias: float | None = None, **overrides):
    """(model, tokenizer); ``eos_bias`` adds an output bias on EOS (untied head) so rows end
    early."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = make_char_tokenizer()
    cfg = {
        "vocab_size": len(tok),
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 512,
        "tie_word_embeddings": eos_bias is None,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
        "bos_token_id": None,
        "initializer_range": 0.5,
    }
    cfg.update(overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(LlamaConfig(**cfg))
        if eos_bias is not None:
            head = torch.nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=True)
            with torch.no_grad():
                head.weight.copy_(model.lm_head.weight)
                head.bias.zero_()
                head.bias[tok.eos_token_id] = eos_bias
            model.lm_head = head
    model.eval()
    return model, tok


@pytest.fixture(scope="module")
def char_model():
    pytest.importorskip("transformers")
    return make_char_model()


@pytest.fixture(scope="module")
def char_policy(char_model):
    from adapters.policies import TransformersPolicy

    model, tok = char_model
    return TransformersPolicy(model, tok, device="cpu", batch_size=8, name="char")


# a 3x3 plan_path without walls: episodes of a few short steps
TINY_PLAN_PATH = {"height": 3, "width": 3, "min_distance": 2, "wall_density": 0.0, "max_turns": 2}


def char_models(seed: int = 0):
    """The char-level chat model with room for long multi-turn prompts and early EOS."""
    return make_char_model(seed=seed, max_position_embeddings=8192, eos_bias=2.0)


def tiny_train_config(tmp_path, name: str = "run", **overrides):
    """A TrainConfig for fast trainer tests on :data:`TINY_PLAN_PATH` (a few seconds a step)."""
    from adapters.training.config import TrainConfig

    base = dict(
        env="plan_path",
        env_config=dict(TINY_PLAN_PATH),
        lora_rank=4,
        steps=2,
        instances_per_step=2,
        candidates=2,
        max_new_tokens=6,
        eval_episodes=0,
        demos=0,
        progress=False,
        device="cpu",
        plot_every=0,
        save_final=False,
        lr=1e-2,
        ppo_minibatches=1,  # one optimizer step per batch (the CPU recipe makes 4)
        init="none",  # no cold start (the CPU recipe fine-tunes on the oracle first)
        # exact log-probs: sample on the float32 training modules and update in float32 (the
        # defaults, a merged bfloat16 copy and a bfloat16 update, have tests of their own)
        generation_model="train",
        update_precision="float32",
        role_sampling={"planner": {"max_new_tokens": 6}},  # the CPU recipe gives it 64
        output_dir=str(tmp_path / name),
    )
    base.update(overrides)
    return TrainConfig(**base)


@pytest.fixture
def graph_starts(monkeypatch):
    """The modes of every :meth:`GraphDecoder.start` call (compiled decode steps) made while the
    test runs, in order."""
    from adapters.policies.graphs import GraphDecoder

    starts: list[str] = []
    real_start = GraphDecoder.start

    def counted(self, *args, **kwargs):
        starts.append(self.mode)
        return real_start(self, *args, **kwargs)

    monkeypatch.setattr(GraphDecoder, "start", counted)
    return starts
