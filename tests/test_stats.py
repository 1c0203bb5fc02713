import numpy as np
import pytest
import torch

from specdec_lib.research.power import power_gof
from specdec_lib.research.stats import chisquare_gof, holm, merge_bins


def test_merge_bins_reaches_min_expected():
    obs = np.array([10, 1, 0, 2, 30, 1])
    exp = np.array([12, 0.5, 1.0, 2.5, 27, 1.0])
    o, e = merge_bins(obs, exp)
    assert (e >= 5).all() and o.sum() == obs.sum() and np.isclose(e.sum(), exp.sum())


def test_gof_accepts_and_rejects():
    rng = np.random.default_rng(0)
    p = np.array([0.5, 0.2, 0.2, 0.05, 0.05])
    assert chisquare_gof(probs=p, counts=rng.multinomial(5000, p)).pvalue > 1e-3
    q = np.array([0.45, 0.25, 0.2, 0.05, 0.05])
    assert chisquare_gof(probs=p, counts=rng.multinomial(20000, q)).pvalue < 1e-6
    # a token of probability 0 appearing is an immediate failure
    assert chisquare_gof(torch.tensor([0, 1, 2]), [0.5, 0.5, 0.0]).pvalue == 0.0


def test_holm():
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06])


def test_power_increases_with_n():
    p = np.array([0.4, 0.3, 0.2, 0.1])
    q = np.array([0.35, 0.3, 0.2, 0.15])
    assert power_gof(p, q, 200, n_sim=200) < power_gof(p, q, 3000, n_sim=200)
    assert power_gof(p, p, 1000, n_sim=400, level=0.05) == pytest.approx(0.05, abs=0.04)


# ---------------------------------------------------------------------------------------------
# Binning: every bin expects >= 5, whatever the law (notebook 02)
# ---------------------------------------------------------------------------------------------

import copy  # noqa: E402
from collections import Counter  # noqa: E402
from typing import Any  # noqa: E402

from scipy import stats as sps  # noqa: E402

from specdec_lib import costs  # noqa: E402
from specdec_lib.checks import positive_int  # noqa: E402
from specdec_lib.lm import cache_kwargs, last_rows, output_cache  # noqa: E402
from specdec_lib.models import load_pair  # noqa: E402
from specdec_lib.research.power import (  # noqa: E402
    detectable_tv,
    least_favourable,
    power_gof_ncx2,
    toward,
)
from specdec_lib.research.stats import (  # noqa: E402
    NothingToTest,
    accepted_count_law,
    bin_labels,
    chisquare_law,
    exact_continuation_law,
    exact_output_law,
    position_law,
    prototype_output_law,
    step_samples,
    tv,
)
from specdec_lib.sampling import Warp, prototype_correction, verify  # noqa: E402


def _zipf(V, s=1.1):
    p = 1 / np.arange(1, V + 1) ** s
    return p / p.sum()


def test_merge_bins_many_small_bins():
    # A long tail of small expectations (a language model's vocabulary): all of it must be pooled,
    # not just enough of it for the pool to reach 5.
    exp = np.r_[np.full(1000, 0.1), 1, 2, 3, 50.0]
    o, e = merge_bins(exp.copy(), exp)
    assert (e >= 5).all() and np.isclose(e.sum(), exp.sum()) and len(e) == 2
    exp = 3000 * _zipf(5000)
    o, e = merge_bins(np.ones_like(exp), exp)
    assert (e >= 5).all() and o.sum() == 5000 and np.isclose(e.sum(), 3000)


