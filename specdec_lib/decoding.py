"""Speculative and autoregressive decoding with KV caches, on one sequence.

The algorithm is derived in ``notebooks/01_acceptance_rule.ipynb``; the acceptance rule itself lives
in :mod:`specdec_lib.sampling` and is not repeated here. This module only moves tokens and caches:

* both models keep a KV cache covering every token of the sequence except the last one, so the
  prefix is never re-encoded;
* one speculative step asks the drafter for ``k`` tokens, runs the target once on
  ``[last token, d_1..d_k]`` (``k + 1`` distributions ``p_0..p_k``), calls ``verify`` and crops both
  caches back to the accepted length;
* ``k = min(K, tokens still wanted - 1)``, so exactly ``max_new_tokens`` tokens come out (fewer
  only when EOS is emitted, which ends the output, EOS included).

:class:`AutoregressiveDecoder` is the fair baseline: the same warps, the same sampler, the same cache
handling, one target pass per token.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

from .candidates import (
    best_alternatives,
    chain_tree,
    check_widths,
    more_candidates,
    tree_depths,
    verify_candidates,
    verify_tree,
)
from .checks import non_negative_int, positive_int
from .lm import (
    capture_features,
    context_length,
    last_rows,
    model_device,
    model_forward,
    synchronize,
    vocab_size,
)
from .sampling import NAN_MESSAGE, Verdict, Warp, bad_rows, has_nan, sample, verify

__all__ = [
    "AutoregressiveDecoder",
    "BaseDrafter",
    "Drafter",
    "GenerationResult",
    "ModelDrafter",
    "SpeculativeDecoder",
    "StepRecord",
    "TargetState",
    "as_drafter",
]


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass
class StepRecord:
    """One decoding step: what was drafted, which drafts were accepted, what was emitted."""

    draft_tokens: list[int]
    # acceptance mask over draft_tokens (False from the first rejection on); with several
    # candidates for the first position (width > 1), position 0 is True when any was accepted
    accepted: list[bool]
    emitted: list[int]  # accepted prefix + one corrected or bonus token (cut at EOS)
    draft_ms: float
    verify_ms: float
    alternatives: list[int] = field(default_factory=list)  # the other candidates (width or tree)
    branch: int = 0  # j >= 1: alternative j was accepted; -1: every candidate rejected
    alt_depths: list[int] = field(default_factory=list)  # a tree's: each alternative's depth

    @property
    def alt_index(self) -> int:
        """Which alternative was accepted, counted within its depth (``1`` for the first one
        tried after the chain's token), or ``0`` when none was."""
        if self.branch < 1:
            return 0
        if not self.alt_depths:  # width: every alternative sits at the first position
            return self.branch
        depth = self.alt_depths[self.branch - 1]
        return self.branch - sum(1 for d in self.alt_depths if d < depth)

    @property
    def n_accepted(self) -> int:
        return sum(self.accepted)

    @property
    def bonus(self) -> bool:
        """True when every draft token was accepted and the last emitted token is the bonus."""
        return len(self.accepted) == self.n_accepted


@dataclass
class GenerationResult:
    """What a decoder produced for one prompt.

    ``tokens`` holds the new tokens only. ``n_accepted`` counts accepted draft tokens, never the
    corrected or bonus tokens, so ``alpha = n_accepted / n_proposed`` is the acceptance rate of the
    theory (and is in [0, 1]).
    """

    tokens: list[int]
    n_steps: int
    n_proposed: int
    n_accepted: int
    steps: list[StepRecord] = field(default_factory=list)
    prompt_length: int = 0
    elapsed_s: float = 0.0
    eos_reached: bool = False
    seed: int | None = None
    text: str | None = None

    @property
    def alpha(self) -> float:
        """Accepted / proposed draft tokens (NaN when nothing was proposed)."""
        return self.n_accepted / self.n_proposed if self.n_proposed else float("nan")

    @property
    def tau(self) -> float:
        """Mean tokens emitted per step (per target pass)."""
        return len(self.tokens) / self.n_steps if self.n_steps else float("nan")

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.elapsed_s if self.elapsed_s > 0 else float("nan")


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _make_generator(device: torch.device, seed: int | None) -> tuple[torch.Generator, int]:
    seed = non_negative_int(seed, "seed", optional=True)
    if seed is None:
        seed = int(torch.randint(0, 2**62, (1,)).item())
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen, seed


def _prepare_prompt(
    input_ids: Any, max_new_tokens: Any, vocab: int | None, context: int | None, device
) -> torch.Tensor:
    non_negative_int(max_new_tokens, "max_new_tokens")
    ids = torch.as_tensor(input_ids)
    if ids.dim() == 2:
        if ids.shape[0] != 1:
            raise ValueError(
                f"input_ids must hold one sequence ([1, n] or [n]); got a batch of {ids.shape[0]}. "
                "Decode the sequences one at a time."
            )
        ids = ids[0]
    if ids.dim() != 1:
        raise ValueError(f"input_ids must be [1, n] or [n], got shape {tuple(ids.shape)}")
    if ids.numel() == 0:
        raise ValueError("input_ids is empty: the prompt needs at least one token")
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise ValueError(f"input_ids must hold integer token ids, got dtype {ids.dtype}")
    if vocab is not None and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        raise ValueError(
            f"input_ids must be token ids in [0, {vocab}), got min {int(ids.min())} max {int(ids.max())}"
        )
    if context is not None and ids.numel() + max_new_tokens > context:
        raise ValueError(
            f"prompt ({ids.numel()} tokens) + max_new_tokens ({max_new_tokens}) = "
            f"{ids.numel() + max_new_tokens} exceeds the target's context length "
            f"(max_position_embeddings = {context})"
        )
    return ids.to(device=device, dtype=torch.long)


def _eos_set(eos_token_id: Any) -> frozenset[int]:
    if eos_token_id is None:
        return frozenset()
    if isinstance(eos_token_id, int) and not isinstance(eos_token_id, bool):
        return frozenset([eos_token_id])
    if isinstance(eos_token_id, Sequence) and all(isinstance(t, int) for t in eos_token_id):
        return frozenset(eos_token_id)
    raise ValueError(f"eos_token_id must be an int, a list of ints or None, got {eos_token_id!r}")


def _cut_at_eos(tokens: list[int], eos: frozenset[int]) -> tuple[list[int], bool]:
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1], True
    return tokens, False


