"""The cost model (``specdec_lib.costs``): the closed forms, tokens per step of chains and chain
trees (checked by Monte Carlo through the verifiers), and a step of any shape over pass costs."""

import math

import numpy as np
import pytest
import torch

from specdec_lib.costs import (
    as_tree,
    chain_tokens_per_step,
    draft_cost,
    drafted_parents,
    drafted_tokens,
    drafted_widths,
    expected_tokens_per_step,
    optimal_K,
    predicted_from_costs,
    predicted_speedup,
    predicted_stopped_speedup,
    predicted_tree_speedup,
    step_cost,
    tree_prediction,
    tree_tokens_per_step,
    walltime_speedup,
)
from specdec_lib.research.speed.tuning import best_chain_tree, monotone_costs
from specdec_lib.sampling import verify
from specdec_lib.trees import chain_tree, verify_tree


def test_expected_tokens_closed_form():
    assert expected_tokens_per_step(0.0, 5) == 1.0
    assert expected_tokens_per_step(1.0, 5) == 6.0
    a, K = 0.7, 4
    assert math.isclose(expected_tokens_per_step(a, K), sum(a**i for i in range(K + 1)))
    np.testing.assert_allclose(expected_tokens_per_step(np.array([0.5, 1.0]), 3), [1.875, 4.0])


def test_expected_tokens_monte_carlo():
    """With q_i, p_i fixed so that every position accepts with probability alpha exactly."""
    alpha, K, n = 0.6, 4, 4000
    p = torch.tensor([[0.6, 0.4, 0.0]] * (K + 1))
    q = torch.tensor([[0.0, 0.4, 0.6]] * K)  # sum min(p, q) = 0.4 ... use p swapped
    q = torch.tensor([[0.6, 0.0, 0.4]] * K)  # sum min(p, q) = 0.6
    g = torch.Generator().manual_seed(0)
    total = 0
    for _ in range(n):
        x = torch.multinomial(q, 1, generator=g).view(-1)
        total += len(verify(x, q, p, g).tokens)
    e = expected_tokens_per_step(alpha, K)
    assert abs(total / n - e) < 4 * math.sqrt(2.0 / n)


def test_walltime_and_optimal_K():
    assert math.isclose(walltime_speedup(0.8, 4, 0.05), (1 - 0.8**5) / (0.2 * 1.2))
    assert optimal_K(0.0, 0.1) == 1
    assert optimal_K(0.9, 0.01) > 5
    assert predicted_speedup(0.5, 2, 0.1, [1.0, 1.1, 1.2]) == pytest.approx(1.75 / 1.4)


@pytest.mark.parametrize("bad", [-0.1, 1.1, float("nan")])
def test_bad_alpha(bad):
    with pytest.raises(ValueError, match="alpha"):
        expected_tokens_per_step(bad, 3)


def test_tree_tokens_reduce_to_the_chain():
    for a, K in ((0.0, 3), (0.6, 4), (1.0, 2)):
        assert math.isclose(
            tree_tokens_per_step([a] * K, [0.0] * K), expected_tokens_per_step(a, K)
        )
    # an alternative always accepted at depth 1: one more token whenever the chain stops there
    assert math.isclose(tree_tokens_per_step([0.5], [1.0]), 0.5 * 2 + 0.5 * 2)


def test_tree_tokens_monte_carlo():
    """Steps of a chain tree (2, 2, 2) with the same p and q at every node: the mean tokens per
    step match the formula at the rates the same steps show."""
    K, n = 3, 4000
    p = torch.tensor([0.5, 0.3, 0.2, 0.0])
    q = torch.tensor([0.1, 0.2, 0.3, 0.4])
    g = torch.Generator().manual_seed(1)
    reached, chain, rejected, alt, total = np.zeros(K), np.zeros(K), np.zeros(K), np.zeros(K), 0
    for _ in range(n):
        d = torch.multinomial(q, K, replacement=True, generator=g)
        nodes, parents, laws = chain_tree(d, q.expand(K, -1), (2, 2, 2), g)
        verdict, path = verify_tree(nodes, parents, laws, p.expand(len(nodes) + 1, -1), g)
        total += len(verdict.tokens)
        on_chain = sum(1 for i, node in enumerate(path) if node == i)
        reached[: min(on_chain + 1, K)] += 1
        chain[:on_chain] += 1
        if on_chain < K:
            rejected[on_chain] += 1
            alt[on_chain] += len(path) > on_chain
    E = tree_tokens_per_step(chain / reached, alt / rejected)
    assert abs(total / n - E) < 0.03 * E


