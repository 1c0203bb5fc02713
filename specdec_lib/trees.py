"""A draft tree: candidates at each draft depth, checked in one target pass with a tree attention
mask, verified by recursive rejection (:func:`verify_tree`; arXiv 2305.09781, 2402.14160). A chain
``(1, ..., 1)`` follows the rule of :func:`~specdec_lib.sampling.verify`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .checks import positive_int
from .sampling import (
    NAN_MESSAGE,
    Correction,
    Verdict,
    WarpedRows,
    acceptance_probs,
    greedy_tokens,
    has_nan,
    ids_message,
    ids_outside,
    residual_correction,
    sample,
    verify,
)

__all__ = [
    "best_alternatives",
    "candidate_stage",
    "chain_tree",
    "check_widths",
    "check_tree",
    "draw_alternatives",
    "is_chain",
    "tree_depths",
    "tree_shape",
    "prepare_walk",
    "SupportWalk",
    "stage_accept",
    "stage_pass_on",
    "support_stage",
    "verify_tree",
    "verify_tree_greedy",
]


def draw_alternatives(
    q: torch.Tensor,
    first: torch.Tensor,
    n_more: Sequence[int],
    generator: torch.Generator | None = None,
    support: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Up to ``n_more[r]`` candidates after ``first[r]`` for each row of ``q`` ``[R, m]`` (``m``:
    ``V`` or ``|support|``), drawn without replacement; fewer where no mass is left. Returns
    ``(tokens [n], laws [n, m], counts [R])``, row 0's first. Inverse-CDF draws on the row's float64
    cumulative sum, as :func:`~specdec_lib.sampling.sample`'s, the uniform point carried past
    removed tokens: exact up to the sum's rounding (a point on a removed token is redrawn)."""
    ids = _ids_on(q, support)
    R, m = q.shape
    n_more = list(n_more)
    want = min(max(n_more, default=0), m)
    if R == 0 or want == 0:
        return ids.new_empty(0), q.new_empty((0, m), dtype=torch.float32), [0] * R
    u = torch.rand((R, want), generator=generator, device=q.device, dtype=torch.float64)
    us = u.view(-1).tolist()
    q_h = _host_array(q.float())
    ids_h = None if support is None else _host_array(ids)
    cols = _columns(ids_h, _host_array(first.view(-1)), m)
    cdfs = _cumsum64(q_h)
    picks: list[list[int]] = []
    gone: list[list[int]] = []  # per candidate, the tokens its law excludes
    for r in range(R):
        first_r = [] if cols[r] is None else [cols[r]]
        if n_more[r] <= 0:
            picks.append([])
            continue
        cdf = cdfs[r]
        removed = [i for i in first_r if _width(cdf, i) > 0]
        got: list[int] = []
        draws = iter(us[r * want : (r + 1) * want])
        while len(got) < n_more[r]:
            u_next = next(draws, None)
            if u_next is None:  # after a draw again
                u_next = float(
                    torch.rand((), generator=generator, device=q.device, dtype=torch.float64)
                )
            x = _point_past(u_next, cdf, removed)
            i = min(int(np.searchsorted(cdf, x, side="right")), m - 1)
            if _width(cdf, i) > 0 and i not in removed:
                got.append(i)
                removed = sorted([*removed, i])
            elif np.count_nonzero(np.diff(cdf, prepend=0.0) > 0) <= len(removed):
                break  # no mass left; else a point that rounding put on an edge: draw again
        picks.append(got)
        gone += [first_r + got[:j] for j in range(len(got))]
    counts = [len(g) for g in picks]
    rows = [r for r, g in enumerate(picks) for _ in g]
    if not rows:
        return ids.new_empty(0), q.new_empty((0, m), dtype=torch.float32), counts
    picked = [i for g in picks for i in g]
    laws = q_h[rows]  # a copy: candidate i's law is its row's q without gone[i], renormalised
    laws[[n for n, g in enumerate(gone) for _ in g], [i for g in gone for i in g]] = 0
    laws /= laws.sum(axis=-1, keepdims=True)
    tokens = picked if ids_h is None else ids_h[picked]
    return torch.as_tensor(tokens, device=q.device), torch.from_numpy(laws).to(q.device), counts


