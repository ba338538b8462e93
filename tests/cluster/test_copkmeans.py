"""COP-style constrained k-means (in-memory reference of the UCI protocol)."""

from __future__ import annotations

import numpy as np
import pytest

from dclust import metrics
from dclust.cluster._copkmeans import COPKMeans
from dclust.constraints import ConstraintGraph
from dclust.errors import InfeasibleConstraintsError, InvalidDataError, InvalidParameterError


@pytest.fixture(scope="module")
def overlapping():
    """Three overlapping Gaussian classes (k-means alone mixes them)."""
    rng = np.random.default_rng(3)
    y = np.repeat([0, 1, 2], 80)
    X = rng.normal(size=(240, 2)) * 1.3 + np.array([[0, 0], [2.5, 0], [1.2, 2.2]])[y]
    return X, y


def test_noiseless_links_hold_and_help(overlapping):
    X, y = overlapping
    G = ConstraintGraph.from_labels_sample(y, 0.02, rng=0)
    plain = COPKMeans(n_clusters=3, random_state=0).fit(X)
    cop = COPKMeans(n_clusters=3, random_state=0).fit(X, constraints=G)
    a, b, s = G.pairs()
    same = cop.labels_[a] == cop.labels_[b]
    assert same[s > 0].all()  # must-links: always (components move as one)
    # cannot-links: the greedy sweep can corner itself (then the nearest cluster); few are violated
    assert cop.n_violated_[0] == 0 and cop.n_violated_[1] == int(same[s < 0].sum()) <= 0.02 * G.n_cannot
    assert metrics.adjusted_rand_score(y, cop.labels_) > metrics.adjusted_rand_score(y, plain.labels_) + 0.1
    # the reported inertia is that of the labels and centres
    assert cop.inertia_ == pytest.approx(((X - cop.cluster_centers_[cop.labels_]) ** 2).sum())
    np.testing.assert_array_equal(cop.predict(cop.cluster_centers_), np.arange(3))


def test_seeded_runs_repeat_and_must_link_components_move_together(overlapping):
    X, y = overlapping
    G = ConstraintGraph.from_pairs([0, 1, 100], [90, 200, 101], [True, True, False], n_samples=len(y))
    a = COPKMeans(n_clusters=3, random_state=7).fit(X, constraints=G)
    b = COPKMeans(n_clusters=3, random_state=7).fit(X, constraints=G)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert a.labels_[0] == a.labels_[90] and a.labels_[1] == a.labels_[200] and a.labels_[100] != a.labels_[101]
    assert a.n_components_ == len(y) - 2


def test_infeasible_cannot_links_fall_back_to_nearest_or_raise():
    X = np.array([[0.0], [0.1], [0.2], [5.0]])
    G = ConstraintGraph.from_pairs([0, 0, 1], [1, 2, 2], [False, False, False], n_samples=4)  # a 3-clique, k = 2
    m = COPKMeans(n_clusters=2, n_init=2, random_state=0).fit(X, constraints=G)
    assert m.n_violated_[1] >= 1
    with pytest.raises(InfeasibleConstraintsError, match="on_infeasible='nearest'"):
        COPKMeans(n_clusters=2, on_infeasible="raise", random_state=0).fit(X, constraints=G)


def test_bad_input():
    X = np.arange(8, dtype=float).reshape(4, 2)
    all_must = ConstraintGraph.from_pairs([0, 1, 2], [1, 2, 3], True, n_samples=4)
    with pytest.raises(InvalidDataError, match="must-link components"):
        COPKMeans(n_clusters=2).fit(X, constraints=all_must)
    with pytest.raises(InvalidDataError, match="over the 4 rows"):
        COPKMeans(n_clusters=2).fit(X, constraints=ConstraintGraph.from_pairs([0], [1], True, n_samples=5))
    with pytest.raises(InvalidParameterError, match="ConstraintGraph"):
        COPKMeans(n_clusters=2).fit(X, constraints=[(0, 1)])
    with pytest.raises(InvalidDataError, match="max_samples"):
        COPKMeans(n_clusters=2, max_samples=3).fit(X)
    for bad in (dict(n_clusters=0), dict(n_init=0), dict(on_infeasible="skip")):
        with pytest.raises(InvalidParameterError):
            COPKMeans(**bad).fit(X)
