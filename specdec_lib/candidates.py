"""Several candidates for the first draft position, tried in turn by recursive rejection.

One target pass can check several candidates for the next token at once (they sit side by side
in the pass, each seeing the prefix but not the others). They are tried in turn, each against
what is left of the target's law (SpecInfer, Miao et al. 2023, arXiv 2305.09781; drawn without
replacement as in Jeon et al. 2024, arXiv 2402.14160):

    p_1 = p;  try c_i ~ q_i: accept with min(1, p_i(c_i) / q_i(c_i)),
              else p_{i+1} = norm(max(0, p_i - q_i));  after the last, sample p_{w+1}.

Each stage is one ordinary speculative-sampling step whose target is p_i, so by induction (from
the last stage back) the stage-i output has law p_i whatever q_i is, as long as c_i ~ q_i given
the earlier candidates. Hence the token emitted has law p exactly. Drawing c_{i+1} from q with
c_1..c_i removed (q_{i+1}) never wastes a try on a token already rejected (p_{i+1} is 0 there);
greedy decoding uses point masses q_i on the draft's i-th best token, which is the same rule.

Derived and checked by exact enumeration in notebook 01's companion tests
(``tests/test_candidates.py``) and in notebook 06 §5. ``width`` is the number of
candidates for the position (the chain's first token and ``width - 1`` alternatives).

A draft tree applies the same rule at every node (:func:`verify_tree`): start at the last token
before the drafts with ``p`` its target row, try the node's children in the order they were
drawn, move to the accepted child (whose target row becomes ``p``) or, when every child is
rejected, emit a token from what is left of ``p``; a node without children ends the step with a
bonus token from its row. By the argument above each node emits a token of law ``p`` given the
path to it, provided that its children were drawn from the draft's law given that path (and the
earlier siblings, without replacement) and independently of the uniforms: the step's output
follows the target exactly. :func:`chain_tree` builds the tree the decoder drafts: the chain,
with ``widths[d] - 1`` alternatives beside its token at depth ``d + 1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .checks import non_negative_int, positive_int
from .sampling import (
    NAN_MESSAGE,
    Correction,
    Verdict,
    acceptance_probs,
    check_verify_inputs,
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
    "tree_depths",
    "more_candidates",
    "stage_accept",
    "stage_pass_on",
    "verify_candidates",
    "verify_tree",
]


def more_candidates(
    q: torch.Tensor, first: torch.Tensor, n_more: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Up to ``n_more`` more candidates after ``first``, drawn from ``q`` (``[V]``) without
    replacement (``n_more = width - 1``).

    Returns ``(tokens [n], laws [n, V])`` with ``n <= n_more``: ``laws[j]`` is ``q`` with ``first`` and
    the earlier candidates removed, renormalised (the law ``tokens[j]`` was drawn from). Stops
    early when no mass is left (a one-hot ``q`` gives none). One host read per candidate.
    """
    non_negative_int(n_more, "n_more", "alternatives after the first candidate")
    rest = q.float().clone()
    rest[first] = 0
    tokens, laws = [], []
    for _ in range(n_more):
        total = rest.sum()
        if float(total) <= 1e-12:
            break
        law = rest / total
        x = sample(law, generator)
        tokens.append(x)
        laws.append(law)  # a new tensor: rest can be changed in place
        rest[x] = 0
    if not tokens:
        return first.new_empty(0), q.new_empty((0, q.shape[-1]))
    return torch.stack(tokens), torch.stack(laws)


