"""The mathematics of speculative sampling, pure and small: no models, no I/O.

Derived in ``notebooks/01_acceptance_rule.ipynb``. Notation, used everywhere in the series:

* ``p`` the target (verifier) distribution, ``q`` the draft distribution, both over a vocabulary of
  size ``V``;
* ``K`` the number of draft tokens proposed in one step;
* ``alpha`` the acceptance rate ``sum_x min(p(x), q(x)) = 1 - TV(p, q)``.

The rule (Leviathan et al. 2022, arXiv 2211.17192; Chen et al. 2023, arXiv 2302.01318): accept a
draft token ``x ~ q`` with probability ``min(1, p(x) / q(x))``; at the first rejection emit a token
from the residual ``norm(max(0, p - q))``; if all ``K`` are accepted emit one bonus token from
``p_K``. The emitted tokens are then distributed exactly as ``p``.

Every function here works on torch tensors on any device and never synchronises with the host
except :func:`verify`, which reads back one small tensor per call (the number accepted and the last
token).
"""

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
    """Turns logits into the distribution that is actually sampled from.

    The same ``Warp`` is applied to the draft's and the target's logits, so that ``q`` and ``p`` in
    the acceptance rule are exactly the distributions the tokens were (or would be) drawn from.
    Temperature, top-k and top-p go through transformers' own ``LogitsProcessor`` classes, in the
    order ``generate`` applies them (temperature, top-k, top-p).

    ``temperature == 0`` means greedy: the distribution is one-hot on the argmax (the first one on
    ties), the limit of the tempered softmax as T -> 0. Greedy decoding is therefore not a separate
    algorithm: with one-hot ``p`` and ``q`` the acceptance rule accepts exactly when the draft's
    argmax equals the target's and otherwise emits the target's argmax.
    """

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
        """The warp drafts are drawn with at ``scale`` times this temperature, with the same
        top-k and top-p (``SpeculativeDecoder``'s ``draft_temperature_scale``); this warp itself
        at scale 1, and in greedy decoding, whatever the scale."""
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
        # The warpers ignore input_ids; they only need something with a batch dimension. Each is
        # called itself: LogitsProcessorList's call inspects every warper's signature first, which
        # took longer than the temperature's division on a row of the draft's subset.
        for warper in self._processors:
            scores = warper(None, scores)
        return scores.squeeze(0) if squeeze else scores

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """The distribution sampled from: ``[..., V]`` logits -> ``[..., V]`` probabilities (float32).

        A row whose logits hold NaN or +inf (a float16 overflow, say) becomes a row of NaN rather
        than a plausible-looking distribution; :func:`verify` and the decoders detect that at their
        one host read per step and raise, so such a row is never sampled from. No host sync here.
        """
        if self.greedy:
            idx, bad = greedy_tokens(logits)
            probs = torch.zeros(logits.shape, dtype=torch.float32, device=logits.device)
            probs.scatter_(-1, idx.unsqueeze(-1), 1.0)
            return probs.masked_fill_(bad.unsqueeze(-1), float("nan"))  # this call's own tensor
        if not self._processors:  # one kernel: softmax converts to float32 (exactly) as it reads
            return torch.softmax(logits, dim=-1, dtype=torch.float32)
        probs = torch.softmax(self.logits(logits), dim=-1)
        if len(self._processors) <= (self.temperature != 1.0):
            # No truncation: softmax itself makes a row holding NaN or +inf a row of NaN (its
            # maximum is NaN or +inf, so every exp(x - max) is NaN or divided by a NaN sum).
            return probs
        return probs.masked_fill_(bad_rows(logits), float("nan"))  # top-k / top-p may hide it

    def confidence(self, logits: torch.Tensor, probs: torch.Tensor, index: int) -> float:
        """How sure a draft was of the token at ``index`` of a row, as a confidence stop reads it
        (one host read): ``probs[index]``, the warped law it was drawn from; in greedy decoding,
        whose law is one-hot, the softmax of ``logits`` there instead (transformers'
        ``assistant_confidence_threshold`` reads the same: the processed scores, which greedy
        decoding does not warp). Either way it is read from the drafts so far only, so a stop on
        it is a stopping time and decoding stays exact."""
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
    """``warp.probs(logits)`` row by row, each row warped when it is first read (``rows[i]``):
    verification down a tree reads the rows of the root and of the accepted nodes only, not the
    rows of every node."""

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
    """``[..., 1]`` bool (no host sync): does the row hold a NaN or a ``+inf``? Read from the row's
    maximum, which is NaN when the row holds one (``amax`` propagates NaN) and ``+inf`` when it
    holds that: one reduction, where ``(isnan | isposinf).any()`` makes two passes and two
    vocabulary-wide masks."""
    top = logits.amax(dim=-1, keepdim=True)
    return torch.isnan(top) | torch.isposinf(top)