def test_bin_labels_max_bins_and_order():
    exp = 2000 * _zipf(300)
    labels, n_bins = bin_labels(exp, 5.0, max_bins=20)
    assert n_bins == 20 and labels.max() == 19
    merged = np.bincount(labels, weights=exp)
    assert (merged >= 5).all() and np.isclose(merged.sum(), 2000)
    assert (np.diff(merged[:-1]) <= 0).all()  # single bins by decreasing expectation, pool last
    # nothing to pool and few outcomes: one bin each
    labels, n_bins = bin_labels(np.array([10.0, 30.0, 20.0]))
    assert n_bins == 3 and labels.tolist() == [2, 0, 1]
    # a pool too small on its own absorbs the smallest single bins
    labels, n_bins = bin_labels(np.array([50.0, 6.0, 1.0, 1.0]))
    assert n_bins == 2 and np.bincount(labels, weights=[50.0, 6.0, 1.0, 1.0]).tolist() == [50, 8]
    with pytest.raises(ValueError, match="max_bins"):
        bin_labels(exp, 5.0, max_bins=1)


def test_gof_pvalues_uniform_with_long_tail():
    # Under H0 the p-values are uniform (this failed before the tail was pooled in full: a 16 %
    # rejection rate at level 0.01 for this law).
    rng = np.random.default_rng(3)
    p = _zipf(5000)
    pv = np.array(
        [chisquare_gof(probs=p, counts=rng.multinomial(3000, p)).pvalue for _ in range(300)]
    )
    assert sps.kstest(pv, "uniform").pvalue > 1e-3
    assert (pv < 0.01).mean() < 0.04


def test_gof_max_bins():
    rng = np.random.default_rng(4)
    p = _zipf(2000)
    res = chisquare_gof(probs=p, counts=rng.multinomial(20000, p), max_bins=30)
    assert res.n_bins == 30 and res.dof == 29 and res.pvalue > 1e-4
    q = toward(p, _zipf(2000, 1.3), 0.05)
    assert chisquare_gof(probs=p, counts=rng.multinomial(20000, q), max_bins=30).pvalue < 1e-6


# ---------------------------------------------------------------------------------------------
# Exact laws used by notebook 02
# ---------------------------------------------------------------------------------------------


def test_prototype_output_law_closed_form():
    g = torch.Generator().manual_seed(5)
    pairs = [
        (torch.rand(V, generator=g) ** 3, torch.rand(V, generator=g) ** 3) for V in (2, 3, 10, 60)
    ]
    p = torch.tensor([0.5, 0.5, 0.0, 0.0])
    q = torch.tensor([0.0, 0.0, 0.3, 0.7])
    pairs += [
        (p, q),
        (q, p),
        (p, p.clone()),
        (torch.tensor([0.0, 1.0, 0.0]), torch.tensor([0.2, 0.5, 0.3])),
    ]
    for a, b in pairs:
        a, b = a.double(), b.double()
        a, b = a / a.sum(), b / b.sum()
        exact = exact_output_law(a, b, prototype_correction)
        assert tv(prototype_output_law(a, b), exact) < 1e-12


def test_accepted_count_law():
    for alpha in (0.0, 0.3, 0.9, 1.0):
        for K in (1, 4):
            law = accepted_count_law(alpha, K)
            assert np.isclose(law.sum(), 1) and (law >= 0).all()
            mean = float((np.arange(K + 1) * law).sum())
            assert np.isclose(mean + 1, costs.expected_tokens_per_step(alpha, K))
    with pytest.raises(ValueError):
        accepted_count_law(1.5, 2)
    # one rate per position
    law = accepted_count_law([0.5, 0.2, 1.0])
    np.testing.assert_allclose(law, [0.5, 0.5 * 0.8, 0.5 * 0.2 * 0.0, 0.5 * 0.2 * 1.0])
    with pytest.raises(ValueError):
        accepted_count_law([0.5, 0.2], K=2)


# ---------------------------------------------------------------------------------------------
# Samples for the tests
# ---------------------------------------------------------------------------------------------


def _rows(K, V=12, seed=6, zeros=4):
    # Different target and draft distributions at every position, all zero on the first tokens.
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(2 * torch.randn(K + 1, V, generator=g), -1)
    q = torch.softmax(p.log()[:K] + torch.randn(K, V, generator=g), -1)
    p[:, :zeros], q[:, :zeros] = 0, 0
    return p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)


