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


@pytest.mark.parametrize("make", [lambda: dclust.RDPMeans(lam=1.0), lambda: COPKMeans(n_clusters=2)])
def test_constraints_must_be_a_graph_over_the_rows(make):
    X = np.arange(8.0).reshape(4, 2)
    with pytest.raises(InvalidParameterError, match="None or a dclust.ConstraintGraph"):
        make().fit(X, constraints=[(0, 1)])
    with pytest.raises(InvalidDataError, match="over the 4 rows"):
        make().fit(X, constraints=dclust.ConstraintGraph.from_pairs([0], [1], [True], n_samples=5))
