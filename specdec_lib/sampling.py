"""The speculative-sampling rule (arXiv 2211.17192, 2302.01318): accept a draft ``x ~ q`` with
probability ``min(1, p(x) / q(x))``, at the first rejection emit a token from
``norm(max(0, p - q))``, after all ``K`` a bonus from ``p_K``: the output follows ``p`` exactly.
Only :func:`verify` reads back to the host."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from transformers import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from .checks import positive_int, probability, real

__all__ = [
    "greedy_tokens",
    "Warp",
    "Verdict",
    "WarpedRows",
    "acceptance_rate",
    "acceptance_probs",
    "residual",
    "residual_correction",
    "prototype_correction",
    "sample",
    "step_distributions",
    "check_verify_inputs",
    "bad_rows",
    "has_nan",
    "verify",
]


@dataclass(frozen=True)
class Warp:
    """Turns logits into the law sampled from, alike for draft and target, so ``q`` and ``p`` are
    the laws tokens are drawn from: transformers' temperature, top-k, top-p, in ``generate``'s
    order. ``temperature == 0`` is greedy: one-hot on the (first) argmax."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        temperature = real(self.temperature, "temperature", "0 means greedy", low=0.0)
        object.__setattr__(self, "temperature", temperature)
        object.__setattr__(self, "top_k", positive_int(self.top_k, "top_k", optional=True))
        object.__setattr__(self, "top_p", probability(self.top_p, "top_p", optional=True))
        processors = LogitsProcessorList()
        if self.temperature > 0:
            if self.temperature != 1.0:
                processors.append(TemperatureLogitsWarper(self.temperature))
            if self.top_k is not None:
                processors.append(TopKLogitsWarper(top_k=self.top_k))
            if self.top_p is not None and self.top_p < 1.0:
                processors.append(TopPLogitsWarper(top_p=self.top_p))
        object.__setattr__(self, "_processors", processors)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def for_draft(self, scale: float) -> Warp:
        """This warp at ``scale`` times its temperature, same top-k and top-p
        (``draft_temperature_scale``); itself at scale 1 or when greedy."""
        scale = real(
            scale,
            "draft_temperature_scale",
            "the draft's temperature over the target's",
            low=0.0,
            low_open=True,
        )
        if self.greedy or scale == 1:
            return self
        return Warp(self.temperature * scale, self.top_k, self.top_p)

    def logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Warped logits (float32, ``-inf`` outside the kept set); rows are independent."""
        if self.greedy:
            raise ValueError("greedy (temperature=0) has no warped logits; use probs()")
        scores = logits.float()
        if not self._processors:
            return scores
        squeeze = scores.dim() == 1
        if squeeze:
            scores = scores.unsqueeze(0)
        # the warpers ignore input_ids; called one by one (the list's call inspects signatures)
        for warper in self._processors:
            scores = warper(None, scores)
        return scores.squeeze(0) if squeeze else scores

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """``[..., V]`` logits -> the law sampled from (float32), no host sync. A row holding NaN or
        +inf becomes a row of NaN, which :func:`verify` and the decoders refuse."""
        if self.greedy:
            idx, bad = greedy_tokens(logits)
            probs = torch.zeros(logits.shape, dtype=torch.float32, device=logits.device)
            probs.scatter_(-1, idx.unsqueeze(-1), 1.0)
            return probs.masked_fill_(bad.unsqueeze(-1), float("nan"))  # this call's own tensor
        if not self._processors:  # one kernel: softmax converts to float32 (exactly) as it reads
            return torch.softmax(logits, dim=-1, dtype=torch.float32)
        probs = torch.softmax(self.logits(logits), dim=-1)
        if len(self._processors) <= (self.temperature != 1.0):
            # no truncation: softmax itself turns a row holding NaN or +inf into NaN
            return probs
        return probs.masked_fill_(bad_rows(logits), float("nan"))  # top-k / top-p may hide it

    def confidence(self, logits: torch.Tensor, probs: torch.Tensor, index: int) -> float:
        """How sure a draft was of the token at ``index`` (one host read): ``probs[index]``, or the
        softmax of ``logits`` when greedy. A stop on it is a stopping time: decoding stays exact."""
        if not self.greedy:
            return float(probs[index])
        return float(torch.softmax(logits.float(), dim=-1)[index])

    def describe(self) -> str:
        if self.greedy:
            return "greedy"
        parts = [f"T={self.temperature:g}"]
        if self.top_k is not None:
            parts.append(f"top_k={self.top_k}")
        if self.top_p is not None:
            parts.append(f"top_p={self.top_p:g}")
        return ", ".join(parts)


class WarpedRows:
    """``warp.probs(logits)``, each row warped when first read (``rows[i]``): tree verification
    reads only the root's and the accepted nodes' rows."""

    def __init__(self, logits: torch.Tensor, warp: Warp) -> None:
        self.logits, self.warp = logits, warp
        self._rows: dict[int, torch.Tensor] = {}

    @property
    def shape(self) -> torch.Size:
        return self.logits.shape

    @property
    def device(self) -> torch.device:
        return self.logits.device

    def __getitem__(self, i: int) -> torch.Tensor:
        if i not in self._rows:
            self._rows[i] = self.warp.probs(self.logits[i])
        return self._rows[i]

    def all(self) -> torch.Tensor:
        """Every row, ``[R, V]``."""
        return self.warp.probs(self.logits)


def bad_rows(logits: torch.Tensor) -> torch.Tensor:
    """``[..., 1]`` bool (no host sync): does the row hold NaN or ``+inf``? One ``amax`` tells."""
    top = logits.amax(dim=-1, keepdim=True)
    return torch.isnan(top) | torch.isposinf(top)


def greedy_tokens(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's (first) argmax and whether it holds NaN or ``+inf``, from one ``max``; no sync."""
    top, idx = logits.float().max(dim=-1)
    return idx, torch.isnan(top) | torch.isposinf(top)