def greedy_tokens(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The argmax of each row (the first maximum, as ``torch.argmax`` takes it) and whether the row
    is bad (NaN or ``+inf``), from one reduction (no host sync): ``torch.max`` over the last
    dimension gives both, where on a CPU ``argmax`` alone costs three times as much. float32
    first: the same index (the conversion is exact), at less cost than bfloat16's reduction."""
    top, idx = logits.float().max(dim=-1)
    return idx, torch.isnan(top) | torch.isposinf(top)


def has_nan(*tensors: torch.Tensor) -> torch.Tensor:
    """A 0-d bool tensor (no host sync): does any of ``tensors`` hold a NaN? (Read from each
    tensor's maximum, which ``amax`` makes NaN when the tensor holds one.)"""
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
    """Draw one token per row of ``probs`` (``[V]`` -> 0-d, ``[R, V]`` -> ``[R]``), by inverse CDF.

    One uniform per row. A token with probability exactly 0 is never returned (the cumulative sum
    does not step there). Rows need not be normalised. No host synchronisation.
    """
    squeeze = probs.dim() == 1
    rows = probs.unsqueeze(0) if squeeze else probs
    cdf = rows.double().cumsum(dim=-1)
    u = torch.rand(rows.shape[0], 1, generator=generator, device=rows.device, dtype=torch.float64)
    idx = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(-1)
    # u * total < total always, so idx < V; clamp guards against a total of 0 (an invalid row).
    idx = idx.clamp_(max=rows.shape[-1] - 1)
    return idx.squeeze(0) if squeeze else idx


def acceptance_rate(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """alpha = sum_x min(p(x), q(x)) = 1 - TV(p, q): the probability that a draft ``x ~ q`` is
    accepted by the rule. Works row-wise on ``[..., V]``."""
    return torch.minimum(p, q).sum(dim=-1)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """r = norm(max(0, p - q)): the distribution sampled after a rejection, row-wise.

    Where ``p == q`` the residual is 0/0; no rejection can happen there (the acceptance
    probability is 1 for every token ``q`` can propose), and ``p`` is returned so that the result
    is always a distribution.
    """
    r = (p - q).clamp(min=0)
    total = r.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, r / total.clamp(min=torch.finfo(r.dtype).tiny), p)


Correction = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def residual_correction(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The correct correction: on rejecting ``x`` at a position, sample from ``residual(p, q)``
    (which does not depend on ``x``). ``p``, ``q`` are ``[K, V]``, ``x`` is ``[K]``."""
    return residual(p, q)


def prototype_correction(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """WRONG, kept to demonstrate that the tests can fail: the original prototype's correction.

    On rejecting ``x`` it samples from ``p`` with ``min(p(x), q(x))`` taken off ``p(x)`` only, i.e.
    (since a rejection needs ``p(x) < q(x)``) from ``p`` with ``x`` removed, instead of from
    ``norm(max(0, p - q))``. The output is then not distributed as ``p``.
    """
    idx = x.long().unsqueeze(-1)
    px = p.gather(-1, idx)
    qx = q.gather(-1, idx)
    corrected = p.scatter(-1, idx, (px - torch.minimum(px, qx)).clamp(min=0))
    total = corrected.sum(dim=-1, keepdim=True)
    # The prototype fell back to the argmax of p when nothing was left.
    fallback = torch.zeros_like(p).scatter_(-1, p.argmax(-1, keepdim=True), 1.0)
    return torch.where(total > 0, corrected / total.clamp(min=torch.finfo(p.dtype).tiny), fallback)


def acceptance_probs(
    draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor
) -> torch.Tensor:
    """``min(1, p_i(x_i) / q_i(x_i))`` for each draft position ``i`` (``[K]``).

    Written as a product to stay finite: a token with ``q_i(x_i) = 0`` (which ``q`` cannot have
    proposed, but a careless caller could pass) is accepted iff ``p_i(x_i) > 0``.
    """
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
    """The two ingredients of one verification step, as exact numbers.

    Returns ``(accept [K], final [K+1, V])``: ``accept[i]`` is the probability of accepting draft
    token ``i`` given that tokens ``0..i-1`` were accepted; ``final[i]`` is the distribution of the
    token emitted after exactly ``i`` acceptances (the correction for ``i < K``, the bonus ``p_K``
    for ``i = K``). :func:`verify` samples from exactly these, and ``specdec_lib.research.stats`` computes
    output laws from them, so the exact checks test the code path that runs.
    """
    accept = acceptance_probs(draft_tokens, draft_probs, target_probs)
    K = draft_tokens.shape[0]
    corr = correction(target_probs[:K], draft_probs, draft_tokens)
    final = torch.cat([corr, target_probs[K:]], dim=0)
    return accept, final


class Verdict(NamedTuple):
    """The outcome of one verification.

    ``tokens``: the accepted draft prefix followed by exactly one corrected (after a rejection) or
    bonus (after ``K`` acceptances) token, a 1-D LongTensor of length ``n_accepted + 1``.
    ``n_accepted``: how many draft tokens were accepted (corrected and bonus tokens never count).
    """

    tokens: torch.Tensor
    n_accepted: int


def check_verify_inputs(
    draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor
) -> None:
    """Shapes and dtypes of one verification: ``[K]`` integer ids, ``[K, V]`` and ``[K+1, V]``
    rows. A ``ValueError`` naming the argument; the values (ids in ``[0, V)``, finite rows) are
    checked by :func:`verify` at its one host read, so that checking costs no extra sync."""
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
    """One step of speculative sampling.

    Args:
        draft_tokens: ``[K]`` the draft tokens ``x_0..x_{K-1}``.
        draft_probs: ``[K, V]`` the distributions ``q_i`` the draft tokens were actually sampled from.
        target_probs: ``[K+1, V]`` the target's distributions ``p_0..p_K`` at the same positions
            (``p_K`` follows the last draft token).
        generator: source of randomness; the same generator state gives the same verdict.
        correction: what to sample from after a rejection. The default is the residual
            ``norm(max(0, p - q))``; anything else is wrong (see :func:`prototype_correction`).

    Accept ``x_i`` with probability ``min(1, p_i(x_i) / q_i(x_i))`` (one uniform per position,
    vectorised); at the first rejection ``i`` emit a token from the correction of position ``i``;
    if all ``K`` are accepted emit a bonus token from ``p_K``. One host read per call.
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
    # Out-of-range ids would index out of bounds (on CUDA, a device-side assert that poisons the
    # process): compute with clamped ids and refuse at the host read below.
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