class TargetState:
    """A model and its KV cache, which covers the first ``length`` tokens of the sequence.

    ``forward(seq, n)`` runs the model on the tokens of ``seq`` not yet in the cache and returns
    the logits of its last ``n`` positions. With ``use_cache=False`` every pass re-encodes the
    whole sequence instead (slow; the reference that tests the cache logic).
    :meth:`for_drafter` wires the target's hidden states to a drafter that reads them.
    """

    @classmethod
    def for_drafter(cls, target: Any, drafter: Drafter, use_cache: bool = True) -> TargetState:
        """The target's state, handing its hidden states to ``drafter.observe`` after every pass
        when the drafter reads them (``drafter.feature_layers`` is not ``None``)."""
        if drafter.feature_layers is None:
            return cls(target, use_cache)
        return cls(
            target, use_cache, feature_sink=drafter.observe, feature_layers=drafter.feature_layers
        )

    def __init__(
        self,
        model: Any,
        use_cache: bool = True,
        feature_sink: Any = None,
        feature_layers: Sequence[int] = (-1,),
    ) -> None:
        self.model = model
        self.use_cache = use_cache
        self.cache: Any = None
        self.length = 0
        # feature_sink(start, features [m, F]) receives the target's hidden states (the outputs of
        # feature_layers, concatenated) for positions start..start+m-1 of every pass:
        # feature-level drafters read them.
        self.feature_sink = feature_sink
        self.feature_layers = tuple(feature_layers)
        self._alt_feats: torch.Tensor | None = None
        self._tree: tuple[int, int, Any] | None = None  # (start, nodes, features) until keep

    def forward(self, seq: torch.Tensor, n_logits: int) -> torch.Tensor:
        start = self.length if self.use_cache else 0
        if self.feature_sink is None:
            return self._forward(seq, n_logits)
        with capture_features(self.model, self.feature_layers) as captured:
            logits = self._forward(seq, n_logits)
        self.feature_sink(start, captured[-1][0])
        return logits

    def _forward(self, seq: torch.Tensor, n_logits: int) -> torch.Tensor:
        if not self.use_cache:
            logits, _ = model_forward(self.model, seq, None, n_logits)
            return logits
        logits, self.cache = model_forward(self.model, seq[self.length :], self.cache, n_logits)
        self.length = seq.numel()
        return logits

    def _feature_hooks(self) -> Any:
        """Capture the feature layers' outputs of the passes inside, when a drafter reads them."""
        if self.feature_sink is None:
            return contextlib.nullcontext([])
        return capture_features(self.model, self.feature_layers)

    @staticmethod
    def _causal_rows(past: int, n_new: int, n_keys: int, device: Any) -> torch.Tensor:
        """``[n_new, n_keys]``: the new tokens at positions ``past..past+n_new-1`` each see the
        keys up to their own position (keys after the sequence, such as drafts beside it, never)."""
        keys = torch.arange(n_keys, device=device)
        return keys.view(1, -1) <= (past + torch.arange(n_new, device=device)).view(-1, 1)

    def _move_into_place(self, src: Sequence[int], base: int) -> None:
        """Cache entries ``src`` become positions ``base, base + 1, ...``; everything after them is
        dropped."""
        src_t = torch.tensor(list(src), dtype=torch.long)
        dst = base + torch.arange(len(src_t))
        for layer in self.cache.layers:
            layer.keys[..., dst, :] = layer.keys[..., src_t, :]
            layer.values[..., dst, :] = layer.values[..., src_t, :]
        held = self.cache.get_seq_length()
        if held > base + len(src_t):
            self.cache.crop(base + len(src_t) - held)  # transformers 5: a negative count removes
        self.length = base + len(src_t)

    def forward_with_alternatives(
        self, seq: torch.Tensor, n_logits: int, alts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward`, plus ``alts`` ``[m]``: other candidates for the token at position
        ``p = len(seq) - n_logits + 1`` (the first draft), in the same pass. Each alternative sits
        at position ``p`` and sees the tokens before ``p`` only, not the chain or the others.

        Returns the chain's logits ``[n_logits, V]`` and the logits after each alternative
        ``[m, V]``. The alternatives' cache entries (after the chain's) and features wait until
        :meth:`promote` keeps one or :meth:`rollback` drops them."""
        m, pos = alts.numel(), seq.numel() - n_logits + 1
        start = self.length if self.use_cache else 0
        with self._feature_hooks() as captured:
            if self.use_cache:
                new = seq[self.length :]
                n_new, past = new.numel(), self.length
                keys = torch.arange(past + n_new + m, device=seq.device)
                chain_rows = self._causal_rows(past, n_new, past + n_new + m, seq.device)
                own = past + n_new + torch.arange(m, device=seq.device)
                alt_rows = (keys.view(1, -1) < pos) | (keys.view(1, -1) == own.view(-1, 1))
                mask = torch.cat([chain_rows, alt_rows]).view(1, 1, n_new + m, -1)
                positions = torch.cat(
                    [
                        torch.arange(past, past + n_new, device=seq.device),
                        torch.full((m,), pos, device=seq.device),
                    ]
                )
                out = self.model(
                    input_ids=torch.cat([new, alts.to(seq.device)]).view(1, -1),
                    attention_mask=mask,
                    position_ids=positions.view(1, -1),
                    cache=self.cache,
                    use_cache=True,
                    logits_to_keep=last_rows(n_logits + m, n_new + m, seq.device),
                )
                self.cache, logits = out.cache, out.logits[0]
                self.length = seq.numel()
                chain_logits, alt_logits = logits[:n_logits], logits[n_logits:]
                feats = captured[-1][0] if captured else None
                chain_feats = feats[:n_new] if feats is not None else None
                self._alt_feats = feats[n_new:] if feats is not None else None
            else:  # the reference: every candidate re-encoded on its own
                chain_logits, _ = model_forward(self.model, seq, None, n_logits)
                chain_feats = captured[-1][0] if captured else None
                alt_logits, alt_feats = [], []
                for a in alts.view(-1, 1):
                    lg, _ = model_forward(self.model, torch.cat([seq[:pos], a]), None, 1)
                    alt_logits.append(lg[-1])
                    if captured:
                        alt_feats.append(captured[-1][0][-1])
                alt_logits = torch.stack(alt_logits)
                self._alt_feats = torch.stack(alt_feats) if alt_feats else None
        if self.feature_sink is not None:
            self.feature_sink(start, chain_feats)
        return chain_logits, alt_logits

    def forward_tree(
        self, seq: torch.Tensor, tokens: torch.Tensor, parents: Sequence[int]
    ) -> torch.Tensor:
        """One pass over the tokens of ``seq`` not yet in the cache and a draft tree after it
        (``tokens`` ``[N]``, ``parents`` as in :func:`~specdec_lib.candidates.verify_tree`): node
        ``i`` sits at the position of its depth after ``seq`` and sees ``seq`` and its ancestors
        only (a tree attention mask).

        Returns the logits after the last token of ``seq`` and after each node, ``[N + 1, V]``.
        The nodes' cache entries and features wait until :meth:`keep` keeps a path."""
        N = tokens.numel()
        depth = torch.tensor(tree_depths(parents), dtype=torch.long, device=seq.device)
        with self._feature_hooks() as captured:
            if self.use_cache:
                new = seq[self.length :]
                n_new, past = new.numel(), self.length
                # node i sees node j when j is i or one of its ancestors
                sees = torch.eye(N, dtype=torch.bool, device=seq.device)
                for i, j in enumerate(parents):
                    if j >= 0:
                        sees[i] |= sees[j]
                prefix_rows = self._causal_rows(past, n_new, past + n_new + N, seq.device)
                node_rows = torch.cat([sees.new_ones((N, past + n_new)), sees], dim=1)
                mask = torch.cat([prefix_rows, node_rows])
                positions = torch.cat(
                    [torch.arange(past, past + n_new, device=seq.device), past + n_new - 1 + depth]
                )
                out = self.model(
                    input_ids=torch.cat([new, tokens.to(seq.device)]).view(1, -1),
                    attention_mask=mask.view(1, 1, n_new + N, -1),
                    position_ids=positions.view(1, -1),
                    cache=self.cache,
                    use_cache=True,
                    logits_to_keep=last_rows(N + 1, n_new + N, seq.device),
                )
                self.cache, logits = out.cache, out.logits[0]
                self.length = past + n_new
                self._tree = (past, N, captured[-1][0] if captured else None)
            else:  # the reference: the sequence, and each node's path, re-encoded on their own
                rows, feats, paths = [], [], []
                for i, j in enumerate(parents):
                    paths.append((paths[j] if j >= 0 else []) + [i])
                for path in [[]] + paths:
                    lg, _ = model_forward(self.model, torch.cat([seq, tokens[path]]), None, 1)
                    rows.append(lg[-1])
                    if captured:
                        feats.append(captured[-1][0])
                logits = torch.stack(rows)
                self._tree = (0, N, feats if captured else None)
        return logits

    def keep(self, path: Sequence[int]) -> None:
        """Keep the nodes ``path`` (root to leaf) of the last :meth:`forward_tree` as the tokens
        after the sequence: their cache entries move into place, the other nodes' are dropped,
        and a feature-reading drafter is handed the features of the new and the kept positions."""
        path = list(path)
        start, n_nodes, feats = self._tree
        if self.use_cache:
            self._move_into_place([self.length + i for i in path], self.length)
            if feats is not None:
                n_new = feats.shape[0] - n_nodes
                feats = torch.cat([feats[:n_new], feats[n_new:][path]])
        elif feats is not None:  # the reference re-encoded each path: take the kept one's pass
            feats = feats[path[-1] + 1 if path else 0]
        if self.feature_sink is not None:
            self.feature_sink(start, feats)
        self._tree = None

    def promote(self, j: int, pos: int) -> None:
        """Keep alternative ``j`` of the last :meth:`forward_with_alternatives` as the token at
        position ``pos``; everything after ``pos`` is dropped."""
        if self.use_cache:
            self._move_into_place([self.length + j], pos)
        if self.feature_sink is not None:
            self.feature_sink(pos, self._alt_feats[j : j + 1])
        self._alt_feats = None

    def rollback(self, n_valid: int) -> None:
        if self.use_cache and self.cache is not None:
            held = self.cache.get_seq_length()  # the chain, and any alternatives after it
            if held > n_valid:
                self.cache.crop(n_valid - held)  # transformers 5: a negative count removes
            self.length = min(self.length, n_valid)
        self._alt_feats = None
        self._tree = None


# --------------------------------------------------------------------------------------------
# Drafters
# --------------------------------------------------------------------------------------------


@runtime_checkable
class Drafter(Protocol):
    """Everything :class:`SpeculativeDecoder` asks of a draft. Subclass :class:`BaseDrafter`,
    which supplies the defaults, and write :meth:`propose` (and what your draft needs of the rest).

    ``propose(ids, k, warp, generator, threshold=None)`` gets the whole sequence so far (``[L]``,
    on the target's device) and returns up to ``k`` draft tokens ``[k']`` (``k' <= k``: a drafter
    may stop early, or return none) with the distributions they were sampled from ``[k', V]``
    (warped by ``warp``; a deterministic drafter returns one-hot rows). With a ``threshold`` it
    stops after a draft ``x`` with ``q(x) < threshold``. Whether to go on drafting may depend on
    the drafts so far (a stopping time): the output law is still exactly the target's.
    ``rollback(n)`` says that only the first ``n`` tokens of ``ids + drafts`` are still valid;
    ``reset()`` starts a new sequence. Anything honouring this is exact, however poor its guesses.

    ``feature_layers``: ``None``, or the target's decoder layers whose outputs the drafter reads;
    then ``observe(start, features)`` gets, after every target pass, the target's hidden states
    ``[m, F]`` (those layers' outputs, concatenated) for positions ``start..start+m-1``, the
    rejected drafts' positions included (``rollback`` follows). ``first_scores``: the logits of
    the first position of the last proposal over the whole vocabulary, or ``None``; greedy
    decoding with ``width > 1`` ranks the alternatives by them; ``draft_scores`` (``[k', V]`` or
    ``None``) are the same for every position of the last proposal (greedy trees rank by them).
    ``vocab_size`` and ``device``
    (either may be ``None``) let the decoder refuse a draft that does not fit the target.
    """

    vocab_size: int | None
    device: torch.device | None
    feature_layers: tuple[int, ...] | None
    first_scores: torch.Tensor | None
    draft_scores: torch.Tensor | None

    def reset(self) -> None: ...

    def propose(
        self,
        ids: torch.Tensor,
        k: int,
        warp: Warp,
        generator: torch.Generator | None,
        threshold: float | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def rollback(self, n_valid: int) -> None: ...

    def observe(self, start: int, features: torch.Tensor) -> None: ...


class BaseDrafter:
    """The defaults of the :class:`Drafter` protocol: no vocabulary or device to check, no target
    features, no draft scores, nothing to reset or roll back."""

    vocab_size: int | None = None
    device: torch.device | None = None
    feature_layers: tuple[int, ...] | None = None
    first_scores: torch.Tensor | None = None
    draft_scores: torch.Tensor | None = None

    def reset(self) -> None:
        pass

    def propose(
        self,
        ids: torch.Tensor,
        k: int,
        warp: Warp,
        generator: torch.Generator | None,
        threshold: float | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def rollback(self, n_valid: int) -> None:
        pass

    def observe(self, start: int, features: torch.Tensor) -> None:
        raise ValueError(f"{type(self).__name__} reads no target features (feature_layers is None)")


class ModelDrafter(BaseDrafter):
    """Drafts with any causal LM over the target's vocabulary, keeping its own KV cache."""

    def __init__(self, model: Any, *, use_cache: bool = True) -> None:
        self.model = model
        self.use_cache = use_cache
        self.vocab_size = vocab_size(model)
        self._state = TargetState(model, use_cache)

    @property
    def device(self) -> torch.device | None:
        return model_device(self.model)

    def reset(self) -> None:
        self._state = TargetState(self.model, self.use_cache)

    def propose(
        self,
        ids: torch.Tensor,
        k: int,
        warp: Warp,
        generator: torch.Generator | None,
        threshold: float | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if k < 1:
            return ids.new_empty(0), torch.empty(0, self.vocab_size or 0, device=ids.device)
        tokens, probs, scores = [], [], []
        seq = ids
        for i in range(k):
            logits = self._state.forward(seq, 1)[-1]
            if i == 0:
                self.first_scores = logits
            scores.append(logits)
            q = warp.probs(logits)
            x = sample(q, generator)
            tokens.append(x)
            probs.append(q)
            # Decided on the drafts so far only (a stopping time), so the output law stays exact.
            if threshold is not None and float(q[x]) < threshold:
                break
            if i + 1 < k:  # the last draft token is fed at the next step, if it survives
                seq = torch.cat([seq, x.view(1)])
        self.draft_scores = torch.stack(scores)
        return torch.stack(tokens), torch.stack(probs)

    def rollback(self, n_valid: int) -> None:
        self._state.rollback(n_valid)


def _check_proposal(tokens: Any, probs: Any, k: int) -> int:
    """The number of drafts a drafter returned (at most ``k``: a dynamic drafter may stop early)."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 1 or tokens.numel() > k:
        shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(
            f"a drafter must return at most k = {k} draft tokens as a 1-D tensor, got {shape}"
        )
    n = tokens.numel()
    if n and (not isinstance(probs, torch.Tensor) or probs.dim() != 2 or probs.shape[0] != n):
        shape = tuple(probs.shape) if isinstance(probs, torch.Tensor) else type(probs).__name__
        raise ValueError(
            f"a drafter must return one distribution row per draft token ([{n}, V]), got {shape}"
        )
    return n


def as_drafter(draft: Any, use_cache: bool = True) -> Drafter:
    """``draft`` as a :class:`Drafter`: a causal LM is wrapped in :class:`ModelDrafter`."""
    if isinstance(draft, torch.nn.Module):
        return ModelDrafter(draft, use_cache=use_cache)
    if isinstance(draft, Drafter):
        return draft
    raise ValueError(
        "draft must be a causal LM (torch.nn.Module returning .logits) or a Drafter (subclass "
        f"specdec_lib.decoding.BaseDrafter and write propose), got {type(draft).__name__}"
    )


# --------------------------------------------------------------------------------------------
# Decoders
# --------------------------------------------------------------------------------------------


class _DecoderBase:
    def __init__(self, target, temperature, top_k, top_p, seed, tokenizer) -> None:
        if not isinstance(target, torch.nn.Module):
            raise ValueError(
                f"target must be a causal LM (torch.nn.Module), got {type(target).__name__}"
            )
        self.target = target
        self.warp = Warp(temperature=temperature, top_k=top_k, top_p=top_p)
        self.tokenizer = tokenizer
        self.device = model_device(target) or torch.device("cpu")
        self.generator, self.seed = _make_generator(self.device, seed)

    def reseed(self, seed: int) -> None:
        self.generator, self.seed = _make_generator(self.device, seed)

    def _encode(self, prompt: str) -> torch.Tensor:
        if self.tokenizer is None:
            raise ValueError(
                "generate(prompt) needs a tokenizer; pass tokenizer= or use generate_ids"
            )
        if not isinstance(prompt, str) or not prompt:
            raise ValueError(f"prompt must be a non-empty string, got {prompt!r}")
        ids = self.tokenizer(prompt, return_tensors="pt").input_ids
        if ids.numel() == 0:
            raise ValueError(f"prompt {prompt!r} encodes to no tokens")
        return ids

    def generate(
        self,
        prompt: str,
        max_new_tokens: int = 50,
        eos_token_id: int | Sequence[int] | None = None,
        *,
        stop_at_eos: bool = True,
        seed: int | None = None,
    ) -> GenerationResult:
        """Encode ``prompt`` with the tokenizer, generate, and decode the new tokens into ``.text``.

        EOS defaults to the tokenizer's; pass ``stop_at_eos=False`` for a fixed-length output.
        """
        ids = self._encode(prompt)
        if eos_token_id is None and stop_at_eos:
            eos_token_id = self.tokenizer.eos_token_id
        result = self.generate_ids(
            ids, max_new_tokens, eos_token_id if stop_at_eos else None, seed=seed
        )
        result.text = self.tokenizer.decode(result.tokens, skip_special_tokens=True)
        return result

    def _start(self, input_ids, max_new_tokens, seed) -> torch.Tensor:
        ids = _prepare_prompt(
            input_ids,
            max_new_tokens,
            vocab_size(self.target),
            context_length(self.target),
            self.device,
        )
        if seed is not None:
            self.reseed(seed)
        return ids


class SpeculativeDecoder(_DecoderBase):
    """Speculative sampling (Leviathan et al. 2022; Chen et al. 2023) on one sequence.

    Args:
        draft: a causal LM over the target's vocabulary, or any :class:`Drafter`.
        target: the causal LM whose distribution the output follows, exactly.
        K: draft tokens per step (clamped near the end of the output).
        temperature, top_k, top_p: the warps, applied identically to draft and target;
            ``temperature=0`` is greedy.
        seed: seeds the decoder's generator; the same seed gives the same tokens.
        tokenizer: optional, for :meth:`generate`.
        verifier: the verification function (default :func:`specdec_lib.sampling.verify`); the
            notebooks plug in a deliberately wrong one to show that the tests catch it.
        width: candidates for the first draft position (default 1). With ``width > 1`` the
            decoder adds up to ``width - 1`` alternatives to the drafter's first token (drawn from
            its ``q`` without replacement; under greedy decoding, the draft's next-best tokens when
            the drafter exposes ``first_scores``), checks them all in the same target pass, and
            tries them in turn (:func:`specdec_lib.sampling.verify_candidates`). Still exact.
        tree: candidates at each draft depth, e.g. ``(2, 2, 1)``: a draft tree along the chain,
            with ``tree[d] - 1`` alternatives beside the chain's token at depth ``d + 1`` (drawn
            from the draft's ``q`` there without replacement; under greedy decoding, its next-best
            tokens when the drafter exposes ``draft_scores``), all checked in one target pass with
            a tree attention mask and verified by recursive rejection at every node
            (:func:`specdec_lib.candidates.verify_tree`). Still exact. ``None`` (default): the
            chain, with ``width`` candidates at the first position.
        use_cache: keep KV caches (default). ``False`` re-encodes the sequence at every pass: the
            same tokens for the same seed, much slower; a reference for tests.

    ``target_state`` (a class attribute) is the target's cache bookkeeping; a subclass may swap it
    (:mod:`specdec_lib.faults` does, to show that the tests catch a bookkeeping bug).
    """

    target_state: type[TargetState] = TargetState

    def __init__(
        self,
        draft: Any,
        target: Any,
        *,
        K: int = 5,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        tokenizer: Any = None,
        verifier: Callable[..., Verdict] = verify,
        use_cache: bool = True,
        width: int = 1,
        tree: Sequence[int] | None = None,
    ) -> None:
        self.K = positive_int(K, "K", "draft tokens per step")
        self.width = positive_int(width, "width", "candidates for the first draft position")
        self.tree = check_widths(tree)
        if self.tree is not None and self.width > 1:
            raise ValueError(
                f"give either width (candidates at the first position) or tree (candidates at "
                f"each depth), got width={self.width} and tree={tree}"
            )
        if (self.width > 1 or self.tree is not None) and verifier is not verify:
            raise ValueError(
                "width > 1 and tree verify by recursive rejection: leave verifier unset"
            )
        super().__init__(target, temperature, top_k, top_p, seed, tokenizer)
        self.use_cache = bool(use_cache)
        self.drafter = as_drafter(draft, self.use_cache)
        d_dev = self.drafter.device
        if d_dev is not None and d_dev != self.device:
            raise ValueError(
                f"draft is on {d_dev} but target is on {self.device}: put both models on the same "
                "device (e.g. draft.to(target.device))"
            )
        v_d, v_t = self.drafter.vocab_size, vocab_size(target)
        if v_d is not None and v_t is not None and v_d != v_t:
            raise ValueError(
                f"draft and target must share a vocabulary: draft vocab_size={v_d}, target vocab_size={v_t}"
            )
        self.verifier = verifier

    @torch.inference_mode()
    def generate_ids(
        self,
        input_ids: Any,
        max_new_tokens: int = 50,
        eos_token_id: int | Sequence[int] | None = None,
        *,
        seed: int | None = None,
    ) -> GenerationResult:
        """Generate up to ``max_new_tokens`` tokens after ``input_ids`` (``[1, n]`` or ``[n]``)."""
        ids = self._start(input_ids, max_new_tokens, seed)
        eos = _eos_set(eos_token_id)
        prompt_len = ids.numel()
        target = self.target_state.for_drafter(self.target, self.drafter, self.use_cache)
        self.drafter.reset()
        out: list[int] = []
        steps: list[StepRecord] = []
        eos_reached = False
        t_start = time.perf_counter()
        while len(out) < max_new_tokens and not eos_reached:
            step, new = self._step(target, ids, min(self.K, max_new_tokens - len(out) - 1))
            ids = torch.cat([ids, new])
            step.emitted, eos_reached = _cut_at_eos(step.emitted, eos)
            out.extend(step.emitted)
            steps.append(step)
        return GenerationResult(
            tokens=out,
            n_steps=len(steps),
            n_proposed=sum(len(st.draft_tokens) for st in steps),
            n_accepted=sum(st.n_accepted for st in steps),
            steps=steps,
            prompt_length=prompt_len,
            elapsed_s=time.perf_counter() - t_start,
            eos_reached=eos_reached,
            seed=self.seed,
        )

    def _step(
        self, target: TargetState, ids: torch.Tensor, k: int
    ) -> tuple[StepRecord, torch.Tensor]:
        """One step: draft up to ``k`` tokens, verify them in one target pass, roll both states
        back to what was kept. Returns the step's record and the tokens it emitted."""
        length = ids.numel()
        t0 = time.perf_counter()
        d_tokens, d_probs = None, None
        if k > 0:
            d_tokens, d_probs = self.drafter.propose(ids, k, self.warp, self.generator)
            synchronize(self.device)
            k = _check_proposal(d_tokens, d_probs, k)
        if k == 0:  # nothing to draft, or a drafter that declined to guess
            d_tokens = torch.empty(0, dtype=torch.long, device=self.device)
            d_probs = None
        if k > 0 and self.tree is not None:
            return self._tree_step(target, ids, d_tokens, d_probs, t0)
        alts = self._alternatives(d_tokens, d_probs) if k > 0 and self.width > 1 else None
        t1 = time.perf_counter()
        if alts is None:
            verdict, branch = self._verify_chain(target, ids, d_tokens, d_probs), 0
        else:
            verdict, branch = self._verify_with_alternatives(target, ids, d_tokens, d_probs, alts)
        t2 = time.perf_counter()
        n = verdict.n_accepted
        if branch >= 1:
            # An alternative took the first draft's place: the drafter's state is valid up to it
            # (a feature drafter is then handed the alternative's features by promote).
            self.drafter.rollback(length)
            target.promote(branch - 1, length)
        else:
            target.rollback(length + n)
            self.drafter.rollback(length + n)
        record = StepRecord(
            draft_tokens=d_tokens.tolist(),
            accepted=[i < n for i in range(k)],
            emitted=verdict.tokens.tolist(),
            draft_ms=(t1 - t0) * 1e3,
            verify_ms=(t2 - t1) * 1e3,
            alternatives=alts[0].tolist() if alts is not None else [],
            branch=branch,
        )
        return record, verdict.tokens.to(ids.device)

    def _tree_step(
        self,
        target: TargetState,
        ids: torch.Tensor,
        d_tokens: torch.Tensor,
        d_probs: torch.Tensor,
        t0: float,
    ) -> tuple[StepRecord, torch.Tensor]:
        """A step with a draft tree: the chain and its alternatives at every depth in one target
        pass (a tree mask), recursive rejection down the tree, the kept path promoted."""
        length, k = ids.numel(), d_tokens.numel()
        scores = self.drafter.draft_scores if self.warp.greedy else None
        if self.warp.greedy and scores is None:  # no ranking: no greedy alternatives
            tokens, parents, laws = d_tokens, list(range(-1, k - 1)), d_probs
        else:
            tokens, parents, laws = chain_tree(d_tokens, d_probs, self.tree, self.generator, scores)
        t1 = time.perf_counter()
        p = self.warp.probs(target.forward_tree(ids, tokens, parents))
        verdict, path = verify_tree(tokens, parents, laws, p, self.generator)
        t2 = time.perf_counter()
        n = verdict.n_accepted
        on_chain = sum(1 for i, node in enumerate(path) if node == i)  # chain nodes kept
        # The drafter's state is valid along the chain's kept part; a feature drafter is then
        # handed the features of the kept path (an alternative's included) by keep.
        self.drafter.rollback(length + on_chain)
        target.keep(path)
        branch = path[-1] - k + 1 if path and path[-1] >= k else (0 if n else -1)
        record = StepRecord(
            draft_tokens=d_tokens.tolist(),
            accepted=[i < n for i in range(k)],
            emitted=verdict.tokens.tolist(),
            draft_ms=(t1 - t0) * 1e3,
            verify_ms=(t2 - t1) * 1e3,
            alternatives=tokens[k:].tolist(),
            branch=branch,
            alt_depths=[parents[i] + 2 for i in range(k, tokens.numel())],
        )
        return record, verdict.tokens.to(ids.device)

    def _verify_chain(
        self,
        target: TargetState,
        ids: torch.Tensor,
        d_tokens: torch.Tensor,
        d_probs: torch.Tensor | None,
    ) -> Verdict:
        """The plain step: one target pass over ``[last token, drafts]``, then the rule."""
        k = d_tokens.numel()
        p = self.warp.probs(target.forward(torch.cat([ids, d_tokens]), k + 1))
        if d_probs is None:
            d_probs = p.new_empty((0, p.shape[-1]))
        return self.verifier(d_tokens, d_probs, p, self.generator)

    def _verify_with_alternatives(
        self,
        target: TargetState,
        ids: torch.Tensor,
        d_tokens: torch.Tensor,
        d_probs: torch.Tensor,
        alts: tuple[torch.Tensor, torch.Tensor],
    ) -> tuple[Verdict, int]:
        """The chain and the first position's alternatives in one target pass (a tree mask),
        then recursive rejection over the candidates."""
        k = d_tokens.numel()
        chain, after_alts = target.forward_with_alternatives(
            torch.cat([ids, d_tokens]), k + 1, alts[0]
        )
        p = self.warp.probs(torch.cat([chain, after_alts]))  # one warp for all rows
        return verify_candidates(
            d_tokens, d_probs, p[: k + 1], alts[0], alts[1], p[k + 1 :], self.generator
        )

    def _alternatives(
        self, d_tokens: torch.Tensor, d_probs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Up to ``width - 1`` more candidates for the first draft position and the laws they
        were drawn from, or ``None`` when there are none."""
        n_more = self.width - 1
        if not self.warp.greedy:
            alts, laws = more_candidates(d_probs[0], d_tokens[0], n_more, self.generator)
        else:  # point masses on the draft's next-best tokens
            scores = self.drafter.first_scores
            if scores is None:
                return None
            alts, laws = best_alternatives(scores, d_tokens[0], n_more)
        return (alts, laws) if alts.numel() else None


class AutoregressiveDecoder(_DecoderBase):
    """The fair baseline: the target alone, one pass per token, with the same warps, the same
    sampler and the same KV-cache handling as :class:`SpeculativeDecoder`."""

    def __init__(
        self,
        target: Any,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        tokenizer: Any = None,
        use_cache: bool = True,
        argmax: bool = True,
    ) -> None:
        super().__init__(target, temperature, top_k, top_p, seed, tokenizer)
        self.use_cache = bool(use_cache)
        # False: greedy decoding draws by inverse CDF from the one-hot row, like any warp (the
        # same tokens, a little slower): kept to measure what taking the argmax saves.
        self.argmax = bool(argmax)

    @torch.inference_mode()
    def generate_ids(
        self,
        input_ids: Any,
        max_new_tokens: int = 50,
        eos_token_id: int | Sequence[int] | None = None,
        *,
        seed: int | None = None,
    ) -> GenerationResult:
        """Generate up to ``max_new_tokens`` tokens after ``input_ids`` (``[1, n]`` or ``[n]``)."""
        ids = self._start(input_ids, max_new_tokens, seed)
        eos = _eos_set(eos_token_id)
        prompt_len = ids.numel()
        target = TargetState(self.target, self.use_cache)
        out: list[int] = []
        steps: list[StepRecord] = []
        eos_reached = False
        t_start = time.perf_counter()
        while len(out) < max_new_tokens and not eos_reached:
            t0 = time.perf_counter()
            logits = target.forward(ids, 1)
            if self.warp.greedy and self.argmax:  # not an inverse-CDF draw from a one-hot row
                x = logits.float().argmax(dim=-1).view(1)  # as Warp.probs takes it
                bad_row = bad_rows(logits).any()
            else:
                p = self.warp.probs(logits)
                x = sample(p, self.generator)  # [1]
                bad_row = has_nan(p)
            token, bad = torch.cat([x, bad_row.long().view(1)]).tolist()  # one host read
            if bad:
                raise ValueError(NAN_MESSAGE)
            ids = torch.cat([ids, x])
            eos_reached = token in eos
            out.append(token)
            steps.append(StepRecord([], [], [token], 0.0, (time.perf_counter() - t0) * 1e3))
        return GenerationResult(
            tokens=out,
            n_steps=len(steps),
            n_proposed=0,
            n_accepted=0,
            steps=steps,
            prompt_length=prompt_len,
            elapsed_s=time.perf_counter() - t_start,
            eos_reached=eos_reached,
            seed=self.seed,
        )