def candidate_stage(
    p: torch.Tensor,
    q: torch.Tensor,
    x: torch.Tensor,
    correction: Correction = residual_correction,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One stage of recursive rejection: ``(probability of accepting x, law passed on)``.

    ``p`` is what is left of the target's law, ``q`` the law ``x`` was drawn from (both ``[V]``);
    the law passed on after a rejection is ``correction(p, q, x)`` (the residual; anything else
    is wrong). The decoder runs the two halves separately (:func:`stage_accept`, and
    :func:`stage_pass_on` only after a rejection), so an exact law built from this function
    tests the code that runs."""
    return stage_accept(p, q, x), stage_pass_on(p, q, x, correction)


def stage_accept(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``min(1, p(x) / q(x))`` for one candidate ``x``."""
    return acceptance_probs(x.view(1), q.view(1, -1), p.view(1, -1))[0]


def stage_pass_on(
    p: torch.Tensor, q: torch.Tensor, x: torch.Tensor, correction: Correction
) -> torch.Tensor:
    """What is left of ``p`` after rejecting ``x ~ q``: ``correction(p, q, x)``."""
    return correction(p.view(1, -1), q.view(1, -1), x.view(1))[0]


def verify_candidates(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    alt_tokens: torch.Tensor,
    alt_probs: torch.Tensor,
    alt_target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    correction: Correction = residual_correction,
) -> tuple[Verdict, int]:
    """:func:`verify` with more candidates for the first draft position.

    ``draft_tokens``/``draft_probs``/``target_probs`` are a chain as in :func:`verify` (its first
    token is the first candidate); ``alt_tokens`` ``[n]`` are the other candidates for the first
    position (``n = width - 1``), ``alt_probs`` ``[n, V]`` the laws they were drawn from, and
    ``alt_target_probs`` ``[n, V]`` the target's law of the token after each. Returns the verdict and the branch:
    ``0`` when the chain's first token was accepted (the rest of the chain is then verified as
    usual), ``j >= 1`` when alternative ``j`` was (a bonus token from ``alt_target_probs[j - 1]``
    follows it), ``-1`` when every candidate was rejected (one token from what is left of ``p``).
    """
    draft_tokens = torch.as_tensor(draft_tokens)
    alt_tokens = torch.as_tensor(alt_tokens)
    check_verify_inputs(draft_tokens, torch.as_tensor(draft_probs), torch.as_tensor(target_probs))
    n = alt_tokens.shape[0] if alt_tokens.dim() == 1 else -1
    V = target_probs.shape[-1]
    if n < 0 or tuple(alt_probs.shape) != (n, V) or tuple(alt_target_probs.shape) != (n, V):
        raise ValueError(
            "alt_tokens must be [n] with alt_probs and alt_target_probs [n, V], got "
            f"{tuple(alt_tokens.shape)}, {tuple(alt_probs.shape)}, {tuple(alt_target_probs.shape)}"
        )
    if alt_tokens.is_floating_point() or alt_tokens.is_complex():
        raise ValueError(f"alt_tokens must hold integer token ids, got dtype {alt_tokens.dtype}")
    K = draft_tokens.shape[0]
    if K == 0 or n == 0:
        return verify(draft_tokens, draft_probs, target_probs, generator, correction=correction), (
            0 if K else -1
        )
    device = target_probs.device
    draft_tokens = draft_tokens.to(device=device, dtype=torch.long)
    alt_tokens = alt_tokens.to(device=device, dtype=torch.long)
    bad_nan, bad_draft, bad_alt = torch.stack(
        [
            has_nan(draft_probs, target_probs, alt_probs, alt_target_probs),
            ids_outside(draft_tokens, V),
            ids_outside(alt_tokens, V),
        ]
    ).tolist()  # one host read for the checks
    if bad_draft:
        raise ValueError(ids_message("draft_tokens", V))
    if bad_alt:
        raise ValueError(ids_message("alt_tokens", V))
    if bad_nan:
        raise ValueError(NAN_MESSAGE)
    cands = [(draft_tokens[0], draft_probs[0].to(device))]
    cands += [(alt_tokens[j], alt_probs[j].to(device)) for j in range(n)]
    left = target_probs[0]
    for j, (x, q) in enumerate(cands):
        a = stage_accept(left, q, x)  # candidate_stage, the law passed on only if needed
        u = torch.rand((), generator=generator, device=device, dtype=torch.float64)
        if float(u) < float(a):
            if j > 0:  # an alternative: the target's pass holds the law of the token after it
                bonus = sample(alt_target_probs[j - 1], generator)
                return Verdict(torch.stack([x, bonus]), 1), j
            if K == 1:  # the chain's only token: a bonus token from p_1
                return Verdict(torch.stack([x, sample(target_probs[1], generator)]), 1), 0
            # the chain's first token: verify the rest of the chain as usual
            rest = verify(
                draft_tokens[1:],
                draft_probs[1:],
                target_probs[1:],
                generator,
                correction=correction,
            )
            return Verdict(torch.cat([x.view(1), rest.tokens]), 1 + rest.n_accepted), 0
        left = stage_pass_on(left, q, x, correction)
    return Verdict(sample(left, generator).view(1), 0), -1


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


def check_tree(tokens: torch.Tensor, parents: Any) -> list[int]:
    """``parents`` as a list, after checking that it describes a tree over ``tokens`` ``[N]``:
    ``parents[i]`` is ``-1`` (a child of the root, the last token before the drafts) or an
    earlier node (``0 <= parents[i] < i``), so nodes come in an order where parents come first."""
    tokens = torch.as_tensor(tokens)
    if tokens.dim() != 1 or tokens.is_floating_point() or tokens.is_complex():
        raise ValueError(
            f"tokens must be a 1-D tensor of token ids, got shape {tuple(tokens.shape)}, "
            f"dtype {tokens.dtype}"
        )
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


def chain_tree(
    d_tokens: torch.Tensor,
    d_probs: torch.Tensor,
    widths: Sequence[int],
    generator: torch.Generator | None = None,
    scores: torch.Tensor | None = None,
) -> tuple[torch.Tensor, list[int], torch.Tensor]:
    """The draft tree along a chain: the chain ``d_tokens`` ``[k]`` (drawn from ``d_probs``
    ``[k, V]``, node ``i`` the child of node ``i - 1``) and, beside its token at depth ``d + 1``,
    up to ``widths[d] - 1`` alternatives, siblings drawn from ``d_probs[d]`` without replacement
    (:func:`more_candidates`); depths past ``len(widths)`` get none.

    With ``scores`` ``[k, V]`` (greedy decoding, one-hot ``d_probs``) the alternatives are point
    masses on the draft's next-best tokens by ``scores[d]`` instead. Returns ``(tokens [N],
    parents [N], laws [N, V])`` for :func:`verify_tree`, the chain first (nodes ``0..k-1``),
    then the alternatives, shallowest first. The chain's draws never depend on the alternatives,
    and the alternatives at a depth depend only on the chain's token there: every node is drawn
    from the draft's law given its path and its earlier siblings, as :func:`verify_tree` needs.
    """
    k = d_tokens.numel()
    tokens, parents, laws = [d_tokens], list(range(-1, k - 1)), [d_probs]
    for d in range(min(k, len(widths))):
        n_more = widths[d] - 1
        if n_more < 1:
            continue
        if scores is None:
            alts, alt_laws = more_candidates(d_probs[d], d_tokens[d], n_more, generator)
        else:
            alts, alt_laws = best_alternatives(scores[d], d_tokens[d], n_more)
        tokens.append(alts.to(d_tokens.device))
        parents += [d - 1] * alts.numel()
        laws.append(alt_laws.to(d_probs.device, d_probs.dtype))
    return torch.cat(tokens), parents, torch.cat(laws)


def best_alternatives(
    scores: torch.Tensor, first: torch.Tensor, n_more: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Up to ``n_more`` point-mass candidates on the best tokens by ``scores`` ``[V]`` after
    ``first`` (greedy decoding); tokens scored ``-inf`` are never candidates."""
    scores = scores.float().clone()
    scores[first] = float("-inf")
    top = scores.topk(min(n_more, scores.numel()))
    alts = top.indices[torch.isfinite(top.values)]
    laws = torch.zeros((alts.numel(), scores.numel()), device=scores.device)
    laws[torch.arange(alts.numel()), alts] = 1.0
    return alts, laws


def verify_tree(
    tokens: torch.Tensor,
    parents: Sequence[int],
    laws: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    correction: Correction = residual_correction,
) -> tuple[Verdict, list[int]]:
    """Recursive rejection down a draft tree.

    Args:
        tokens: ``[N]`` the tree's draft tokens, parents first.
        parents: ``[N]`` each node's parent (``-1``: a child of the root, the token before the
            drafts); a node's children are tried in index order.
        laws: ``[N, V]`` the law each node was drawn from, given its path and earlier siblings.
        target_probs: ``[N + 1, V]``: row 0 the target's law after the root, row ``i + 1`` after
            node ``i`` (given the path to it).
        generator: source of randomness (one uniform per candidate tried).
        correction: what is left of ``p`` after a rejection (the residual; anything else is wrong).

    Returns the verdict (the accepted path's tokens and one more: a bonus token from the last
    accepted node's row when it has no children, else a token from what its rejected children
    left) and the path (accepted node indices, root to leaf).
    """
    tokens = torch.as_tensor(tokens)
    par = check_tree(tokens, parents)
    N, V = tokens.numel(), target_probs.shape[-1]
    laws = torch.as_tensor(laws)
    if tuple(laws.shape) != (N, V) or tuple(target_probs.shape) != (N + 1, V):
        raise ValueError(
            f"laws must be [N, V] = [{N}, {V}] and target_probs [N + 1, V] = [{N + 1}, {V}], got "
            f"{tuple(laws.shape)} and {tuple(target_probs.shape)}"
        )
    device = target_probs.device
    tokens = tokens.to(device=device, dtype=torch.long)
    laws = laws.to(device)
    bad_nan, bad_ids = torch.stack([has_nan(laws, target_probs), ids_outside(tokens, V)]).tolist()
    if bad_ids:
        raise ValueError(ids_message("tokens", V))
    if bad_nan:
        raise ValueError(NAN_MESSAGE)
    children: list[list[int]] = [[] for _ in range(N + 1)]  # children[j + 1]: node j's
    for i, j in enumerate(par):
        children[j + 1].append(i)
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
            return Verdict(torch.cat([tokens[path], last]), len(path)), path
