"""The pass costs of the cost model (:mod:`specdec_lib.costs`, notebook 03): ``t_target(n)``, one
target pass over ``n`` new tokens with a KV cache, and ``t_draft``, one draft step, timed as the
benchmark's runs record them. Its own module because both the benchmark's run
(:mod:`~specdec_lib.bench.run`) and its settings (``--dtype auto``,
:func:`~specdec_lib.research.speed.choose_setting`) time passes.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ..checks import positive_int
from ..decoding import AutoregressiveDecoder, SpeculativeDecoder, TargetState
from ..drafters.model import as_drafter
from ..lm import model_forward, synchronize
from ..models import ModelPair
from ..sampling import Warp
from ..trees import check_tree, tree_shape

__all__ = ["PassTimer", "costs_among_cells", "measure_pass_costs", "pass_costs_from"]


@torch.inference_mode()
def measure_pass_costs(
    pair: ModelPair,
    n_max: int,
    *,
    k_max: int = 2,
    context: int = 64,
    reps: int = 15,
    shapes: Mapping[int, Sequence[int]] | None = None,
    warp: Warp | None = None,
    trees: Mapping[int, Sequence[int]] | None = None,
) -> dict[str, Any]:
    """``t_target[n-1]`` for n = 1..n_max, ``t_draft_by_k[k-1]``, a proposal of ``k`` tokens for
    k = 1..k_max, ``t_draft`` (a proposal of one token) and ``t_draft_next`` (a proposal of two,
    less one of one), in seconds, with KV cache at a context of ``context`` tokens;
    ``c = t_draft / t_target(1)``.

    The passes are measured in rounds (:class:`PassTimer`), every pass size once per round in a
    rotated order (two warm-up rounds are dropped), and each cost is taken relative to its round's
    level, median over the rounds (:func:`pass_costs_from`): a transient load on the machine then
    hits every size alike instead of one size's whole sample.
    ``shapes`` (the draft tree a pass over ``n`` tokens checks), ``warp`` (the run's) and
    ``trees`` (the step's shape at each ``K`` whose host work is timed, ``t_host_s``) as in
    :class:`PassTimer`.
    """
    timer = PassTimer(
        pair, n_max, k_max=k_max, context=context, shapes=shapes, warp=warp, trees=trees
    )
    rounds = [timer.round(r) for r in range(reps + 2)][2:]
    return pass_costs_from(rounds) | timer.describe() | {"context": context, "reps": reps}


class PassTimer:
    """The timing rounds of the cost model's passes, one at a time, so that a caller can spread
    them over a run (the benchmark times them between its cells as well as before them).

    Each draft proposal is timed right after an (untimed) target pass, as it runs in decoding:
    the target's pass streams its weights through the CPU's caches and evicts the draft's, which
    the draft then reads from memory again. (Measured on a 2-core AMD EPYC: the default head's
    proposal of three tokens took 1.6 ms warm, 2.7 ms after a target pass.) Each proposal length
    is timed on its own: a proposal's first depths pay for the weights' return to the caches and
    its later ones less, so the cost of ``k`` tokens is not linear in ``k``
    (:func:`~specdec_lib.costs.draft_cost` reads ``t_draft_by_k_s`` where a run has it). A target
    pass over ``n > 1`` tokens, which in decoding checks drafts, is timed right after an (untimed)
    draft proposal of ``n - 1`` tokens (at most ``k_max``), whose weights and host work it finds in
    the caches instead of its own (on the same EPYC: 0.3-0.5 ms of a 23 ms pass). It runs as
    decoding runs it (:meth:`TargetState.forward_tree <specdec_lib.decoding.TargetState>`): with
    the hooks that capture the target's features where the drafter reads them, and with the mask
    of the draft tree it checks, ``shapes[n]`` (the parents of its ``n - 1`` nodes; the chain,
    and the model's causal mask, where ``shapes`` names none). A one-token pass, the baseline's,
    runs the plain model. The draft proposes under ``warp``, the run's (default ``T = 1``).

    With ``trees`` (the step's shape at each ``K``, as a run's decoders have them), the host's
    work of a step is timed too, as decoding does it (``t_host_s``, by ``K``): for each ``K``, a
    proposal of ``K`` tokens (untimed), the tree around it
    (:meth:`SpeculativeDecoder.tree_around <specdec_lib.decoding.SpeculativeDecoder>`), the
    target's pass over it (untimed), its verification and the kept path (``judge``,
    ``keep_path``); for ``K = 0``, the baseline's draw after its one-token pass
    (:meth:`AutoregressiveDecoder.next_token <specdec_lib.decoding.AutoregressiveDecoder>`).
    The pass leaves the CPU's caches as decoding's does, and the host's work after it costs more
    than warm (on a 2-core AMD EPYC, a tree's verification took 0.66 ms right after decoding's
    pass and 0.35 ms when repeated at once).
    The timer's context is random tokens, so its drafts are accepted less often than a prompt's:
    the verification's work per candidate tried is the same, its path shorter.

    The timer keeps its own target cache; the draft's state, which a drafter object shares with
    the decoders that use it, is set up again at the start of every round (a decoder resets it
    before every generation), so rounds between a benchmark's cells change none of their tokens.
    """

    def __init__(
        self,
        pair: ModelPair,
        n_max: int,
        *,
        k_max: int = 2,
        context: int = 64,
        shapes: Mapping[int, Sequence[int]] | None = None,
        warp: Warp | None = None,
        trees: Mapping[int, Sequence[int]] | None = None,
    ) -> None:
        self.pair = pair
        self.n_max = positive_int(n_max, "n_max", "target pass sizes timed")
        self.k_max = max(2, positive_int(k_max, "k_max", "draft tokens of the longest proposal"))
        self.context = positive_int(context, "context", "tokens in the cache of a timed pass")
        self.shapes = {int(n): list(p) for n, p in (shapes or {}).items()}
        for n, parents in self.shapes.items():
            if len(parents) != n - 1:
                raise ValueError(
                    f"shapes[{n}]: a pass over {n} tokens checks {n - 1} draft nodes, "
                    f"got parents for {len(parents)}"
                )
            check_tree(torch.zeros(n - 1, dtype=torch.long), parents)
        g = torch.Generator().manual_seed(0)
        vocab = pair.target.config.vocab_size
        self.ctx = torch.randint(min(100, vocab // 2), vocab, (context + 1,), generator=g).to(
            pair.device
        )
        # The draft is timed through the Drafter interface: a proposal after the context (for a
        # model draft: cached passes, the warp and the samples).
        self.drafter = as_drafter(pair.draft)
        # The target's state over the context; its passes capture the features the drafter reads
        # (and hand them to no one: the drafter's own features come from the round's set-up).
        layers = self.drafter.feature_layers
        self.state = TargetState(
            pair.target,
            feature_sink=None if layers is None else _ignore_features,
            feature_layers=layers or (-1,),
        )
        with torch.inference_mode():
            self.state.forward(self.ctx[:context], 1)
        self.warp = warp or Warp(1.0)
        self.d_gen = torch.Generator(device=pair.device).manual_seed(0)
        self.jobs = [("target", n) for n in range(1, self.n_max + 1)]
        self.jobs += [("draft", k) for k in range(1, self.k_max + 1)]
        # the decoders whose host work is timed: each K's step, and the baseline's (K = 0)
        w = self.warp
        warps = dict(temperature=w.temperature, top_k=w.top_k, top_p=w.top_p)
        self.steps = {
            positive_int(K, "trees", "draft tokens per step (the keys)"): SpeculativeDecoder(
                self.drafter, pair.target, K=int(K), tree=tree_shape(tree), **warps
            )
            for K, tree in sorted((trees or {}).items())
        }
        self.baseline = AutoregressiveDecoder(pair.target, **warps)
        if self.steps:
            self.jobs += [("host", K) for K in [0, *self.steps]]

    @torch.inference_mode()
    def round(self, shift: int = 0) -> dict[str, list[float]]:
        """Every pass size and proposal length timed once, in the order rotated by ``shift``:
        ``{"t_target_s": [n_max], "t_draft_by_k_s": [k_max]}`` in seconds, and with ``trees``,
        ``"t_host_s"``, each step's host work by ``K`` (``"0"``: the baseline's)."""
        pair, ctx, device = self.pair, self.ctx[: self.context], self.pair.device
        # The draft's state over the context, built again (a decoder may have used the drafter
        # since the last round): the target's features, then an untimed proposal that runs the
        # draft over the context's positions, which every timed proposal then finds in its cache.
        self.drafter.reset()
        TargetState.for_drafter(pair.target, self.drafter).forward(ctx, 1)
        self._untimed_proposal(1)
        times: dict[tuple[str, int], float] = {}
        shift %= len(self.jobs)
        for which, n in self.jobs[shift:] + self.jobs[:shift]:
            if which == "host":
                times[which, n] = self._host_work(n)
                continue
            if which == "draft":  # as in decoding: the target's pass comes first
                self._target_pass(1)
            elif n > 1:  # a pass that checks drafts: as in decoding, the draft's proposal first
                self._untimed_proposal(min(n - 1, self.k_max))
            synchronize(device)
            t0 = time.perf_counter()
            if which == "target":
                self._target_pass(n, keep=True)
            else:
                self.drafter.propose(ctx, n, self.warp, self.d_gen)
            synchronize(device)
            times[which, n] = time.perf_counter() - t0
            if which == "target":
                self.state.rollback(self.context)
            else:
                self.drafter.rollback(self.context - 1)
        out: dict[str, Any] = {
            "t_target_s": [times["target", n] for n in range(1, self.n_max + 1)],
            "t_draft_by_k_s": [times["draft", k] for k in range(1, self.k_max + 1)],
        }
        if self.steps:
            out["t_host_s"] = {str(K): times["host", K] for K in [0, *self.steps]}
        return out

    def _host_work(self, K: int) -> float:
        """Seconds of one step's host work at ``K`` drafts (``0``: the baseline's draw), timed
        around the untimed proposal and target pass it needs; both states go back to the
        context."""
        device, ctx = self.pair.device, self.ctx
        if K == 0:
            logits, _ = model_forward(self.pair.target, ctx[-1:], self.state.cache, 1)
            synchronize(device)
            t0 = time.perf_counter()
            self.baseline.next_token(logits)  # its host read waits for the device
            elapsed = time.perf_counter() - t0
            self.state.rollback(self.context)
            return elapsed
        dec = self.steps[K]
        d_tokens, d_probs = self.drafter.propose(ctx[: self.context], K, self.warp, self.d_gen)
        synchronize(device)
        t0 = time.perf_counter()
        tree = dec.tree_around(d_tokens, d_probs, self.d_gen)
        t1 = time.perf_counter()
        logits = self.state.forward_tree(ctx, tree.tokens, tree.parents)
        synchronize(device)
        t2 = time.perf_counter()
        _, path = dec.judge(tree, logits, d_tokens.numel(), self.d_gen)
        dec.keep_path(self.state, path, ctx.numel())
        synchronize(device)
        elapsed = t1 - t0 + time.perf_counter() - t2
        self.state.rollback(self.context)
        self.drafter.rollback(self.context - 1)
        return elapsed

    def _target_pass(self, n: int, keep: bool = False) -> None:
        """A target pass over ``n`` new tokens after the context, as decoding runs it: over one
        token, the plain model (the baseline's pass); over more, the next token and a draft tree
        of ``n - 1`` nodes (``shapes[n]``, else the chain). Its cache entries go again unless
        ``keep`` (the caller times the pass, then rolls back)."""
        if n == 1:
            model_forward(self.pair.target, self.ctx[-1:], self.state.cache, 1)
        else:
            parents = self.shapes.get(n, list(range(-1, n - 2)))
            self.state.forward_tree(self.ctx, self.ctx[-n + 1 :], parents)
        if not keep:
            self.state.rollback(self.context)

    def describe(self) -> dict[str, Any]:
        """How the target passes were run: the trees they checked (``target_trees``, the parents
        by pass size; the chain for the others) and whether they captured the drafter's
        features; and the step shapes whose host work was timed (``host_trees``, by ``K``)."""
        out = {
            "target_trees": {str(n): p for n, p in sorted(self.shapes.items())},
            "target_features": self.drafter.feature_layers is not None,
            "draft_warp": self.warp.describe(),
        }
        if self.steps:
            out["host_trees"] = {str(K): list(dec.tree) for K, dec in self.steps.items()}
        return out

    def _untimed_proposal(self, k: int) -> None:
        """A proposal of ``k`` tokens after the context, then the draft's state back to it."""
        self.drafter.propose(self.ctx[: self.context], k, self.warp, self.d_gen)
        self.drafter.rollback(self.context - 1)


def _ignore_features(start: int, features: torch.Tensor) -> None:
    """The feature sink of a timing pass: the features were captured as in decoding, unused."""


def pass_costs_from(rounds: Sequence[Mapping[str, Sequence[float]]]) -> dict[str, Any]:
    """The pass costs of :func:`measure_pass_costs` from timing rounds (:meth:`PassTimer.round`):
    each pass size's and proposal length's time relative to its round's level, median over the
    rounds.

    A round's level is the median, over its passes, of each pass's time against that pass's own
    median over the rounds (one sweep of Tukey's median polish, in ratios). A round the machine
    ran slow as a whole then moves no cost, and each cost keeps the scale of its median: the cost
    model reads ratios (``t_target(n) / t_target(1)``, ``c``), which the rounds measure paired,
    within seconds of each other, while a shared VM's speed drifts by a third and more between
    them (measured on a 2-core AMD EPYC: one-token passes of 16 to 28 ms within one run).
    Rounds that time the host's work of a step (``t_host_s``, by ``K``) give its cost alike,
    relative to the levels of the passes. Written here, since scipy and pandas offer no median
    polish."""
    if not rounds:
        raise ValueError("rounds: no timing rounds to take the pass costs from")
    fields = ("t_target_s", "t_draft_by_k_s")
    medians = {
        f: [statistics.median(col) for col in zip(*(r[f] for r in rounds), strict=True)]
        for f in fields
    }
    levels = [
        statistics.median(
            [t / m for f in fields for t, m in zip(r[f], medians[f], strict=True) if m > 0] or [1.0]
        )
        for r in rounds
    ]

    def polished(field: str) -> list[float]:
        cols = zip(*(r[field] for r in rounds), strict=True)
        return [
            statistics.median(t / lv for t, lv in zip(col, levels, strict=True)) for col in cols
        ]

    t_target, by_k = polished("t_target_s"), polished("t_draft_by_k_s")
    host: dict[str, Any] = {}
    if all("t_host_s" in r for r in rounds):  # each step's host work, on its round's level too
        host["host_timed"] = "after the target pass, as in decoding (K = 0: the baseline's draw)"
        host["t_host_s"] = {
            K: statistics.median(
                r["t_host_s"][K] / lv for r, lv in zip(rounds, levels, strict=True)
            )
            for K in rounds[0]["t_host_s"]
        }
    return {
        "t_target_s": t_target,
        "t_draft_s": by_k[0],
        "t_draft_next_s": max(0.0, by_k[1] - by_k[0]),
        "t_draft_by_k_s": by_k,
        "c": by_k[0] / t_target[0],
        "statistic": "median over interleaved rounds, each pass relative to its round's level",
        "draft_timed": "after a target pass",
        "target_timed": "after a draft proposal (n > 1)",
    } | host


def costs_among_cells(
    rounds: Sequence[Mapping[str, Sequence[float]]],
    context: int,
    described: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A run's ``costs_during``: the pass costs of its timing rounds spread among its cells
    (:func:`pass_costs_from`), timed at a context of ``context`` tokens, with the timer's
    ``described`` passes (:meth:`PassTimer.describe`)."""
    return (
        pass_costs_from(rounds)
        | dict(described or {})
        | {
            "statistic": "median over rounds spread among the cells, each pass relative to its "
            "round's level",
            "context": context,
            "reps": len(rounds),
        }
    )