@pytest.mark.parametrize(
    "beta, gamma", [([0.5], [0.1, 0.2]), ([1.5], [0.0]), ([0.5], [float("nan")])]
)
def test_tree_tokens_bad_rates(beta, gamma):
    with pytest.raises(ValueError, match="beta|gamma"):
        tree_tokens_per_step(beta, gamma)


def test_chain_tokens_per_step_by_position():
    # 1 + a1 + a1 a2 + a1 a2 a2 (the last rate repeats)
    assert math.isclose(chain_tokens_per_step([0.8, 0.5], 3), 1 + 0.8 + 0.4 + 0.2)
    assert chain_tokens_per_step([1.0, 1.0], 3) == 4
    assert math.isclose(chain_tokens_per_step([0.7], 4), expected_tokens_per_step(0.7, 4))
    with pytest.raises(ValueError, match="alpha_by_position"):
        chain_tokens_per_step([], 2)


def test_a_shape_is_a_tree_and_a_width_is_a_one_depth_tree():
    assert as_tree(3) == (3,) and as_tree([4, 3]) == (4, 3) and as_tree((1,)) == (1,)
    for bad in ([], "43", 0, [2, 0], 2.5, None):
        with pytest.raises(ValueError, match="tree"):
            as_tree(bad)
    # drafted tokens: the chain K, width w K + w - 1, a tree every node cut at depth K
    assert drafted_tokens(3) == 3 and drafted_tokens(3, 2) == drafted_tokens(3, (2,)) == 4
    assert drafted_tokens(1, [3, 2]) == 3 and drafted_tokens(4, tree=[3, 2]) == 7


@pytest.mark.parametrize(("K", "tree"), [(1, (1,)), (3, (1,)), (1, (4, 3)), (3, (4, 3)), (4, (2,))])
def test_drafted_parents_are_the_tree_chain_tree_builds(K, tree):
    """The tree a pass over drafted_tokens + 1 tokens checks: the chain, then each depth's
    alternatives, as chain_tree builds them when every alternative is found."""
    g = torch.Generator().manual_seed(0)
    q = torch.softmax(torch.randn(K, 50, generator=g), -1)
    drafts = torch.multinomial(q, 1, generator=g).view(-1)
    _, parents, _ = chain_tree(drafts, q, tree, g)
    assert drafted_parents(K, tree) == parents
    assert len(parents) == drafted_tokens(K, tree)


def test_step_cost_and_the_iid_prediction():
    costs = {"t_draft_s": 0.1, "t_target_s": [1.0, 1.1, 1.2, 1.3, 1.5]}
    assert math.isclose(step_cost(2, costs), (0.2 + 1.2) / 1.0)  # a pass over 3 tokens
    assert math.isclose(step_cost(2, costs, (2,)), (0.2 + 1.3) / 1.0)  # one more candidate
    # a later depth costs what the measurement says it adds to a proposal
    costs_next = costs | {"t_draft_next_s": 0.04}
    assert math.isclose(draft_cost(3, costs_next), 0.1 + 2 * 0.04) and draft_cost(0, costs) == 0
    assert math.isclose(step_cost(2, costs_next), (0.14 + 1.2) / 1.0)
    # every proposal length timed: read as timed, past the longest at its last increment
    by_k = costs_next | {"t_draft_by_k_s": [0.1, 0.17, 0.21]}
    assert [draft_cost(k, by_k) for k in (1, 2, 3)] == [0.1, 0.17, 0.21]
    assert math.isclose(draft_cost(5, by_k), 0.21 + 2 * 0.04)
    assert math.isclose(step_cost(2, by_k), (0.17 + 1.2) / 1.0)
    assert math.isclose(
        predicted_from_costs(0.5, 2, costs, 2), expected_tokens_per_step(0.5, 2) / 1.5
    )
    # the chain at measured costs is predicted_speedup
    assert math.isclose(
        predicted_from_costs(0.5, 2, costs), predicted_speedup(0.5, 2, 0.1, costs["t_target_s"])
    )
    with pytest.raises(ValueError, match="t_target_s covers passes up to 5 tokens"):
        step_cost(3, costs, (3,))