def _cumsum64(a: np.ndarray) -> np.ndarray:
    """``np.cumsum(a, axis=-1, dtype=np.float64)``, bit for bit, by PyTorch's faster kernel."""
    return torch.cumsum(torch.from_numpy(a), -1, dtype=torch.float64).numpy()


def _host_array(t: torch.Tensor) -> np.ndarray:
    """``t`` as a NumPy array on the host: on a CPU, the tensor's own memory (no copy)."""
    return t.detach().cpu().numpy()


def _columns(ids: np.ndarray | None, tokens: np.ndarray, m: int) -> list[int | None]:
    """Each of ``tokens``' column among ``0..m-1`` or the sorted ``ids``; ``None`` where absent."""
    if ids is None or m == 0:
        return [t if 0 <= t < m else None for t in tokens.tolist()]
    at = np.minimum(np.searchsorted(ids, tokens), m - 1)
    found = ids[at] == tokens
    return [i if f else None for i, f in zip(at.tolist(), found.tolist(), strict=True)]


def _width(cdf: np.ndarray, i: int) -> float:
    """Token ``i``'s mass in the cumulative sum ``cdf``: the width of its interval."""
    return float(cdf[i] - (cdf[i - 1] if i else 0.0))


def _point_past(u: float, cdf: np.ndarray, removed: Sequence[int]) -> float:
    """``u``'s point in the mass outside ``removed`` (sorted), placed on the whole row's ``cdf``."""
    x = u * (float(cdf[-1]) - sum(_width(cdf, i) for i in removed))
    for i in removed:  # in increasing order: x only moves up
        if x >= (cdf[i - 1] if i else 0.0):
            x += _width(cdf, i)
    return x


def _ids_on(rows: torch.Tensor, support: torch.Tensor | None) -> torch.Tensor:
    """The token id of each column of ``rows`` (``[..., m]``): ``0..m-1``, or ``support``."""
    m = rows.shape[-1]
    if support is None:
        return torch.arange(m, device=rows.device)
    if support.numel() != m:
        raise ValueError(
            f"with a support, the laws and scores must be on it: [..., |support|] = [..., "
            f"{support.numel()}], got [..., {m}]"
        )
    return support.to(rows.device)