@pytest.mark.parametrize("K", [1, 3, 6])
def test_step_samples_follow_p_at_every_position(K):
    p, q = _rows(K)
    g = torch.Generator().manual_seed(K)
    emitted, accepted = step_samples(p, q, 6000, g)
    assert len(emitted) == K + 1 and len(emitted[0]) == 6000 and len(accepted) == 6000
    for i, tokens in enumerate(emitted):
        assert len(tokens) == int(
            (accepted >= i).sum()
        )  # position i is reached iff i accepted before
        if len(tokens) > 200:
            assert tokens.min() >= 4 and chisquare_gof(tokens, p[i]).pvalue > 1e-3, i
    alphas = torch.minimum(p[:K], q).sum(-1).double().numpy()
    law = accepted_count_law(alphas)
    assert chisquare_gof(probs=law, counts=np.bincount(accepted, minlength=K + 1)).pvalue > 1e-3
    # and without the support restriction
    emitted, _ = step_samples(p, q, 3000, g, restrict_support=False)
    assert chisquare_gof(emitted[0], p[0]).pvalue > 1e-3


def test_step_samples_catch_mixed_up_rows():
    p, q = _rows(2, seed=7)

    def shifted(x, qq, pp, gen):  # a verify that reads the target row of the next position
        return verify(x, qq, torch.cat([pp[1:], pp[-1:]]), gen)

    emitted, _ = step_samples(p, q, 4000, torch.Generator().manual_seed(0), verifier=shifted)
    assert chisquare_gof(emitted[0], p[0]).pvalue < 1e-6


def test_step_samples_first_position_ignores_later_rows():
    p, q = _rows(3, seed=9)
    g = torch.Generator().manual_seed(2)
    wrong = torch.softmax(torch.randn(3, 12, generator=torch.Generator().manual_seed(1)), -1)

    def verifier(x, qq, pp, gen):  # later target rows replaced: only later positions may notice
        return verify(x, qq, torch.cat([pp[:1], wrong[: len(pp) - 1]]), gen)

    emitted, _ = step_samples(p, q, 5000, g, verifier=verifier, restrict_support=False)
    assert chisquare_gof(emitted[0], p[0]).pvalue > 1e-3
    assert chisquare_gof(emitted[1], p[1]).pvalue < 1e-6


def test_step_samples_catch_the_prototype():
    p = torch.tensor([[0.4, 0.3, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25]])
    q = torch.tensor([[0.7, 0.1, 0.1, 0.1]])  # a sharp draft: rejections of a likely token

    def wrong(*args, **kw):
        return verify(*args, correction=prototype_correction)

    emitted, _ = step_samples(p, q, 4000, torch.Generator().manual_seed(0), verifier=wrong)
    assert chisquare_gof(emitted[0], p[0]).pvalue < 1e-6
    # it follows its own exact law instead
    assert chisquare_gof(emitted[0], prototype_output_law(p[0], q[0])).pvalue > 1e-3


def test_step_samples_bad_args():
    p, q = _rows(2)
    with pytest.raises(ValueError, match=r"\[K\+1, V\]"):
        step_samples(p, q[:1, :-1], 10)
    with pytest.raises(ValueError, match="n must"):
        step_samples(p, q, 0)