def test_a_steps_host_work_is_charged_on_both_sides_where_the_costs_time_it():
    from specdec_lib.costs import base_cost, host_cost

    costs = {"t_draft_by_k_s": [0.1, 0.17, 0.21], "t_target_s": [1.0, 1.1, 1.2, 1.3, 1.5]}
    assert host_cost(2, costs) == 0.0 and base_cost(costs) == 1.0  # untimed: passes alone
    timed = costs | {"t_host_s": {"0": 0.02, "1": 0.05, "3": 0.08}}
    assert base_cost(timed) == pytest.approx(1.02)  # the baseline's token: its pass and draw
    # timed K as timed; between them linear (a cell's last steps draft fewer); past, the last
    assert [host_cost(k, timed) for k in (0, 1, 3)] == pytest.approx([0.02, 0.05, 0.08])
    assert host_cost(2, timed) == pytest.approx(0.065) and host_cost(5, timed) == 0.08
    assert step_cost(2, timed) == pytest.approx((0.17 + 1.2 + 0.065) / 1.02)
    assert step_cost(1, timed, (3,)) == pytest.approx((0.1 + 1.3 + 0.05) / 1.02)
    assert step_cost(2, timed) > step_cost(2, costs)  # the step does more host work than a draw


def test_tree_prediction_at_measured_rates():
    rates = {"beta": [0.5, 0.4], "gamma": [[0.0, 0.3], [0.0, 0.2]]}
    costs = {"t_draft_s": 0.1, "t_target_s": [1.0, 1.0, 1.1, 1.2, 1.3]}
    E, cost = tree_prediction(rates, 2, (2, 2), costs)
    assert math.isclose(E, tree_tokens_per_step([0.5, 0.4], [0.3, 0.2]))
    assert math.isclose(cost, step_cost(2, costs, (2, 2)))
    assert math.isclose(predicted_tree_speedup(rates, 2, (2, 2), costs), E / cost)
    # a chain at the same rates: no alternatives counted
    E1, _ = tree_prediction(rates, 2, (1,), costs)
    assert math.isclose(E1, tree_tokens_per_step([0.5, 0.4], [0.0, 0.0]))
    with pytest.raises(ValueError, match="rates cover 2 depths"):
        tree_prediction(rates, 3, (1,), costs)


RATES = {
    "beta": [0.45, 0.35, 0.3],
    "gamma": [[0.0, 0.2, 0.3, 0.35], [0.0, 0.15, 0.2, 0.22], [0.0] * 4],
}


def _brute_force(rates, K, costs, widths, max_drafted):
    import itertools

    shapes = [
        s
        for s in itertools.product(*[range(1, w + 1) for w in widths[:K]])
        if drafted_tokens(K, s) <= min(max_drafted, len(costs["t_target_s"]) - 1)
    ]
    return max(predicted_tree_speedup(rates, K, s, costs) for s in shapes)