def candidate_stage(
    p: torch.Tensor,
    q: torch.Tensor,
    x: torch.Tensor,
    correction: Correction = residual_correction,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One stage of recursive rejection (``p`` what is left of the target's law, ``q`` the law ``x``
    was drawn from, both ``[V]``): ``(probability of accepting x, law passed on)``. Built from
    :func:`stage_accept` and :func:`stage_pass_on`, which the decoder runs."""
    return stage_accept(p, q, x), stage_pass_on(p, q, x, correction)


def stage_accept(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``min(1, p(x) / q(x))`` for one candidate ``x``."""
    return acceptance_probs(x.view(1), q.view(1, -1), p.view(1, -1))[0]


def stage_pass_on(
    p: torch.Tensor, q: torch.Tensor, x: torch.Tensor, correction: Correction
) -> torch.Tensor:
    """What is left of ``p`` after rejecting ``x ~ q``: ``correction(p, q, x)``."""
    return correction(p.view(1, -1), q.view(1, -1), x.view(1))[0]


def check_widths(widths: Any) -> tuple[int, ...] | None:
    """``widths`` (candidates at each draft depth) as a tuple of positive ints, or ``None``."""
    if widths is None:
        return None
    if isinstance(widths, (str, bytes)) or not hasattr(widths, "__iter__"):
        raise ValueError(
            f"tree must be a sequence of candidates per depth, e.g. (2, 2), got {widths!r}"
        )
    out = tuple(positive_int(w, "tree", "candidates at each draft depth") for w in widths)
    if not out:
        raise ValueError("tree must name the candidates of at least one depth, e.g. (2, 2)")
    return out


def tree_shape(tree: Any = None, width: Any = None) -> tuple[int, ...]:
    """A step's shape: ``tree``, else ``(width,)``, else the chain ``(1,)``."""
    if width is None:
        return check_widths(tree) or (1,)
    width = positive_int(width, "width", "candidates for the first draft position")
    if tree is not None:
        raise ValueError(
            f"give either width (candidates at the first position) or tree (candidates at each "
            f"depth), got width={width} and tree={tree}"
        )
    return (width,)


def check_tree(tokens: torch.Tensor, parents: Any) -> list[int]:
    """``parents`` as a list, checked to be a tree over ``tokens`` ``[N]``: each ``parents[i]`` is
    ``-1`` (the root) or an earlier node."""
    tokens = torch.as_tensor(tokens)
    if tokens.dim() != 1 or tokens.is_floating_point() or tokens.is_complex():
        raise ValueError(
            f"tokens must be a 1-D tensor of token ids, got shape {tuple(tokens.shape)}, "
            f"dtype {tokens.dtype}"
        )
    if isinstance(parents, list) and all(type(j) is int for j in parents):
        par = parents  # as a step builds it: no tensor round trip
    else:
        par = torch.as_tensor(parents).view(-1).tolist()
    if len(par) != tokens.numel():
        raise ValueError(f"parents must have one entry per node ({tokens.numel()}), got {len(par)}")
    for i, j in enumerate(par):
        if int(j) != j or not -1 <= j < i:
            raise ValueError(
                f"parents[{i}] = {j}: each node's parent must be -1 (the root) or an earlier node"
            )
    return [int(j) for j in par]


def tree_depths(parents: Sequence[int]) -> list[int]:
    """The depth of each node (``1`` for a child of the root) of a tree in parents-first order."""
    depth: list[int] = []
    for j in parents:
        depth.append(1 if j < 0 else depth[j] + 1)
    return depth


def is_chain(parents: Sequence[int]) -> bool:
    """Whether the tree is a chain: node ``i`` the only child of node ``i - 1``."""
    return all(j == i - 1 for i, j in enumerate(parents))


def chain_tree(
    d_tokens: torch.Tensor,
    d_probs: torch.Tensor,
    widths: Sequence[int],
    generator: torch.Generator | None = None,
    scores: torch.Tensor | None = None,
    support: torch.Tensor | None = None,
) -> tuple[torch.Tensor, list[int], torch.Tensor]:
    """The draft tree around the chain ``d_tokens`` ``[k]`` (drawn from ``d_probs`` ``[k, V]``): up
    to ``widths[d] - 1`` siblings of its token at depth ``d + 1``, drawn from ``d_probs[d]`` without
    replacement (:func:`draw_alternatives`), or, with ``scores`` ``[k, V]`` (greedy), the draft's
    next-best tokens (:func:`best_alternatives`). With a ``support``, rows and laws are on it.
    Returns ``(tokens [N], parents [N], laws [N, V])``, the chain first, then the alternatives,
    shallowest first, each drawn from the draft's law given its path and earlier siblings."""
    k = d_tokens.numel()
    tokens, parents, laws = [d_tokens], list(range(-1, k - 1)), [d_probs]
    depths = [d for d in range(min(k, len(widths))) if widths[d] > 1]
    if depths:
        wanted = [widths[d] - 1 for d in depths]
        if scores is None:
            alts, alt_laws, counts = draw_alternatives(
                d_probs[depths], d_tokens[depths], wanted, generator, support
            )
        else:
            alts, alt_laws, counts = best_alternatives(
                scores[depths], d_tokens[depths], wanted, support
            )
        tokens.append(alts.to(d_tokens.device))
        laws.append(alt_laws.to(d_probs.device, d_probs.dtype))
        parents += [d - 1 for d, n in zip(depths, counts, strict=True) for _ in range(n)]
    return torch.cat(tokens), parents, torch.cat(laws)


def best_alternatives(
    scores: torch.Tensor,
    first: torch.Tensor,
    n_more: Sequence[int],
    support: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Greedy decoding's alternatives: point masses on up to ``n_more[r]`` of the best tokens by
    ``scores[r]`` (``[R, V]`` or ``[R, |support|]``) after ``first[r]``, never ``-inf`` ones.
    Returns as :func:`draw_alternatives` does."""
    ids = _ids_on(scores, support)
    first = first.view(-1, 1).to(scores.device)
    s = scores.float().masked_fill(ids.view(1, -1) == first, float("-inf"))
    top = s.topk(min(max(n_more, default=0), ids.numel()), dim=-1)
    alive = torch.isfinite(top.values).sum(dim=-1).tolist()  # the one host read
    counts = [min(n, a) for n, a in zip(n_more, alive, strict=True)]
    rows = [r for r, n in enumerate(counts) for _ in range(n)]
    place = [j for n in counts for j in range(n)]
    picked = top.indices[rows, place]
    laws = s.new_zeros((len(rows), ids.numel()))
    laws[torch.arange(len(rows)), picked] = 1.0
    return ids[picked], laws, counts


def _children(parents: Sequence[int]) -> list[list[int]]:
    """``children[j + 1]``: node ``j``'s children in index order (``children[0]``: the root's)."""
    children: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for i, j in enumerate(parents):
        children[j + 1].append(i)
    return children


def verify_tree(
    tokens: torch.Tensor,
    parents: Sequence[int],
    laws: torch.Tensor,
    target_probs: torch.Tensor | WarpedRows,
    generator: torch.Generator | None = None,
    *,
    correction: Correction = residual_correction,
    chain_verify: Callable[..., Verdict] = verify,
    support: torch.Tensor | None = None,
    walk: SupportWalk | None = None,
) -> tuple[Verdict, list[int]]:
    """Recursive rejection down a draft tree.

    At a node with target law ``p``, its children ``c_i ~ q_i`` are tried in order: ``p_1 = p``;
    accept ``c_i`` with ``min(1, p_i(c_i) / q_i(c_i))``, else ``p_{i+1} = norm(max(0, p_i - q_i))``;
    after the last, sample ``p_{w+1}``. Each stage is a speculative-sampling step with target
    ``p_i``, so the node emits a token of law ``p`` whatever the ``q_i``, provided ``c_i ~ q_i``
    given the path and the earlier siblings, independently of the uniforms.

    Args:
        tokens: ``[N]`` the draft tokens, parents first.
        parents: ``[N]`` each node's parent (``-1``: the root, the token before the drafts).
        laws: ``[N, V]`` the law each node was drawn from, given its path and earlier siblings.
        target_probs: ``[N + 1, V]``: row 0 the target's law after the root, row ``i + 1`` after
            node ``i``; as :class:`~specdec_lib.sampling.WarpedRows`, only rows reached are warped.
        correction: what is left of ``p`` after a rejection (the residual; anything else is wrong).
        chain_verify: the vectorised rule a chain is verified by (a test-only seam).
        support: ``[m]`` sorted token ids outside which every law is 0; ``laws`` are then ``[N, m]``
            and the recursion runs there (:func:`support_stage`).
        walk: with a ``support``, the tree's :func:`prepare_walk` if made before the target's pass.

    Returns the verdict (the accepted path's tokens and one drawn from what the last accepted node's
    row leaves) and the path, root to leaf. Bad shapes, ids or NaN raise ``ValueError``.
    """
    tokens = torch.as_tensor(tokens)
    par = check_tree(tokens, parents)
    N, V = tokens.numel(), target_probs.shape[-1]
    laws = torch.as_tensor(laws)
    m = V if support is None else support.numel()
    if tuple(laws.shape) != (N, m) or tuple(target_probs.shape) != (N + 1, V):
        raise ValueError(
            f"laws must be [N, {'V' if support is None else '|support|'}] = [{N}, {m}] and "
            f"target_probs [N + 1, V] = [{N + 1}, {V}], got {tuple(laws.shape)} and "
            f"{tuple(target_probs.shape)}"
        )
    if support is not None:  # on the support; a chain or another correction on full rows
        if correction is residual_correction and not is_chain(par):
            if walk is None:
                walk = prepare_walk(tokens, laws, support, generator)
            elif len(walk.tokens) != N:
                raise ValueError(
                    f"walk: made for a tree of {len(walk.tokens)} nodes, verifying one of {N}"
                )
            return _verify_on_support(par, target_probs, walk, generator)
        laws = laws.new_zeros((N, V)).index_copy_(1, support.to(laws.device), laws)
    lazy = isinstance(target_probs, WarpedRows)
    if is_chain(par):  # one candidate per node: the rule of verify, vectorised
        rows = target_probs.all() if lazy else target_probs
        verdict = chain_verify(tokens, laws, rows, generator, correction=correction)
        return verdict, list(range(verdict.n_accepted))
    return _verify_on_rows(tokens, par, laws, target_probs, generator, correction)


def _verify_on_rows(
    tokens: torch.Tensor,
    par: list[int],
    laws: torch.Tensor,
    target_probs: torch.Tensor | WarpedRows,
    generator: torch.Generator | None,
    correction: Correction,
) -> tuple[Verdict, list[int]]:
    """:func:`verify_tree`'s recursion over full rows, one uniform per child tried."""
    lazy = isinstance(target_probs, WarpedRows)
    V = target_probs.shape[-1]
    device = target_probs.device
    tokens = tokens.to(device=device, dtype=torch.long)
    laws = laws.to(device)
    # a lazy row holding NaN is never accepted through: it ends the step, checked below
    nan = has_nan(laws) if lazy else has_nan(laws, target_probs)
    bad_nan, bad_ids = torch.stack([nan, ids_outside(tokens, V)]).tolist()
    if bad_ids:
        raise ValueError(ids_message("tokens", V))
    if bad_nan:
        raise ValueError(NAN_MESSAGE)
    children = _children(par)
    path: list[int] = []
    node, left = -1, target_probs[0]
    while True:
        for c in children[node + 1]:
            a = stage_accept(left, laws[c], tokens[c])
            u = torch.rand((), generator=generator, device=device, dtype=torch.float64)
            if float(u) < float(a):
                path.append(c)
                node, left = c, target_probs[c + 1]
                break
            left = stage_pass_on(left, laws[c], tokens[c], correction)
        else:  # every child rejected (or none): one token from what is left
            last = sample(left, generator).view(1)
            if lazy and bool(torch.isnan(left.sum())):
                raise ValueError(NAN_MESSAGE)
            return Verdict(torch.cat([tokens[path], last]), len(path)), path


def support_stage(
    left: Any, off: float, q: Any, i: int, mass_off: float
) -> tuple[float, Any, float]:
    """:func:`candidate_stage` for ``S[i]`` on a support ``S`` off which ``q`` ``[m]`` is 0. What is
    left of the target's law is ``(left, off * p)`` over its total ``Z``: ``left`` ``[m]`` on ``S``,
    and ``off`` times the target's row ``p`` off it (mass ``mass_off``). Returns
    ``(acceptance, left, off)`` after a rejection: ``max(0, left / Z - q)`` and ``off / Z``, the
    residual times ``1 / Z`` (the same law)."""
    lx, qx, total = float(left[i]), float(q[i]), float(left.sum()) + off * mass_off
    a = min(1.0, lx / total / qx) if qx > 0 else float(lx > 0)
    return a, (left / total - q).clip(min=0), off / total


@dataclass(frozen=True)
class SupportWalk:
    """What recursive rejection on a support needs of a tree, on the host, before the target's pass:
    the support ``S`` (``ids`` on the host), the ``tokens``, their columns ``at``, the ``laws`` on
    it, and one uniform per node (tried at most once) plus one for the last draw."""

    S: torch.Tensor
    ids: np.ndarray
    tokens: list[int]
    at: list[int]
    laws: np.ndarray
    uniforms: list[float]


def prepare_walk(
    tokens: torch.Tensor,
    laws: torch.Tensor,
    support: torch.Tensor,
    generator: torch.Generator | None = None,
) -> SupportWalk:
    """The :class:`SupportWalk` of ``tokens`` ``[N]`` and ``laws`` ``[N, |support|]``; a token
    outside ``support`` or a law holding NaN raises."""
    S = support.to(laws.device)
    ids, laws_h, toks_h = _host_array(S), _host_array(laws.float()), _host_array(tokens)
    toks = toks_h.tolist()
    at = _columns(ids, toks_h, ids.size)
    if None in at:
        raise ValueError("tokens must lie in support (sorted; the laws are 0 elsewhere)")
    if laws_h.size and np.isnan(laws_h.max()):
        raise ValueError(NAN_MESSAGE)
    n = len(toks) + 1
    us = torch.rand(n, generator=generator, device=laws.device, dtype=torch.float64).tolist()
    return SupportWalk(S, ids, toks, at, laws_h, us)


def _verify_on_support(
    parents: list[int],
    target_probs: torch.Tensor | WarpedRows,
    walk: SupportWalk,
    generator: torch.Generator | None,
) -> tuple[Verdict, list[int]]:
    """:func:`verify_tree` on a support (:func:`support_stage`), on the host in float64."""
    device = target_probs.device
    S, N, m = walk.S.to(device), len(walk.tokens), walk.ids.size
    us = walk.uniforms
    children = _children(parents)
    path: list[int] = []
    node = -1
    left, p, mass_off = _support_row(target_probs, 0, S, walk.ids)
    off = 1.0
    while True:
        for c in children[node + 1]:
            a, rest, rest_off = support_stage(left, off, walk.laws[c], walk.at[c], mass_off)
            if us[c] < a:
                path.append(c)
                node = c
                left, p, mass_off = _support_row(target_probs, c + 1, S, walk.ids)
                off = 1.0
                break
            left, off = rest, rest_off
        else:  # every child rejected (or none): one token from what is left
            cdf = _cumsum64(left)
            point = us[N] * (float(cdf[-1]) + off * mass_off)
            if point < cdf[-1]:  # on S, by inverse CDF
                last = int(walk.ids[min(int(np.searchsorted(cdf, point, side="right")), m - 1)])
            else:  # off S, where what is left is p, rescaled
                last = int(sample(p.index_fill(0, S, 0), generator))
            out = [walk.tokens[i] for i in path] + [last]
            return Verdict(torch.tensor(out, device=device), len(path)), path


def _support_row(
    target_probs: torch.Tensor | WarpedRows, r: int, S: torch.Tensor, ids: np.ndarray
) -> tuple[np.ndarray, torch.Tensor, float]:
    """Target row ``r``: its float64 values on ``S`` (``ids`` on the host), the row, and its mass
    off ``S``; a NaN row raises."""
    p = target_probs[r]
    if p.device.type == "cpu":
        row = _host_array(p)
        on = row[ids].astype(np.float64)
        total = float(row.sum(dtype=np.float64))
    else:
        on = _host_array(p.index_select(0, S)).astype(np.float64)
        total = float(p.sum(dtype=torch.float64))
    if total != total:
        raise ValueError(NAN_MESSAGE)
    return on, p, max(0.0, total - float(on.sum()))


# devices where greedy verification reduces only the rows it reads, one by one
_ROW_BY_ROW = ("cpu",)


def verify_tree_greedy(
    tokens: torch.Tensor, parents: Sequence[int], target_logits: torch.Tensor
) -> tuple[Verdict, list[int]]:
    """:func:`verify_tree` for greedy decoding, from the logits ``[N + 1, V]``. With point masses on
    the argmax ``a``, a candidate is accepted iff it is ``a`` and a rejection leaves the point mass
    on ``a``: the step takes each parent's argmax child while there is one, then ends with the
    argmax. No random numbers; a NaN or ``+inf`` row read raises."""
    tokens = torch.as_tensor(tokens)
    par = check_tree(tokens, parents)
    N, V = tokens.numel(), target_logits.shape[-1]
    if target_logits.dim() != 2 or target_logits.shape[0] != N + 1:
        raise ValueError(
            f"target_logits must be [N + 1, V] = [{N + 1}, V], got {tuple(target_logits.shape)}"
        )
    if target_logits.device.type in _ROW_BY_ROW:
        ids_h = tokens.tolist()
        if any(not 0 <= t < V for t in ids_h):
            raise ValueError(ids_message("tokens", V))

        def argmax(r: int) -> int:
            best, bad = greedy_tokens(target_logits[r])
            if bad:
                raise ValueError(NAN_MESSAGE)
            return int(best)

    else:
        best, bad_row = greedy_tokens(target_logits)
        ids = tokens.to(device=best.device, dtype=torch.long)
        host = torch.cat([best, bad_row.long(), ids, ids_outside(ids, V).long().view(1)])
        host = host.tolist()  # the one host read
        best_h, bad_h, ids_h = host[: N + 1], host[N + 1 : 2 * N + 2], host[2 * N + 2 : -1]
        if host[-1]:
            raise ValueError(ids_message("tokens", V))

        def argmax(r: int) -> int:
            if bad_h[r]:
                raise ValueError(NAN_MESSAGE)
            return best_h[r]

    children = _children(par)
    path: list[int] = []
    node = -1
    while True:
        a = argmax(node + 1)
        for c in children[node + 1]:
            if ids_h[c] == a:
                path.append(c)
                node = c
                break
        else:
            out = [ids_h[i] for i in path] + [a]
            return Verdict(torch.tensor(out, device=target_logits.device), len(path)), path
