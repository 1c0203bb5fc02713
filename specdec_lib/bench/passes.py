"""Timing the cost model's passes (:mod:`specdec_lib.costs`): target passes over ``n`` new tokens
with a KV cache, draft proposals, and a step's host work, as the benchmark's runs record them."""

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
    """The pass costs (``t_target_s``, ``t_draft_by_k_s``, ``t_draft_s``, ``t_draft_next_s``, ``c``,
    as :mod:`specdec_lib.costs` reads them) in seconds at a context of ``context`` tokens.

    Timed in ``reps`` rounds of :class:`PassTimer` (after two warm-up rounds) with every size once
    per round in rotated order, and combined by :func:`pass_costs_from`, so a transient load hits
    every size alike. ``shapes``, ``warp`` and ``trees`` as in :class:`PassTimer`.
    """
    timer = PassTimer(
        pair, n_max, k_max=k_max, context=context, shapes=shapes, warp=warp, trees=trees
    )
    rounds = [timer.round(r) for r in range(reps + 2)][2:]
    return pass_costs_from(rounds) | timer.describe() | {"context": context, "reps": reps}


class PassTimer:
    """The timing rounds of the cost model's passes, one at a time, so a caller can spread them over
    a run (the benchmark times them between its cells).

    Each pass is timed in the state decoding leaves the caches in: a draft proposal (each length on
    its own) right after an untimed target pass; a target pass over ``n > 1`` tokens right after an
    untimed proposal, with the feature hooks and the mask of ``shapes[n]`` (parents of its ``n - 1``
    nodes; default: the chain). With ``trees`` (step shapes by ``K``), a step's host work too.
    The draft's state is rebuilt each round, so rounds change no cell's tokens.
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
        self.drafter = as_drafter(pair.draft)
        # The target's state over the context; its passes capture features, handed to no one.
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
        """Each job timed once, in the order rotated by ``shift``: seconds in ``t_target_s``,
        ``t_draft_by_k_s`` and, with ``trees``, ``t_host_s`` by ``K`` (``"0"``: the baseline's)."""
        pair, ctx, device = self.pair, self.ctx[: self.context], self.pair.device
        # Rebuild the draft's state over the context (a decoder may have used the drafter since).
        self.drafter.update(0)
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
                self.drafter.update(self.context - 1)
        out: dict[str, Any] = {
            "t_target_s": [times["target", n] for n in range(1, self.n_max + 1)],
            "t_draft_by_k_s": [times["draft", k] for k in range(1, self.k_max + 1)],
        }
        if self.steps:
            out["t_host_s"] = {str(K): times["host", K] for K in [0, *self.steps]}
        return out

    def _host_work(self, K: int) -> float:
        """Seconds of one step's host work at ``K`` drafts (``0``: the baseline's draw), around an
        untimed proposal and target pass; both states go back to the context."""
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
        self.drafter.update(self.context - 1)
        return elapsed

    def _target_pass(self, n: int, keep: bool = False) -> None:
        """A target pass over ``n`` new tokens as decoding runs it (over a tree of ``n - 1`` nodes,
        ``shapes[n]`` or the chain); rolled back unless ``keep``."""
        if n == 1:
            model_forward(self.pair.target, self.ctx[-1:], self.state.cache, 1)
        else:
            parents = self.shapes.get(n, list(range(-1, n - 2)))
            self.state.forward_tree(self.ctx, self.ctx[-n + 1 :], parents)
        if not keep:
            self.state.rollback(self.context)

    def describe(self) -> dict[str, Any]:
        """How the passes ran: ``target_trees`` by pass size, ``target_features``, ``draft_warp``
        and, with ``trees``, ``host_trees`` by ``K``."""
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
        self.drafter.update(self.context - 1)


def _ignore_features(start: int, features: torch.Tensor) -> None:
    """A timing pass's feature sink: the features are captured as in decoding, then dropped."""


def pass_costs_from(rounds: Sequence[Mapping[str, Sequence[float]]]) -> dict[str, Any]:
    """The pass costs of :func:`measure_pass_costs` from timing rounds (:meth:`PassTimer.round`).

    Each time is divided by its round's level, then medianed over rounds. A round's level is the
    median over its passes of each time against that pass's median over rounds (one sweep of
    Tukey's median polish, in ratios): a round the machine ran slow as a whole moves no cost, and
    the ratios the cost model reads stay paired within rounds."""
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
    """A run's ``costs_during``: :func:`pass_costs_from` of rounds spread among its cells, with the
    ``context`` and the timer's ``described`` passes (:meth:`PassTimer.describe`)."""
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
