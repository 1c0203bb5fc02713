"""What the tests need: a tiny seeded model pair, and deliberately wrong pieces. Test-only.

The tiny pair (:func:`tiny_random_llama`, :class:`CharTokenizer`; ``load_pair("tiny-random")``)
is small enough for every test to run in seconds and for its output laws to be enumerated exactly.

A test of exactness that never rejects anything proves nothing. Next to the prototype's wrong
correction (:func:`specdec_lib.sampling.prototype_correction`, a wrong *rule*, which
:func:`prototype_verify` plugs into a decoder), this module holds two wrong pieces of
*bookkeeping*, where the rule is right and the indices or caches are not; each plugs into
:class:`~specdec_lib.decoding.SpeculativeDecoder` through one of its test-only arguments:

* :class:`StaleCacheState` (``target_state=``) forgets to crop the target's KV cache after a
  rejection. The entries of the rejected drafts stay, and every later pass attends to them as if
  they were part of the text: the target's next distributions are conditioned on tokens that were
  never emitted. The tokens of the step itself follow the right law; the ones after it do not, so
  only a test of several tokens in a row can see it.
* :func:`wrong_bonus_row_verify` (``verifier=``) draws the bonus token from the target's row of the
  *last draft* (``p_{K-1}``) instead of the row after it (``p_K``): an off-by-one in the rows of the
  target's pass. Only steps that accept every draft are affected, and there the bonus token follows
  the law of the token before it.

Never use the wrong pieces outside a test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .decoding import TargetState
from .sampling import Verdict, prototype_correction, verify

__all__ = [
    "CharTokenizer",
    "StaleCacheState",
    "prototype_verify",
    "tiny_random_llama",
    "wrong_bonus_row_verify",
]


# --------------------------------------------------------------------------------------------
# The tiny pair
# --------------------------------------------------------------------------------------------


def tiny_random_llama(
    seed: int,
    *,
    vocab_size: int = 32,
    hidden_size: int = 32,
    num_hidden_layers: int = 2,
    max_position_embeddings: int = 512,
    dtype: torch.dtype = torch.float32,
) -> Any:
    """A seeded random-init Llama. ``initializer_range`` is large so that its next-token
    distributions are far from uniform (a test on a flat law has little power)."""
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
    """A toy character tokenizer for the tiny models (ids 2..V-1; 0 = BOS, 1 = EOS), enough for
    the benchmark and the CLI to run end to end in tests. Not invertible, not for real text."""

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


# --------------------------------------------------------------------------------------------
# Deliberately wrong pieces
# --------------------------------------------------------------------------------------------


class StaleCacheState(TargetState):
    """WRONG: :meth:`rollback` moves the sequence length back but leaves the cache uncropped
    (pass it as a decoder's ``target_state``)."""

    def rollback(self, n_valid: int) -> None:
        self.length = min(self.length, n_valid)  # the bug: no self.cache.crop(...)
        self._tree = None


def prototype_verify(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    **_: Any,
) -> Verdict:
    """WRONG: :func:`~specdec_lib.sampling.verify` with the prototype's correction after a
    rejection (pass it as a decoder's ``verifier``)."""
    return verify(
        draft_tokens, draft_probs, target_probs, generator, correction=prototype_correction
    )


def wrong_bonus_row_verify(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    **kwargs: Any,
) -> Verdict:
    """WRONG: :func:`~specdec_lib.sampling.verify` with the bonus drawn from ``p_{K-1}``, the
    row of the last draft, instead of ``p_K`` (pass it as a decoder's ``verifier``)."""
    target_probs = torch.as_tensor(target_probs)
    if len(target_probs) >= 2:
        target_probs = torch.cat([target_probs[:-1], target_probs[-2:-1]])
    return verify(draft_tokens, draft_probs, target_probs, generator, **kwargs)
