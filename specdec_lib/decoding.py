"""Speculative and autoregressive decoding of one sequence with KV caches. A step checks a draft
tree (a chain is ``(1,)``) in one target pass, verifies it by recursive rejection and keeps the
accepted path; ``K`` shrinks near the end, so exactly ``max_new_tokens`` come out (fewer only at
EOS, which ends the output). :class:`AutoregressiveDecoder` is the fair baseline."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from .checks import non_negative_int, positive_int
from .drafters.base import Drafter
from .drafters.model import as_drafter
from .lm import (
    KVState,
    cache_kwargs,
    capture_features,
    context_length,
    last_rows,
    model_device,
    model_forward,
    output_cache,
    synchronize,
    vocab_size,
)
from .sampling import NAN_MESSAGE, Verdict, Warp, WarpedRows, greedy_tokens, has_nan, sample, verify
from .trees import (
    SupportWalk,
    chain_tree,
    is_chain,
    prepare_walk,
    tree_depths,
    tree_shape,
    verify_tree,
    verify_tree_greedy,
)

__all__ = [
    "AutoregressiveDecoder",
    "GenerationResult",
    "SpeculativeDecoder",
    "StepRecord",
    "StepTree",
    "TargetState",
]


class StepTree(NamedTuple):
    """A step's draft tree, as :func:`~specdec_lib.trees.verify_tree` takes it (``walk``: made
    before the target's pass, for verification on the draft's support)."""

    tokens: torch.Tensor
    parents: list[int]
    laws: torch.Tensor
    walk: SupportWalk | None = None


@dataclass
class StepRecord:
    """One decoding step: what was drafted, which drafts were accepted, what was emitted."""

    draft_tokens: list[int]  # the chain
    accepted: list[bool]  # per depth: a candidate kept (False from the first depth rejected on)
    emitted: list[int]  # accepted path + one corrected or bonus token (cut at EOS)
    # the drafter's proposal, the target's pass, and the host's work around them
    draft_ms: float
    target_ms: float
    host_ms: float
    alternatives: list[int] = field(default_factory=list)  # the tree's other candidates
    branch: int = 0  # j >= 1: alternative j was accepted; -1: every candidate rejected
    alt_depths: list[int] = field(default_factory=list)  # each alternative's depth

    @property
    def alt_index(self) -> int:
        """Which alternative was accepted, counted from 1 within its depth; 0 when none was."""
        if self.branch < 1:
            return 0
        depth = self.alt_depths[self.branch - 1]
        return self.branch - sum(1 for d in self.alt_depths if d < depth)

    @property
    def n_accepted(self) -> int:
        return sum(self.accepted)

    @property
    def verify_ms(self) -> float:
        """The step after the proposal: the target's pass and the host's work."""
        return self.target_ms + self.host_ms

    @property
    def bonus(self) -> bool:
        """True when every draft token was accepted and the last emitted token is the bonus."""
        return len(self.accepted) == self.n_accepted


@dataclass
class GenerationResult:
    """The new ``tokens`` for one prompt, and counts: ``n_accepted`` counts accepted drafts, never
    corrected or bonus tokens, so :attr:`alpha` is the theory's acceptance rate."""

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


def _make_generator(device: torch.device, seed: int | None) -> tuple[torch.Generator, int]:
    seed = non_negative_int(seed, "seed", optional=True)
    if seed is None:
        seed = int(torch.randint(0, 2**62, (1,)).item())
    return torch.Generator(device=device).manual_seed(seed), seed


def _prepare_prompt(input_ids: Any, max_new_tokens: Any, model: Any, device) -> torch.Tensor:
    """``input_ids`` as a checked 1-D LongTensor on ``device`` (vocabulary, context length)."""
    vocab, context = vocab_size(model), context_length(model)
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