@pytest.mark.parametrize("slope", [0.0, 0.02, 0.3])
def test_best_chain_tree_is_the_best_shape_the_rates_cover(slope):
    costs = {"t_draft_s": 0.05, "t_target_s": [1.0 + slope * n for n in range(12)]}
    widths = [4, 4, 1]  # the rates were measured with (4, 4): one candidate at depth 3
    for K in (1, 2, 3):
        best = best_chain_tree(RATES | {"widths": widths}, K, costs, max_drafted=K + 5)
        assert best["predicted_speedup"] == pytest.approx(
            _brute_force(RATES, K, costs, widths, K + 5)
        )
        assert best["drafted"] == drafted_tokens(K, best["tree"]) <= K + 5
        assert best["tree"] == list(as_tree(best["tree"])) and (
            best["tree"] == [1] or best["tree"][-1] > 1
        )
    # passes that cost nothing more for more tokens: every alternative pays; dear ones: the chain
    if slope == 0.0:
        assert best_chain_tree(RATES | {"widths": widths}, 2, costs)["tree"] == [4, 4]
    if slope == 0.3:
        assert best_chain_tree(RATES | {"widths": widths}, 1, costs)["tree"] == [1]


def test_best_chain_tree_refuses_what_it_cannot_rank():
    costs = {"t_draft_s": 0.05, "t_target_s": [1.0, 1.0]}
    with pytest.raises(ValueError, match="rates cover 3 depths, K = 4"):
        best_chain_tree(RATES, 4, costs)
    with pytest.raises(ValueError, match="covers no step of K = 2"):
        best_chain_tree(RATES, 2, costs)
    with pytest.raises(ValueError, match="max_drafted"):
        best_chain_tree(RATES, 1, costs, max_drafted=0)
    # a tie goes to the smaller tree: alternatives that are never accepted cost nothing here
    flat = {"t_draft_s": 0.05, "t_target_s": [1.0] * 6}
    never = {"beta": [0.5], "gamma": [[0.0, 0.0, 0.0]]}
    assert best_chain_tree(never, 1, flat)["tree"] == [1]


def test_tuned_trees_rank_on_monotone_costs_and_say_when_no_tree_pays():
    from specdec_lib.research.speed.tuning import tuned_trees

    rates = RATES | {"widths": [4, 4, 1], "file": "f", "temperature": 1.0, "draft": "d"}
    rates |= {"head_sha256": "abc"}
    # a pass over 3 tokens timed cheaper than one over 2: noise, which would flatter the tree
    dip = {"t_draft_s": 0.05, "t_target_s": [1.0, 1.3, 1.02, 1.35, 1.4, 1.45, 1.5, 1.55, 1.6]}
    raw = best_chain_tree(rates, 1, dip, max_drafted=8)
    tuned = tuned_trees(rates, [1], dip)
    assert tuned["by_K"]["1"] == best_chain_tree(rates, 1, monotone_costs(dip), max_drafted=8)
    assert tuned["by_K"]["1"]["predicted_speedup"] < raw["predicted_speedup"] - 0.1
    assert tuned["costs"] == "monotone" and tuned["pays"] is True
    # every further token as dear as a whole pass: nothing pays
    dear = {"t_draft_s": 0.05, "t_target_s": [1.0 + n for n in range(9)]}
    assert tuned_trees(rates, [1, 2], dear)["pays"] is False


def test_a_steps_law_has_the_mean_of_the_tree_model():
    from specdec_lib.costs import tree_step_law

    beta, gamma = [0.6, 0.5, 0.4], [0.3, 0.2, 0.0]
    law = tree_step_law(beta, gamma)
    assert law.shape == (5,) and law[0] == 0 and law.sum() == pytest.approx(1.0)
    assert (law * np.arange(5)).sum() == pytest.approx(tree_tokens_per_step(beta, gamma))


