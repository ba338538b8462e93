"""The checks several estimators share live in one place (``dclust._validation``), each with one error class."""

from __future__ import annotations

import numpy as np
import pytest

import dclust
from dclust.cluster._copkmeans import COPKMeans
from dclust.errors import InvalidDataError, InvalidParameterError


@pytest.mark.parametrize("cls", [dclust.DPMeans, dclust.RDPMeans])
@pytest.mark.parametrize("params", [{}, {"lam": 1.0, "n_clusters": 2}])
def test_lam_xor_n_clusters(cls, params):
    with pytest.raises(InvalidParameterError, match="exactly one of lam and n_clusters"):
        cls(**params).fit(np.zeros((5, 2)))


@pytest.mark.parametrize("cls", [dclust.DPMeans, dclust.RDPMeans])
def test_n_clusters_at_most_n_samples(cls):
    with pytest.raises(InvalidParameterError, match="at most n_samples=5"):
        cls(n_clusters=6).fit(np.arange(10.0).reshape(5, 2))


@pytest.mark.parametrize("make", [lambda: dclust.RDPMeans(lam=1.0), lambda: COPKMeans(n_clusters=2),
                                  lambda: dclust.GMPR(n_classes=2), lambda: dclust.TVClust(init_clusters=2)])
def test_constraints_must_be_a_graph_over_the_rows(make):
    X = np.arange(8.0).reshape(4, 2)
    with pytest.raises(InvalidParameterError, match="None or a dclust.ConstraintGraph"):
        make().fit(X, constraints=[(0, 1)])
    with pytest.raises(InvalidDataError, match="over the 4 rows"):
        make().fit(X, constraints=dclust.ConstraintGraph.from_pairs([0], [1], [True], n_samples=5))


@pytest.mark.parametrize("cls", [dclust.DynamicMeans, dclust.SpectralDynamicMeans, dclust.KernelDynamicMeans])
@pytest.mark.parametrize("pair", [{}, {"T_Q": 5.0}, {"Q": 0.1}, {"T_Q": 5.0, "k_tau": 1.1, "Q": 0.1},
                                  {"T_Q": 5.0, "k_tau": 1.1, "Q": 0.1, "tau": 0.5}, {"k_tau": 1.1, "tau": 0.5}])
def test_exactly_one_temporal_pair(cls, pair):
    with pytest.raises(InvalidParameterError, match=r"exactly one complete pair: \(T_Q, k_tau\) or \(Q, tau\)"):
        cls(lam=1.0, **pair).partial_fit(np.zeros((3, 2)))
