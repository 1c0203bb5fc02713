"""Property-based tests of verify on random distributions (hypothesis)."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec_lib.sampling import Warp, sample, verify


@st.composite
def step_inputs(draw):
    V = draw(st.integers(2, 12))
    K = draw(st.integers(0, 6))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)

    def dist():
        logits = torch.randn(V, generator=g) * draw(st.sampled_from([0.1, 1.0, 5.0]))
        mask = torch.rand(V, generator=g) < draw(st.sampled_from([0.0, 0.3, 0.7]))
        mask[torch.randint(0, V, (1,), generator=g)] = False  # keep at least one token
        return torch.softmax(logits.masked_fill(mask, -float("inf")), 0)

    q = torch.stack([dist() for _ in range(K)]) if K else torch.empty(0, V)
    p = torch.stack([dist() for _ in range(K + 1)])
    x = sample(q, g) if K else torch.empty(0, dtype=torch.long)
    return x, q, p, seed


@settings(max_examples=300, deadline=None)
@given(step_inputs())
def test_verify_properties(inputs):
    x, q, p, seed = inputs
    K = x.shape[0]
    v = verify(x, q, p, torch.Generator().manual_seed(seed))
    n = v.n_accepted
    assert 0 <= n <= K
    assert len(v.tokens) == n + 1  # the accepted prefix plus exactly one
    assert torch.equal(v.tokens[:n], x[:n])
    # A token of probability 0 under the target is never emitted: accepted drafts included.
    for i, tok in enumerate(v.tokens.tolist()):
        assert p[i, tok] > 0


@settings(max_examples=100, deadline=None)
@given(
    st.integers(2, 30),
    st.floats(0.05, 3.0),
    st.one_of(st.none(), st.integers(1, 10)),
    st.one_of(st.none(), st.floats(0.05, 1.0)),
    st.integers(0, 1000),
)
def test_warped_support_respected(V, T, top_k, top_p, seed):
    g = torch.Generator().manual_seed(seed)
    w = Warp(T, top_k, top_p)
    p = w.probs(torch.randn(2, V, generator=g))
    q = w.probs(torch.randn(1, V, generator=g))
    x = sample(q, g)
    v = verify(x, q, p, g)
    assert all(p[i, t] > 0 for i, t in enumerate(v.tokens.tolist()))
    if top_k is not None:
        assert int((p[0] > 0).sum()) <= max(top_k, 1) or top_p is not None