@pytest.mark.parametrize("host", [None, {"0": 0.02, "1": 0.05, "3": 0.07}])
def test_the_cells_prediction_is_the_simulated_cells_and_tends_to_the_endless_one(host):
    from specdec_lib.costs import base_cost, drafted_widths, predicted_cell_speedup, tree_step_law

    costs = {
        "t_draft_s": 0.05,
        "t_draft_next_s": 0.03,
        "t_target_s": [1.0 + 0.04 * n for n in range(12)],
    } | ({"t_host_s": host} if host else {})
    K, tree, n, prefill_s = 3, (3, 2), 12, 2.5
    got = predicted_cell_speedup(RATES, K, tree, costs, n, prefill_s)
    prefill = prefill_s / base_cost(costs)  # in the baseline's tokens
    # Monte Carlo over cells as the benchmark decodes them: the prompt's pass gives the first
    # token, each later step drafts min(K, tokens left - 1) with its tree cut there
    rng = np.random.default_rng(0)
    gamma = np.asarray(RATES["gamma"])
    total, cells = 0.0, 20_000
    for _ in range(cells):
        left, spent = n - 1, prefill
        while left > 0:
            k = min(K, left - 1)
            if k == 0:
                spent, left = spent + 1.0, left - 1
                continue
            widths = drafted_widths(k, tree)
            law = tree_step_law(RATES["beta"][:k], [gamma[d, w - 1] for d, w in enumerate(widths)])
            spent += step_cost(k, costs, widths)
            left -= rng.choice(len(law), p=law)
        total += spent
    simulated = (prefill + n - 1) / (total / cells)
    assert got == pytest.approx(simulated, rel=0.01)
    # an endless decode: the model of every step alike
    endless = predicted_tree_speedup(RATES, K, tree, costs)
    assert got < endless
    assert predicted_cell_speedup(RATES, K, tree, costs, 4000, 0.0) == pytest.approx(
        endless, rel=2e-3
    )
    with pytest.raises(ValueError, match="n_tokens"):
        predicted_cell_speedup(RATES, K, tree, costs, 0, 0.0)
    with pytest.raises(ValueError, match="prefill_s"):
        predicted_cell_speedup(RATES, K, tree, costs, 10, -1.0)


def _stop_rates(hazard, go, last, capped):
    """Rates of a draft that stops by confidence, each kind's ``(beta, gamma by depth)`` with
    the gamma of every width but the first."""

    def kind(beta, gamma):
        return {"beta": list(beta), "gamma": [[0.0, g, g] for g in gamma]}

    return {"stop": list(hazard), "go": kind(*go), "last": kind(*last), "capped": kind(*capped)}


GO = ([0.8, 0.75, 0.7], [0.4, 0.3, 0.0])
LAST = ([0.3, 0.25, 0.2], [0.5, 0.45, 0.0])
H_K = 0.5  # how often the draft is unsure at depth K, not observed where K is its cap
STOPPED = _stop_rates(
    [0.3, 0.4], GO, LAST, ([H_K * LAST[0][2] + (1 - H_K) * GO[0][2]] * 3, [0.0] * 3)
)


def test_a_draft_that_never_stops_is_the_fixed_draft():
    from specdec_lib.costs import stopped_step_law, tree_step_law

    costs = {"t_draft_by_k_s": [0.1, 0.15, 0.2], "t_target_s": [1.0 + 0.05 * n for n in range(9)]}
    rates = _stop_rates([0.0, 0.0], GO, LAST, GO)
    gamma = [[0.0, g, g] for g in GO[1]]
    for tree in ((1,), (3, 2)):
        law, cost = stopped_step_law(rates, 3, 3, tree, costs)
        fixed = {"beta": GO[0], "gamma": gamma}
        widths = drafted_widths(3, tree)
        want = tree_step_law(GO[0], [gamma[d][w - 1] for d, w in enumerate(widths)])
        np.testing.assert_allclose(law, want)
        assert cost == pytest.approx(step_cost(3, costs, tree))
        assert predicted_stopped_speedup(rates, 3, tree, costs) == pytest.approx(
            predicted_tree_speedup(fixed, 3, tree, costs)
        )
    # a draft that always stops after its first token is the K = 1 draft of its unsure kind
    law, cost = stopped_step_law(_stop_rates([1.0, 1.0], GO, LAST, GO), 3, 3, (1,), costs)
    np.testing.assert_allclose(law, [0, 1 - LAST[0][0], LAST[0][0], 0, 0])
    assert cost == pytest.approx(step_cost(1, costs))
    with pytest.raises(ValueError, match="above the run's K"):
        stopped_step_law(rates, 4, 3, (1,), costs)