class TargetState(KVState):
    """The target model and its KV cache (:class:`~specdec_lib.lm.KVState`), with a step's passes:
    :meth:`forward_tree` over a draft tree, and :meth:`keep` of the accepted path."""

    @classmethod
    def for_drafter(cls, target: Any, drafter: Drafter, use_cache: bool = True) -> TargetState:
        """The target's state, handing its hidden states to ``drafter.observe`` after every pass
        when ``drafter.feature_layers`` is not ``None``."""
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
        super().__init__(model, use_cache)
        # feature_sink(start, features [m, F]): feature_layers' outputs at start..start+m-1
        self.feature_sink = feature_sink
        self.feature_layers = tuple(feature_layers)
        # (start, len(seq), nodes, chain?, captured features) of the last forward_tree, until keep
        self._tree: tuple[int, int, int, bool, Any] | None = None
        self._shapes: dict[tuple[Any, str], tuple[torch.Tensor, torch.Tensor]] = {}

    def forward(self, seq: torch.Tensor, n_logits: int) -> torch.Tensor:
        start = self.length if self.use_cache else 0
        with self._feature_hooks() as captured:
            logits = super().forward(seq, n_logits)
        if self.feature_sink is not None:
            self.feature_sink(start, captured[-1][0])
        return logits

    def _feature_hooks(self) -> Any:
        """Capture the feature layers' outputs of the passes inside, when a drafter reads them."""
        if self.feature_sink is None:
            return contextlib.nullcontext([])
        return capture_features(self.model, self.feature_layers)

    @staticmethod
    def _causal_rows(past: int, n_new: int, n_keys: int, device: Any) -> torch.Tensor:
        """``[n_new, n_keys]``: new token ``i`` (at ``past + i``) sees keys up to its position."""
        keys = torch.arange(n_keys, device=device)
        return keys.view(1, -1) <= (past + torch.arange(n_new, device=device)).view(-1, 1)

    def forward_tree(
        self, seq: torch.Tensor, tokens: torch.Tensor, parents: Sequence[int]
    ) -> torch.Tensor:
        """One pass over ``seq``'s uncached tokens and a tree after it (``tokens`` ``[N]``,
        ``parents`` as in :func:`~specdec_lib.trees.verify_tree`), each node seeing ``seq`` and its
        ancestors only. Returns the logits ``[N + 1, V]``; cache entries and features wait for
        :meth:`keep`."""
        N, chain = tokens.numel(), is_chain(parents)
        start = self.length if self.use_cache else 0
        with self._feature_hooks() as captured:
            if chain:  # an ordinary causal pass over the sequence and the drafts
                logits = KVState.forward(self, torch.cat([seq, tokens.to(seq.device)]), N + 1)
            elif self.use_cache:
                logits = self._tree_pass(seq, tokens, parents)
            else:  # the reference: the sequence, and each node's path, re-encoded on their own
                rows, paths = [], []
                for i, j in enumerate(parents):
                    paths.append((paths[j] if j >= 0 else []) + [i])
                for path in [[]] + paths:
                    lg, _ = model_forward(self.model, torch.cat([seq, tokens[path]]), None, 1)
                    rows.append(lg[-1])
                logits = torch.stack(rows)
        self._tree = (start, seq.numel(), N, chain, list(captured) or None)
        return logits

    def _tree_pass(
        self, seq: torch.Tensor, tokens: torch.Tensor, parents: Sequence[int]
    ) -> torch.Tensor:
        """The cached pass over the new tokens of ``seq`` and the tree, with the tree's mask."""
        N, dev = tokens.numel(), seq.device
        depth, sees = self._shape_of(tuple(parents), dev)
        new = seq[self.length :]
        n_new, past = new.numel(), self.length
        prefix_rows = self._causal_rows(past, n_new, past + n_new + N, dev)
        node_rows = torch.cat([sees.new_ones((N, past + n_new)), sees], dim=1)
        mask = torch.cat([prefix_rows, node_rows]).view(1, 1, n_new + N, -1)
        positions = torch.cat(
            [torch.arange(past, past + n_new, device=dev), past + n_new - 1 + depth]
        )
        out = self.model(
            input_ids=torch.cat([new, tokens.to(dev)]).view(1, -1),
            attention_mask=mask,
            position_ids=positions.view(1, -1),
            use_cache=True,
            logits_to_keep=last_rows(N + 1, n_new + N, dev),
            **cache_kwargs(self.cache),
        )
        self.cache = output_cache(out)
        self.length = past + n_new + N  # the entries held; keep() moves and crops them
        return out.logits[0]

    def _shape_of(self, parents: tuple[int, ...], dev: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """A tree's depths ``[N]`` and which nodes each sees ``[N, N]`` (itself and ancestors)."""
        key = (parents, str(dev))
        if key not in self._shapes:
            depth = torch.tensor(tree_depths(parents), dtype=torch.long, device=dev)
            sees = torch.eye(len(parents), dtype=torch.bool, device=dev)
            for i, j in enumerate(parents):
                if j >= 0:
                    sees[i] |= sees[j]
            self._shapes[key] = (depth, sees)
        return self._shapes[key]

    def keep(self, path: Sequence[int]) -> None:
        """Keep the nodes ``path`` (root to leaf) of the last :meth:`forward_tree` after the
        sequence, drop the other nodes' cache entries, and hand a feature drafter the new and kept
        positions' features. A path along the chain (nodes ``0..n-1``) is already in place."""
        path = list(path)
        start, seq_len, n_nodes, chain, feats = self._tree
        in_place = path == list(range(len(path)))
        if self.use_cache and not in_place:
            self._move_into_place([seq_len + i for i in path], seq_len)
        if feats is not None:
            if chain or self.use_cache:  # one pass: the new positions, then the nodes
                f = feats[-1][0]
                n_new = f.shape[0] - n_nodes
                f = f[: n_new + len(path)] if in_place else torch.cat([f[:n_new], f[n_new:][path]])
            else:  # the reference re-encoded each path: take the kept one's pass
                f = feats[path[-1] + 1 if path else 0][0]
            self.feature_sink(start, f)
        self.rollback(seq_len + len(path))

    def _move_into_place(self, src: Sequence[int], base: int) -> None:
        """Cache entries ``src`` (increasing) become positions ``base, base + 1, ...`` by slice
        copies; each moves before every later source, so none is overwritten before it is read."""
        moves = [(s, base + j) for j, s in enumerate(src) if s != base + j]
        for layer in self.cache.layers:
            keys, values = layer.keys, layer.values  # read once: a registered cache may make views
            for s, d in moves:
                keys[..., d : d + 1, :] = keys[..., s : s + 1, :]
                values[..., d : d + 1, :] = values[..., s : s + 1, :]

    def rollback(self, n_valid: int) -> None:
        super().rollback(n_valid)
        self._tree = None


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
        """Encode ``prompt``, generate, and decode the new tokens into ``.text``. EOS defaults to
        the tokenizer's; ``stop_at_eos=False`` gives a fixed length."""
        ids = self._encode(prompt)
        if eos_token_id is None and stop_at_eos:
            eos_token_id = self.tokenizer.eos_token_id
        result = self.generate_ids(
            ids, max_new_tokens, eos_token_id if stop_at_eos else None, seed=seed
        )
        result.text = self.tokenizer.decode(result.tokens, skip_special_tokens=True)
        return result

    def _start(self, input_ids, max_new_tokens, eos_token_id, seed):
        """The checked prompt and EOS set of a generation, the generator reseeded if asked."""
        ids = _prepare_prompt(input_ids, max_new_tokens, self.target, self.device)
        eos = _eos_set(eos_token_id)
        if seed is not None:
            self.reseed(seed)
        return ids, eos

    def _result(self, out, steps, prompt_len, t_start, eos_reached) -> GenerationResult:
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


class SpeculativeDecoder(_DecoderBase):
    """Speculative sampling (Leviathan et al. 2022; Chen et al. 2023) on one sequence.

    Args:
        draft: a causal LM over the target's vocabulary, or any :class:`Drafter`.
        target: the causal LM whose distribution the output follows, exactly.
        K: draft tokens per step (clamped near the end of the output).
        temperature, top_k, top_p: the warps, applied identically to draft and target;
            ``temperature=0`` is greedy.
        draft_temperature_scale: the drafts' temperature over the target's (same top-k, top-p); any
            value keeps the output exact, as the rule reads the drafts' law. Greedy ignores it.
        seed: seeds the decoder's generator; the same seed gives the same tokens.
        tokenizer: optional, for :meth:`generate`.
        tree: candidates at each draft depth, ``(1,)`` (default) the chain
            (:func:`~specdec_lib.trees.chain_tree`); exact for every shape.
        width: ``tree=(width,)``; give one or the other.
        use_cache: keep KV caches (default); ``False`` re-encodes every pass: a reference for tests.
        verifier, target_state: **test-only** seams (:mod:`specdec_lib.testing`): the rule chains
            are verified by, and the class keeping the target's cache.
    """

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
        tree: Sequence[int] | None = None,
        width: int | None = None,
        use_cache: bool = True,
        verifier: Callable[..., Verdict] = verify,
        target_state: type[TargetState] = TargetState,
        draft_temperature_scale: float = 1.0,
    ) -> None:
        self.K = positive_int(K, "K", "draft tokens per step")
        self.tree = tree_shape(tree, width)
        if max(self.tree) > 1 and verifier is not verify:
            raise ValueError(
                f"a custom verifier checks chains only; got tree={self.tree}: leave verifier unset"
            )
        super().__init__(target, temperature, top_k, top_p, seed, tokenizer)
        self.draft_warp = self.warp.for_draft(draft_temperature_scale)
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
        self.target_state = target_state

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
        ids, eos = self._start(input_ids, max_new_tokens, eos_token_id, seed)
        prompt_len = ids.numel()
        target = self.target_state.for_drafter(self.target, self.drafter, self.use_cache)
        self.drafter.update(0)
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
        return self._result(out, steps, prompt_len, t_start, eos_reached)

    def _step(
        self, target: TargetState, ids: torch.Tensor, k: int
    ) -> tuple[StepRecord, torch.Tensor]:
        """One step: draft up to ``k`` tokens, build the tree, one target pass, recursive rejection,
        keep the accepted path in both states. Returns the record and the tokens emitted."""
        length = ids.numel()
        t0 = time.perf_counter()
        d_tokens = torch.empty(0, dtype=torch.long, device=self.device)
        d_probs = torch.empty(0, 0, device=self.device)
        if k > 0:
            proposal = self.drafter.propose(ids, k, self.draft_warp, self.generator)
            synchronize(self.device)
            if _check_proposal(*proposal, k):  # else a drafter that declined to guess
                d_tokens, d_probs = proposal
        t1 = time.perf_counter()
        k = d_tokens.numel()
        tree = self.tree_around(d_tokens, d_probs, self.generator)
        tokens, parents = tree.tokens, tree.parents
        t2 = time.perf_counter()
        logits = target.forward_tree(ids, tokens, parents)
        synchronize(self.device)
        t3 = time.perf_counter()
        verdict, path = self.judge(tree, logits, k, self.generator)
        n = verdict.n_accepted
        self.keep_path(target, path, length)
        branch = path[-1] - k + 1 if path and path[-1] >= k else (0 if n else -1)
        record = StepRecord(
            draft_tokens=d_tokens.tolist(),
            accepted=[i < n for i in range(k)],
            emitted=verdict.tokens.tolist(),
            draft_ms=(t1 - t0) * 1e3,
            target_ms=(t3 - t2) * 1e3,
            host_ms=(t2 - t1 + time.perf_counter() - t3) * 1e3,
            alternatives=tokens[k:].tolist(),
            branch=branch,
            alt_depths=[parents[i] + 2 for i in range(k, tokens.numel())],
        )
        return record, verdict.tokens.to(ids.device)

    def tree_around(
        self, d_tokens: torch.Tensor, d_probs: torch.Tensor, generator: torch.Generator | None
    ) -> StepTree:
        """The step's :class:`StepTree` around the chain ``d_tokens`` (drawn from ``d_probs``), by
        :func:`~specdec_lib.trees.chain_tree`: the chain alone without drafts or, greedy, without
        the drafter's ranking. Host work before the target's pass."""
        k = d_tokens.numel()
        scores = self.drafter.draft_scores if self.warp.greedy else None
        if k == 0 or (self.warp.greedy and scores is None):
            return StepTree(d_tokens, list(range(-1, k - 1)), d_probs)
        support = self._support(k)
        tokens, parents, laws = chain_tree(d_tokens, d_probs, self.tree, generator, scores, support)
        walk = None
        if support is not None and not self.warp.greedy and not is_chain(parents):
            walk = prepare_walk(tokens, laws, support, generator)
        return StepTree(tokens, parents, laws, walk)

    def _support(self, k: int) -> torch.Tensor | None:
        """Where ``q`` lives for ``k`` drafts: the draft's token subset, or ``None``."""
        return getattr(self.drafter, "support", None) if k else None

    def judge(
        self,
        tree: StepTree,
        logits: torch.Tensor,
        k: int,
        generator: torch.Generator | None,
    ) -> tuple[Verdict, list[int]]:
        """``(verdict, path)``: :meth:`tree_around`'s tree verified against the target's
        ``logits``."""
        tokens, parents, laws = tree.tokens, tree.parents, tree.laws
        if self.warp.greedy and self.verifier is verify:  # point masses: the argmaxes decide
            return verify_tree_greedy(tokens, parents, logits)
        # a chain's rows are all read; a tree's, only along the accepted path
        p = self.warp.probs(logits) if is_chain(parents) else WarpedRows(logits, self.warp)
        if k == 0:
            laws = logits.new_empty((0, logits.shape[-1]), dtype=torch.float32)
        return verify_tree(
            tokens,
            parents,
            laws,
            p,
            generator,
            chain_verify=self.verifier,
            support=self._support(k),
            walk=tree.walk,
        )

    def keep_path(self, target: TargetState, path: list[int], length: int) -> None:
        """Keep the accepted ``path`` after ``length`` tokens in both states: the drafter's along
        the chain's kept part, the target's by :meth:`TargetState.keep`."""
        on_chain = sum(1 for i, node in enumerate(path) if node == i)
        self.drafter.update(length + on_chain)
        target.keep(path)


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
    ) -> None:
        super().__init__(target, temperature, top_k, top_p, seed, tokenizer)
        self.use_cache = bool(use_cache)

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
        ids, eos = self._start(input_ids, max_new_tokens, eos_token_id, seed)
        prompt_len = ids.numel()
        target = TargetState(self.target, self.use_cache)
        out: list[int] = []
        steps: list[StepRecord] = []
        eos_reached = False
        t_start = time.perf_counter()
        while len(out) < max_new_tokens and not eos_reached:
            t0 = time.perf_counter()
            logits = target.forward(ids, 1)
            synchronize(self.device)
            t1 = time.perf_counter()
            x, token = self.next_token(logits)
            ids = torch.cat([ids, x])
            eos_reached = token in eos
            out.append(token)
            host_ms = (time.perf_counter() - t1) * 1e3
            steps.append(StepRecord([], [], [token], 0.0, (t1 - t0) * 1e3, host_ms))
        return self._result(out, steps, prompt_len, t_start, eos_reached)

    def next_token(self, logits: torch.Tensor) -> tuple[torch.Tensor, int]:
        """The next token after ``logits`` as ``[1]`` and an int (one host read); a bad row
        raises."""
        x, bad_row = self._draw(logits)
        token, bad = torch.cat([x, bad_row.long().view(1)]).tolist()
        if bad:
            raise ValueError(NAN_MESSAGE)
        return x, token

    def _draw(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The next token ``[1]`` from the last row of ``logits`` and whether that row is bad (NaN
        or +inf); greedy takes the argmax, what a draw from the one-hot row would give."""
        if self.warp.greedy:
            token, bad = greedy_tokens(logits[-1])
            return token.view(1), bad
        p = self.warp.probs(logits)
        return sample(p, self.generator), has_nan(p)