def sample_continuations(
    target: Any,
    prompt_ids: Any,
    warp: Warp,
    length: int,
    n: int,
    generator: torch.Generator | None = None,
    *,
    batch_size: int = 64,
    use_cache: bool = True,
) -> Counter:
    """``n`` independent draws of the target's next ``length`` tokens after ``prompt_ids``, as a
    ``Counter`` of tuples: a sampler independent of the library's, to check the exact law by.

    The same law as :class:`~specdec_lib.decoding.AutoregressiveDecoder`, computed another way so
    that it is an independent reference. The draws that share a prefix advance together: the prefix
    is scored once and the next tokens of its ``c`` draws are drawn at once with
    ``torch.multinomial`` (not the library's sampler). Prefixes of one length form batches of
    equal-length rows (no padding). With ``use_cache`` the prompt is encoded once and its KV cache
    copied to every row (nothing is ever cropped); without, every row is a full forward pass.
    """
    ids = torch.as_tensor(prompt_ids).view(-1).long()
    positive_int(length, "length", "tokens per continuation")
    positive_int(n, "n", "continuations drawn")
    positive_int(batch_size, "batch_size")
    device = ids.device
    prompt_cache = None
    if use_cache:
        keep = last_rows(1, ids.numel(), device)
        out = target(input_ids=ids.view(1, -1), use_cache=True, logits_to_keep=keep)
        prompt_cache, first_logits = output_cache(out), out.logits[:, -1]
    groups: dict[tuple[int, ...], int] = {(): n}
    for step in range(length):
        prefixes = list(groups)
        new: Counter = Counter()
        for start in range(0, len(prefixes), batch_size):
            chunk = prefixes[start : start + batch_size]
            rows = torch.tensor(chunk, dtype=torch.long, device=device).view(len(chunk), -1)
            if use_cache and step == 0:
                logits = first_logits
            elif use_cache:
                cache = copy.deepcopy(prompt_cache)
                cache.batch_repeat_interleave(len(chunk))
                keep = last_rows(1, rows.shape[1], device)
                logits = target(
                    input_ids=rows, use_cache=True, logits_to_keep=keep, **cache_kwargs(cache)
                ).logits[:, -1]
            else:
                batch = torch.cat([ids.expand(len(chunk), -1), rows], dim=1)
                keep = last_rows(1, batch.shape[1], device)
                logits = target(input_ids=batch, use_cache=False, logits_to_keep=keep).logits[:, -1]
            probs = warp.probs(logits)
            for row, prefix in enumerate(chunk):
                draws = torch.multinomial(
                    probs[row], groups[prefix], replacement=True, generator=generator
                )
                for tok, c in Counter(draws.tolist()).items():
                    new[prefix + (tok,)] += c
        groups = new
    return Counter(groups)


def test_sample_continuations_match_exact_law():
    pair = load_pair("tiny-random")
    prompt = torch.tensor([0, 5, 9, 3])
    warp = Warp(0.9, top_k=12)
    law = exact_continuation_law(pair.target, prompt, warp, 2)
    g = torch.Generator().manual_seed(0)
    counts = sample_continuations(pair.target, prompt, warp, 2, 4000, g, batch_size=7)
    assert sum(counts.values()) == 4000 and set(counts) <= set(law)
    keys = sorted(law)
    res = chisquare_gof(probs=[law[k] for k in keys], counts=[counts[k] for k in keys])
    assert res.pvalue > 1e-3
    again = sample_continuations(
        pair.target, prompt, warp, 2, 4000, torch.Generator().manual_seed(0)
    )
    assert again == counts  # seeded: reproducible


def test_pruned_law_keeps_exact_probabilities_and_leaves_the_rest_unlisted():
    pair = load_pair("tiny-random")
    prompt = torch.tensor([0, 5, 9, 3])
    full = exact_continuation_law(pair.target, prompt, Warp(1.0), 2)
    pruned = exact_continuation_law(pair.target, prompt, Warp(1.0), 2, min_prob=0.01, batch_size=3)
    assert 0 < len(pruned) < len(full) and sum(pruned.values()) < 1
    for k, v in pruned.items():
        assert v == pytest.approx(full[k], rel=1e-5) and v >= 0.01
    # the law against itself passes, pooled unlisted mass included; a biased law fails
    keys = list(full)
    probs = np.array([full[k] for k in keys])
    draws = np.random.default_rng(0).multinomial(20_000, probs / probs.sum())
    counts = {k: int(c) for k, c in zip(keys, draws, strict=True) if c}
    assert chisquare_law(counts, pruned).pvalue > 1e-3
    biased = dict(pruned)
    top = max(biased, key=biased.get)
    biased[top] *= 0.8
    assert chisquare_law(counts, biased).pvalue < 1e-6
    with pytest.raises(ValueError, match="at most 1"):
        chisquare_law(counts, {k: 2 * v for k, v in full.items()})
    with pytest.raises(ValueError, match="min_prob"):
        exact_continuation_law(pair.target, prompt, Warp(1.0), 2, min_prob=-1)