def _stopped_cells(rng, n_cells, n, K, tree, costs, prefill):
    """Cells decoded by a draft that stops by confidence at the rates of ``STOPPED`` (its unsure
    token at depth K with probability ``H_K``), as the benchmark records them, and each cell's
    time in baseline tokens."""
    hazard = [*STOPPED["stop"], H_K]
    cells, times = [], []
    for _ in range(n_cells):
        steps, alts, emitted, spent = [[0, 0, [0]]], [0], 1, prefill
        while emitted < n:
            cap = min(K, n - emitted - 1)
            if cap == 0:
                steps.append([0, 0, [0]])
                alts.append(0)
                emitted, spent = emitted + 1, spent + 1.0
                continue
            kinds = []
            for d in range(cap):
                kinds.append(LAST if rng.random() < hazard[d] else GO)
                if kinds[-1] is LAST:
                    break
            drafted, widths = len(kinds), drafted_widths(len(kinds), tree)
            n_acc, out, alt = drafted, drafted + 1, 0
            for d, (beta, gamma) in enumerate(kinds):
                if rng.random() < beta[d]:
                    continue
                if widths[d] > 1 and rng.random() < gamma[d]:
                    n_acc, out, alt = d + 1, d + 2, 1
                else:
                    n_acc, out = d, d + 1
                break
            steps.append([drafted, n_acc, [0] * out])
            alts.append(alt)
            emitted += out
            spent += step_cost(drafted, costs, tree)
        cells.append({"steps": steps, "alt_index": alts})
        times.append(spent)
    return cells, np.asarray(times)


def test_the_stopped_draft_model_is_the_simulated_cells_at_the_rates_they_show():
    """Cells simulated from a draft that stops by confidence: the rates ``stopped_rates``
    reads from them are the rates they were drawn at, and the cost model at those rates predicts
    the cells' own time, and tends to the endless model."""
    from specdec_lib.bench.analysis import stopped_rates
    from specdec_lib.costs import predicted_cell_speedup

    costs = {"t_draft_by_k_s": [0.1, 0.15, 0.2], "t_target_s": [1.0 + 0.05 * n for n in range(9)]}
    K, tree, n, prefill = 3, (3, 2), 12, 2.0
    cells, times = _stopped_cells(np.random.default_rng(1), 20_000, n, K, tree, costs, prefill)
    got = stopped_rates(cells, K, 3, n)
    np.testing.assert_allclose(got["stop"], STOPPED["stop"], atol=0.01)
    for name in ("go", "last"):
        np.testing.assert_allclose(got[name]["beta"][:2], STOPPED[name]["beta"][:2], atol=0.015)
        np.testing.assert_allclose(
            [g[1] for g in got[name]["gamma"][:2]],
            [g[1] for g in STOPPED[name]["gamma"][:2]],
            atol=0.03,
        )
    assert got["capped"]["beta"][K - 1] == pytest.approx(STOPPED["capped"]["beta"][K - 1], abs=0.02)
    simulated = (prefill + n - 1) / times.mean()
    predicted = predicted_cell_speedup(got, K, tree, costs, n, prefill)
    assert predicted == pytest.approx(simulated, rel=0.01)
    assert predicted_cell_speedup(STOPPED, K, tree, costs, n, prefill) == pytest.approx(
        simulated, rel=0.01
    )
    assert predicted_cell_speedup(STOPPED, K, tree, costs, 4000, 0.0) == pytest.approx(
        predicted_stopped_speedup(STOPPED, K, tree, costs), rel=2e-3
    )
    with pytest.raises(ValueError, match="above its cap"):
        stopped_rates([{"steps": [[0, 0, [0]], [3, 0, [0]]], "alt_index": [0, 0]}], K, 3, 3)


