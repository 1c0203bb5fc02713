"""The tiny seeded pair (``load_pair("tiny-random")``): random Llamas over a toy character
tokenizer, small enough for fast tests and exact enumeration of output laws."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["CharTokenizer", "tiny_random_llama"]


def tiny_random_llama(
    seed: int,
    *,
    vocab_size: int = 32,
    hidden_size: int = 32,
    num_hidden_layers: int = 2,
    max_position_embeddings: int = 512,
    dtype: torch.dtype = torch.float32,
) -> Any:
    """A seeded random-init Llama, with a large ``initializer_range`` so its next-token laws are far
    from uniform (a test on a flat law has little power)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        initializer_range=0.3,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.to(dtype).eval()
    model.requires_grad_(False)
    return model


class CharTokenizer:
    """A toy character tokenizer for the tiny models (ids 2..V-1; 0 = BOS, 1 = EOS); not
    invertible."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self.bos_token_id, self.eos_token_id, self.pad_token_id = 0, 1, 1

    def encode(self, text: str) -> list[int]:
        return [self.bos_token_id] + [2 + ord(ch) % (self.vocab_size - 2) for ch in text]

    def __call__(self, text: str, return_tensors: str | None = None) -> _Encoded:
        ids = self.encode(text)
        return _Encoded(torch.tensor([ids]) if return_tensors == "pt" else [ids])

    def decode(self, ids: Any, skip_special_tokens: bool = False) -> str:
        ids = [int(i) for i in ids]
        if skip_special_tokens:
            ids = [i for i in ids if i > 1]
        return "".join(chr(ord("a") + (i - 2) % 26) if i > 1 else f"<{i}>" for i in ids)

    def get_vocab(self) -> dict[str, int]:
        return {f"<{i}>": i for i in range(self.vocab_size)}

    def __len__(self) -> int:
        return self.vocab_size


@dataclass
class _Encoded:
    input_ids: Any