def has_nan(*tensors: torch.Tensor) -> torch.Tensor:
    """A 0-d bool tensor (no host sync): does any of ``tensors`` hold a NaN?"""
    flag = torch.zeros((), dtype=torch.bool, device=tensors[0].device)
    for t in tensors:
        if t.numel():
            flag = flag | torch.isnan(t.amax())
    return flag


NAN_MESSAGE = (
    "the model produced NaN or +inf logits (a numerical overflow, e.g. float16 activations); "
    "refusing to sample from them. Load the models in torch.float32 or torch.bfloat16."
)


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of ``probs`` (``[V]`` -> 0-d, ``[R, V]`` -> ``[R]``) by inverse CDF, one
    uniform per row. Rows need not be normalised; a 0-probability token is never drawn."""
    squeeze = probs.dim() == 1
    rows = probs.unsqueeze(0) if squeeze else probs
    cdf = rows.double().cumsum(dim=-1)
    u = torch.rand(rows.shape[0], 1, generator=generator, device=rows.device, dtype=torch.float64)
    idx = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(-1)
    # u * total < total always, so idx < V; clamp guards against a total of 0 (an invalid row).
    idx = idx.clamp_(max=rows.shape[-1] - 1)
    return idx.squeeze(0) if squeeze else idx


def acceptance_rate(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``alpha = sum_x min(p(x), q(x)) = 1 - TV(p, q)``, the probability that a draft ``x ~ q`` is
    accepted; row-wise on ``[..., V]``."""
    return torch.minimum(p, q).sum(dim=-1)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``norm(max(0, p - q))`` row-wise, sampled after a rejection; ``p`` where ``p == q`` (0/0, and
    no rejection can happen there)."""
    r = (p - q).clamp(min=0)
    total = r.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, r / total.clamp(min=torch.finfo(r.dtype).tiny), p)


Correction = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def residual_correction(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The correct correction: ``residual(p, q)`` (``[K, V]``), whatever ``x`` ``[K]``."""
    return residual(p, q)


