"""The feature head (:mod:`specdec_lib.drafters.heads`) as a Drafter (EAGLE-style drafting)."""

from __future__ import annotations

import torch
from torch import nn

from ..lm import model_device
from ..sampling import Warp, sample
from .base import BaseDrafter, Drafter

__all__ = ["FeatureDrafter", "drafter_for"]


def drafter_for(head: nn.Module) -> Drafter | nn.Module:
    """The Drafter for a loaded draft: a :class:`FeatureDrafter` for a head with
    ``feature_layers``, else the model itself (for :class:`~specdec_lib.drafters.ModelDrafter`)."""
    return FeatureDrafter(head) if hasattr(head, "feature_layers") else head


class FeatureDrafter(BaseDrafter):
    """Drafts with a :class:`FeatureHead` inside :class:`~specdec_lib.decoding.SpeculativeDecoder`.

    The decoder hands over the target's hidden states after every pass (``observe``); the first step
    of a sequence has none, so it proposes nothing. The head's KV cache holds only positions built
    from true target features; drafted positions are dropped after each proposal.
    """

    stops_by_confidence = True

    def __init__(self, head: nn.Module) -> None:
        self.head = head
        self.feature_layers = head.feature_layers
        self.vocab_size = head.target.config.vocab_size
        self._reset()

    @property
    def support(self) -> torch.Tensor:
        """The head's sorted token subset: ``q`` is 0 outside it, so its rows are ``[k, |S|]``."""
        return self.head.subset

    @property
    def device(self) -> torch.device:
        return model_device(self.head)

    def _reset(self) -> None:
        from transformers import DynamicCache

        self._store: torch.Tensor | None = None  # room for the true target features h_0, h_1, ...
        self._feats: torch.Tensor | None = None  # those held, h_0..h_{m-1}: a view of _store
        self._cache = DynamicCache()
        self._done = 0  # head positions 1.._done are in the cache (built from true features)
        self._logits: list[torch.Tensor] = []  # the subset logits of each draft position

    def observe(self, start: int, features: torch.Tensor) -> None:
        if self._feats is None and start != 0:
            raise ValueError("FeatureDrafter: the first target pass must start at position 0")
        end = start + features.shape[0]
        if self._store is None or end > self._store.shape[0]:  # grow by doubling: each step
            grown = features.new_empty((2 * end, features.shape[-1]))  # writes its own rows only
            if self._feats is not None:
                grown[:start] = self._feats[:start]
            self._store = grown
        self._store[start:end] = features
        self._feats = self._store[:end]

    def update(self, n_valid: int) -> None:
        if n_valid == 0:
            return self._reset()
        if self._feats is not None and self._feats.shape[0] > n_valid:
            self._feats = self._feats[:n_valid]
        # Head position j reads (h_{j-1}, x_j): it stays valid while x_j does (j < n_valid).
        if self._done > n_valid - 1:
            self._cache.crop(n_valid - 1 - self._done)
            self._done = n_valid - 1

    @property
    def draft_scores(self) -> torch.Tensor | None:
        """The last proposal's logits, ``[k, |S|]`` (``[k, V]``, ``-inf`` off the subset, where
        ``support`` is hidden); the decoder ranks greedy alternatives by them."""
        if not self._logits:
            return None
        sub = torch.stack(self._logits).float()
        if self.support is not None:
            return sub
        full = sub.new_full((sub.shape[0], self.vocab_size), float("-inf"))
        return full.index_copy_(1, self.head.subset.to(full.device), sub)

    def _draw(
        self, hidden: torch.Tensor, warp: Warp, generator: torch.Generator | None, first: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One draft token, its row ``q`` (on the subset, or over the vocabulary where ``support``
        is hidden), that row on the subset, and the token's index in the subset."""
        # Warping the subset's logits equals warping the full row with -inf outside it (no warp
        # keeps a token of probability 0); so does drawing within the subset.
        logits = self.head.logits(hidden)[0]
        if first:
            self._logits = []
        self._logits.append(logits)  # kept as is; draft_scores converts them when asked
        sub = warp.probs(logits)
        subset = self.head.subset.to(sub.device)
        i = sample(sub, generator)
        x = subset[i]
        if self.support is not None:
            return x, sub, sub, i
        return x, sub.new_zeros(self.vocab_size).index_copy_(0, subset, sub), sub, i

    @torch.inference_mode()
    def propose(
        self,
        ids: torch.Tensor,
        k: int,
        warp: Warp,
        generator: torch.Generator | None,
        threshold: float | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Up to ``k`` drafts; with a ``threshold``, stop after a draft whose confidence (on the
        subset) is below it (a stopping time: the output law stays exact)."""
        L = ids.numel()
        if self._feats is None or self._feats.shape[0] < L - 1:  # no target features yet
            return ids.new_empty(0), torch.empty(0, self.vocab_size, device=ids.device)
        # Head positions j = _done+1 .. L-1 read (h_{j-1}, x_j), all known exactly.
        j0 = self._done + 1
        feats = self._feats[j0 - 1 : L - 1].unsqueeze(0)
        toks = ids[j0:L].unsqueeze(0)
        pos = torch.arange(j0, L, device=ids.device).unsqueeze(0)
        hidden, self._cache = self.head(feats, toks, cache=self._cache, position_ids=pos)
        self._done = L - 1
        h = hidden[0, -1:]
        tokens, probs = [], []
        for i in range(k):
            x, q, sub, at = self._draw(h, warp, generator, first=i == 0)
            tokens.append(x)
            probs.append(q)
            if threshold is not None and warp.confidence(self._logits[-1], sub, at) < threshold:
                k = i + 1  # unsure: stop here (the host read is the price of a dynamic length)
                break
            if i + 1 < k:  # feed the head its own feature and the draft token
                pos = torch.tensor([[L + i]], device=ids.device)
                hidden, self._cache = self.head(
                    h.view(1, 1, -1), x.view(1, 1), cache=self._cache, position_ids=pos
                )
                h = hidden[0, -1:]
        if self._cache.get_seq_length() > self._done:  # drop the positions built from drafts
            self._cache.crop(self._done - self._cache.get_seq_length())
        return torch.stack(tokens), torch.stack(probs)