def test_a_test_with_one_bin_has_nothing_to_test():
    # a near-certain position: every sample in one bin; never a silent p = 1
    with pytest.raises(NothingToTest, match="nothing to test"):
        chisquare_gof(probs=[0.999, 0.001], counts=[300, 0])
    with pytest.raises(NothingToTest):
        chisquare_law({(1,): 40}, {(1,): 0.99})
    assert issubclass(NothingToTest, ValueError)


# ---------------------------------------------------------------------------------------------
# Power
# ---------------------------------------------------------------------------------------------


def test_power_approximation_agrees_with_simulation():
    p = _zipf(500)
    q = toward(p, _zipf(500, 1.4), 0.03)
    assert np.isclose(tv(p, q), 0.03)
    for n in (1000, 4000):
        sim = power_gof(p, q, n, level=0.01, n_sim=300, seed=n)
        approx = power_gof_ncx2(p, q, n, level=0.01)
        assert abs(sim - approx) < 0.1, (n, sim, approx)
    assert power_gof_ncx2(p, p, 3000, level=0.01) == pytest.approx(0.01, abs=1e-9)
    with pytest.raises(ValueError, match="tv_target"):
        toward(p, q, 0.5)


def test_detectable_tv_is_a_worst_case_bound():
    # At the detectable TV, the least favourable bias (proportional to pi, half up, half down) has
    # power ~0.9 in the ncx2 approximation; biases in other directions have more.
    n, bins, level = 20000, 30, 1e-3
    t = detectable_tv(n, bins, level=level, power=0.9)
    pi = np.full(bins, 1 / bins)
    worst = pi * (1 + 2 * t * np.where(np.arange(bins) < bins // 2, 1, -1))
    assert np.isclose(tv(pi, worst), t)
    assert power_gof_ncx2(pi, worst, n, level=level) == pytest.approx(0.9, abs=0.01)
    rng = np.random.default_rng(8)
    for _ in range(5):
        other = toward(pi, rng.dirichlet(np.ones(bins)), t)
        assert power_gof_ncx2(pi, other, n, level=level) >= 0.9 - 1e-6
    assert detectable_tv(4 * n, bins, level=level) == pytest.approx(t / 2, rel=1e-4)


def test_least_favourable_bias():
    p = _zipf(3000)
    n, level = 30000, 1e-3
    alt = least_favourable(p, n, 0.02, max_bins=50)
    assert np.isclose(tv(p, alt), 0.02) and np.isclose(alt.sum(), 1) and (alt >= 0).all()
    _, n_bins = bin_labels(n * p, 5.0, 50)
    t = detectable_tv(n, n_bins, level=level)
    # at the detectable TV the least favourable bias has power ~0.9; by simulation too
    worst = least_favourable(p, n, t, max_bins=50)
    assert power_gof_ncx2(p, worst, n, level=level, max_bins=50) == pytest.approx(0.9, abs=0.02)
    assert power_gof(p, worst, n, level=level, n_sim=200, seed=1, max_bins=50) == pytest.approx(
        0.9, abs=0.08
    )
    with pytest.raises(ValueError, match="tv_target"):
        least_favourable(p, n, 0.9)


def test_position_law_projects_listed_sequences_and_pools_the_rest():
    law = {(1, 2): 0.5, (1, 3): 0.2, (4, 2): 0.1}  # 0.2 unlisted
    counts = Counter({(1, 2): 50, (4, 2): 9, (7, 7): 21})
    c1, l1 = position_law(counts, law, 1)
    assert l1 == pytest.approx({(2,): 0.6, (3,): 0.2})
    assert c1 == Counter({(2,): 59, ("unlisted",): 21})
    c0, l0 = position_law(counts, law, 0)
    assert l0 == pytest.approx({(1,): 0.7, (4,): 0.1}) and c0[("unlisted",)] == 21