def test_stopped_rates_from_a_larger_cap_split_the_last_depth_and_rank_the_shapes():
    """Rates measured with a larger cap than a run's K know the hazard at depth K: the step at K
    is then the larger cap's step cut at K. Shapes are ranked around the drafts a stopped draft
    makes: where a pass's every further token costs 6% of a one-token pass, a draft that never
    stops is best as the chain, one that mostly stops after its first token buys alternatives."""
    from specdec_lib.costs import stopped_step_law

    costs = {"t_draft_by_k_s": [0.1, 0.15, 0.2], "t_target_s": [1.0 + 0.06 * n for n in range(12)]}
    law, cost = stopped_step_law(STOPPED, 2, 3, (3, 2), costs)
    short = {**STOPPED, "stop": STOPPED["stop"]}  # the same hazards, read at a cap of 2
    np.testing.assert_allclose(stopped_step_law(short, 2, 2, (3, 2), costs)[0], law)
    sure = _stop_rates([0.0, 0.0], GO, LAST, GO)
    unsure = _stop_rates([0.95, 0.95], GO, LAST, GO)
    deep = best_chain_tree(sure, 3, costs, widths=[3, 3, 1])
    shallow = best_chain_tree(unsure, 3, costs, widths=[3, 3, 1])
    assert deep["tree"] == [1] and shallow["tree"][0] > 1
    assert shallow["predicted_speedup"] == pytest.approx(
        predicted_stopped_speedup(unsure, 3, shallow["tree"], costs)
    )


def test_a_stopped_draft_tuned_without_its_stopped_rates_says_so(tmp_path):
    """A run whose draft stops by confidence ranks its shapes with the head's stopped rates at its
    threshold; where they are missing, or measured at another threshold, it ranks them with the
    rates of K drafts a step, and its record says so (the command line prints the note)."""
    import json
    from types import SimpleNamespace

    from specdec_lib.research.speed.tuning import stopped_rates_path, tree_rates_path, tune

    head = tmp_path / "head.safetensors"
    pair = SimpleNamespace(notes={"head_sha256": "abc"}, draft_name="tiny")
    rates = RATES | {"widths": [4, 4, 1]}
    record = {"pair": {"draft": "tiny", "head_sha256": "abc"}}
    by_T = {"1": {"tree_rates": rates}}
    tree_rates_path(head).write_text(json.dumps(record | {"by_temperature": by_T}))
    costs = {"t_draft_s": 0.05, "t_target_s": [1.0 + 0.05 * n for n in range(12)]}
    run = SimpleNamespace(head=str(head), temperature=1.0, K=[1, 2], schedule="threshold")
    fixed = tune(pair, SimpleNamespace(**vars(run) | {"schedule": "fixed"}, threshold=0.4), costs)
    assert "note" not in fixed and fixed["rates"]["file"].endswith("head.tree_rates.json")
    missing = tune(pair, SimpleNamespace(**vars(run), threshold=0.4), costs)
    assert missing["by_K"] == fixed["by_K"] and "no stopped rates" in missing["note"]
    assert f"--head {head}" in missing["note"] and "--threshold 0.4" in missing["note"]
    stopped = STOPPED | {"widths": [3, 3, 1], "threshold": 0.4}
    by_T = {"1": {"stopped_rates": stopped}}
    stopped_rates_path(head).write_text(json.dumps(record | {"by_temperature": by_T}))
    own = tune(pair, SimpleNamespace(**vars(run), threshold=0.4), costs)
    assert "note" not in own and own["rates"]["threshold"] == 0.4
    other = tune(pair, SimpleNamespace(**vars(run), threshold=0.6), costs)
    assert other["by_K"] == fixed["by_K"] and "at threshold 0.4" in other["note"]