def prototype_correction(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """WRONG, kept to show the tests can fail: samples from ``p`` with the rejected ``x`` removed
    instead of from ``norm(max(0, p - q))``, so the output is not distributed as ``p``."""
    idx = x.long().unsqueeze(-1)
    px = p.gather(-1, idx)
    qx = q.gather(-1, idx)
    corrected = p.scatter(-1, idx, (px - torch.minimum(px, qx)).clamp(min=0))
    total = corrected.sum(dim=-1, keepdim=True)
    # with nothing left, the argmax of p
    fallback = torch.zeros_like(p).scatter_(-1, p.argmax(-1, keepdim=True), 1.0)
    return torch.where(total > 0, corrected / total.clamp(min=torch.finfo(p.dtype).tiny), fallback)


def acceptance_probs(
    draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor
) -> torch.Tensor:
    """``min(1, p_i(x_i) / q_i(x_i))`` per draft position ``i`` (``[K]``); finite where
    ``q_i(x_i) = 0``, accepted then iff ``p_i(x_i) > 0``."""
    K = draft_tokens.shape[0]
    idx = draft_tokens.long().view(K, 1)
    p_x = target_probs[:K].gather(-1, idx).squeeze(-1)
    q_x = draft_probs.gather(-1, idx).squeeze(-1)
    ratio = torch.where(
        q_x > 0, p_x / q_x.clamp(min=torch.finfo(q_x.dtype).tiny), (p_x > 0).to(p_x.dtype)
    )
    return ratio.clamp(max=1.0)


def step_distributions(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    correction: Correction = residual_correction,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step's exact numbers ``(accept [K], final [K+1, V])``: ``accept[i]`` the probability of
    accepting draft ``i`` once ``0..i-1`` were, ``final[i]`` the law of the token emitted after
    exactly ``i`` acceptances. :func:`verify` samples from these and ``specdec_lib.research.stats``
    builds exact laws from them, so the exact checks test the code that runs."""
    accept = acceptance_probs(draft_tokens, draft_probs, target_probs)
    K = draft_tokens.shape[0]
    corr = correction(target_probs[:K], draft_probs, draft_tokens)
    final = torch.cat([corr, target_probs[K:]], dim=0)
    return accept, final


class Verdict(NamedTuple):
    """One verification's outcome: ``tokens``, the accepted draft prefix and one corrected or bonus
    token (1-D, ``n_accepted + 1`` long), and ``n_accepted``, the draft tokens accepted."""

    tokens: torch.Tensor
    n_accepted: int


def check_verify_inputs(
    draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor
) -> None:
    """Raises ``ValueError`` unless the shapes and dtypes fit: ``[K]`` integer ids, ``[K, V]`` and
    ``[K+1, V]`` rows. :func:`verify` checks the values at its host read."""
    if draft_tokens.dim() != 1:
        raise ValueError(f"draft_tokens must be 1-D [K], got shape {tuple(draft_tokens.shape)}")
    if draft_tokens.is_floating_point() or draft_tokens.is_complex():
        raise ValueError(
            f"draft_tokens must hold integer token ids, got dtype {draft_tokens.dtype}"
        )
    K = draft_tokens.shape[0]
    if draft_probs.dim() != 2 or draft_probs.shape[0] != K:
        raise ValueError(f"draft_probs must be [K={K}, V], got shape {tuple(draft_probs.shape)}")
    if target_probs.dim() != 2 or target_probs.shape[0] != K + 1:
        raise ValueError(
            f"target_probs must be [K+1={K + 1}, V], got shape {tuple(target_probs.shape)}"
        )
    if draft_probs.shape[1] != target_probs.shape[1]:
        raise ValueError(
            f"draft_probs and target_probs must share the vocabulary size V, got "
            f"{draft_probs.shape[1]} and {target_probs.shape[1]}"
        )


def ids_outside(tokens: torch.Tensor, V: int) -> torch.Tensor:
    """A 0-d bool tensor (no host sync): is any id of ``tokens`` outside ``[0, V)``?"""
    return ((tokens < 0) | (tokens >= V)).any()


def ids_message(name: str, V: int) -> str:
    return f"{name} must be token ids in [0, V = {V}) (the rows' vocabulary size)"


def verify(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    correction: Correction = residual_correction,
) -> Verdict:
    """One step of speculative sampling, the module's rule, vectorised; one host read.

    Args:
        draft_tokens: ``[K]`` the drafts ``x_0..x_{K-1}``.
        draft_probs: ``[K, V]`` the laws ``q_i`` they were drawn from.
        target_probs: ``[K+1, V]`` the target's laws ``p_0..p_K`` (``p_K`` after the last draft).
        generator: source of randomness; the same state gives the same verdict.
        correction: what is sampled after a rejection (see :func:`prototype_correction`).

    Returns a :class:`Verdict`; ids outside ``[0, V)`` or NaN rows raise ``ValueError``.
    """
    draft_tokens = torch.as_tensor(draft_tokens)
    draft_probs = torch.as_tensor(draft_probs)
    target_probs = torch.as_tensor(target_probs)
    check_verify_inputs(draft_tokens, draft_probs, target_probs)
    device = target_probs.device
    V = target_probs.shape[-1]
    draft_tokens = draft_tokens.to(device=device, dtype=torch.long)
    draft_probs = draft_probs.to(device)
    K = draft_tokens.shape[0]
    # compute with clamped ids (out of range, CUDA would assert), refuse at the host read
    bad_ids = ids_outside(draft_tokens, V)
    draft_tokens = draft_tokens.clamp(0, V - 1)

    accept_p, final = step_distributions(draft_tokens, draft_probs, target_probs, correction)
    u = torch.rand(K, generator=generator, device=device, dtype=torch.float64)
    accepted = u < accept_p.double()
    # n = number of leading acceptances = position of the first rejection (or K).
    n_t = (
        torch.cumprod(accepted.long(), dim=0).sum()
        if K
        else torch.zeros((), dtype=torch.long, device=device)
    )
    # Sample the final token from row n only, selected on the device (no extra host sync).
    last = sample(final.index_select(0, n_t.view(1)), generator)
    n, bad, bad_id = torch.stack(
        [n_t, has_nan(draft_probs, target_probs).long(), bad_ids.long()]
    ).tolist()  # the one host read
    if bad_id:
        raise ValueError(ids_message("draft_tokens", V))
    if bad:
        raise ValueError(NAN_MESSAGE)
    return Verdict(tokens=torch.cat([draft_tokens[:n], last]), n_accepted=int(n))
