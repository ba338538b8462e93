"""The float32 screen of GM-PR's diagonal E-step (dclust.kernels.gmpr._screen): a component within 60 nats of a
row's best (the cut ``_NEGLIGIBLE``) is never dropped, however close to the cut, and the statistics equal the
unscreened numpy reference."""

import numpy as np
import pytest

from dclust.kernels.gmpr import (
    _DIAG_TILE,
    _FEW,
    _MAX_REFINED,
    _NEGLIGIBLE,
    _SPREAD,
    MixtureParams,
    _diag_kernel,
    _diag_screen_weights,
    _screen_consts,
    unlinked_partial,
    unlinked_partial_numpy,
)


def _assert_component_1_kept(X, p):
    """Component 1's weight (made only of ``e⁻⁶⁰``-sized responsibilities) and the other statistics equal the
    unscreened numpy reference's."""
    a, b = unlinked_partial(X, p), unlinked_partial_numpy(X, p)
    assert a.weight[1] > 0.0
    np.testing.assert_allclose(a.weight[:2], b.weight[:2], rtol=1e-10, atol=0.0)
    np.testing.assert_allclose(a.weight, b.weight, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(a.mean[:2], b.mean[:2], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(a.scatter[:2], b.scatter[:2], rtol=1e-9, atol=1e-9 * np.abs(b.scatter[:2]).max())
    assert a.loglik == pytest.approx(b.loglik, rel=1e-12)


@pytest.mark.parametrize("offset", [0.0, 1e3])
def test_a_component_just_inside_the_cut_is_kept(offset):
    """Rows next to component 0 whose log-density under component 1 is between 59.9 and 60 nats below (equal unit
    variances, so the gap is ``12 x_1 − 72`` along the axis joining them, whatever the other features), among 30
    far components (sparse tiles, 64 features as the engine benchmark): component 1's weight is made only of
    those ``e⁻⁶⁰``-sized responsibilities, so dropping any of them would leave it short or at 0 (compared with
    atol = 0). The screen's own slack is then a few thousandths of a nat: a cut moved by 0.05 nat fails here."""
    rng = np.random.default_rng(21)
    D, C = 64, 32
    means = offset + np.zeros((C, D))
    means[1, 0] += 12.0
    far = rng.normal(size=((C - 2) // 2, D)) * 60.0
    means[2:] += np.concatenate([far, -far])  # the means' mean (the screen's origin) near component 0: tight bounds
    p = MixtureParams.build(np.full(C, 1.0 / C), np.ones((C, 1)), means.reshape(C, 1, D), np.ones((C, 1, D)))
    n = 2 * _DIAG_TILE + 11
    X = offset + rng.normal(size=(n, D))
    X[:, 0] = offset + rng.uniform(1.0 + 0.001 / 12, 1.0 + 0.1 / 12, n)  # gap in (-59.9, -59.999)
    X = X.astype(np.float32)
    gap = 12.0 * (X[:, 0].astype(np.float64) - offset) - 72.0
    assert (gap > _NEGLIGIBLE).all() and (gap < _NEGLIGIBLE + 0.2).all()
    _assert_component_1_kept(X, p)


def test_nan_and_inf_in_screened_tiles_are_counted_value_by_value():
    """Separated components (every tile screened and sparse): each NaN or inf value of a kept row counts once,
    a skipped row's do not count, and a finite float64 row whose squared norm overflows (1e200) is not bad (the
    screen counts a row's values only when that norm is not finite)."""
    rng = np.random.default_rng(5)
    D, C = 16, 8
    means = rng.normal(size=(C, 1, D)) * 50.0
    p = MixtureParams.build(np.full(C, 1.0 / C), np.ones((C, 1)), means, np.ones((C, 1, D)))
    n = 3 * _DIAG_TILE
    X = means[rng.integers(0, C, n), 0] + rng.normal(size=(n, D))
    w = _diag_screen_weights(p)
    keep = np.ones(n, bool)
    X[5] = 1e200
    assert _diag_kernel(X, keep, *w)[2] == 0
    X[_DIAG_TILE + 3, [0, 4]] = np.nan  # two values of one row
    X[2 * _DIAG_TILE + 10, 2] = -np.inf
    X[2 * _DIAG_TILE + 11, [1, 2, 3]] = np.inf
    assert _diag_kernel(X, keep, *w)[2] == 6
    assert _diag_kernel(X.astype(np.float32), keep, *w)[2] == 6 + D  # 1e200 is inf in float32
    keep[2 * _DIAG_TILE + 11] = False
    assert _diag_kernel(X, keep, *w)[2] == 3


@pytest.mark.parametrize("offset", [0.0, 1e3])
def test_a_spread_component_just_inside_the_cut_is_kept(offset):
    """Component 1 has variance 4 on four features (precision ratio ~0.26 there, ~1 elsewhere: the screen refines
    its bound with those four taken exactly) and rows 3 away from it on each of them, with their log-density
    under it between 59.9 and 60 nats below their best (component 0's). The plain bound with ratio ~1 on every
    feature would put it ~12.7 nats lower and drop every such pair; the refined one must keep them all."""
    rng = np.random.default_rng(22)
    D, C = 64, 32
    F = [60, 61, 62, 63]
    means = offset + np.zeros((C, D))
    means[1, 0] += 12.0
    far = rng.normal(size=((C - 2) // 2, D)) * 60.0
    means[2:] += np.concatenate([far, -far])
    var = np.ones((C, D))
    var[1, F] = 4.0
    p = MixtureParams.build(np.full(C, 1.0 / C), np.ones((C, 1)), means.reshape(C, 1, D), var.reshape(C, 1, D))
    _, mu, prec, base, sc, _, nv2, lo, hi, kappa = _diag_screen_weights(p)
    K32, KU = np.empty((4, C), np.float32), np.empty((4, C), np.float32)
    RL = _screen_consts(base, lo, hi, np.sqrt(nv2), nv2, kappa, K32, KU, mu, prec, sc)[-1]
    assert RL[1] > 0.0 and (RL[2:] == 0.0).all()  # component 1 alone is refined
    n = 2 * _DIAG_TILE + 11
    X = offset + rng.normal(size=(n, D))
    X[:, F] = offset + 3.0  # t_1 − t_0 = 12 x_0 − 72 − 2 log 4 + 0.375 · 36
    shift = 2.0 * np.log(4.0) - 13.5
    X[:, 0] = offset + (72.0 + shift + _NEGLIGIBLE + rng.uniform(0.001, 0.1, n)) / 12.0
    X = X.astype(np.float32)
    x0 = X[:, 0].astype(np.float64) - offset
    xf = X[:, F].astype(np.float64) - offset
    gap = 12.0 * x0 - 72.0 - 2.0 * np.log(4.0) + 0.375 * (xf**2).sum(axis=1)
    assert (gap > _NEGLIGIBLE).all() and (gap < _NEGLIGIBLE + 0.2).all()
    _assert_component_1_kept(X, p)


def test_many_spread_components_refine_only_a_few():
    """Log-normal variances make most components spread: at most ``_MAX_REFINED`` of them are refined, the
    largest gains first, and the statistics still equal the unscreened reference (sparse tiles)."""
    rng = np.random.default_rng(23)
    D, C = 16, 24
    means = rng.normal(size=(C, 1, D)) * 30.0
    var = np.exp(rng.normal(size=(C, 1, D)))
    p = MixtureParams.build(rng.dirichlet(np.ones(C)), np.ones((C, 1)), means, var)
    _, mu, prec, base, sc, _, nv2, lo, hi, kappa = _diag_screen_weights(p)
    K32, KU = np.empty((4, C), np.float32), np.empty((4, C), np.float32)
    RL = _screen_consts(base, lo, hi, np.sqrt(nv2), nv2, kappa, K32, KU, mu, prec, sc)[-1]
    ratio = np.sort(prec / sc**2, axis=1)
    gain = ratio[:, _FEW] / ratio[:, 0]
    assert (gain >= _SPREAD).sum() > _MAX_REFINED
    assert set(np.flatnonzero(RL > 0.0)) == set(np.argsort(-gain)[:_MAX_REFINED])
    n = 3 * _DIAG_TILE + 5
    lab = rng.integers(0, C, n)
    X = (means[lab, 0] + rng.normal(size=(n, D)) * np.sqrt(var[lab, 0])).astype(np.float32)
    a, b = unlinked_partial(X, p), unlinked_partial_numpy(X, p)
    for f in ("weight", "mean", "scatter"):
        np.testing.assert_allclose(getattr(a, f), getattr(b, f), rtol=1e-10, atol=1e-10 * np.abs(getattr(b, f)).max())
    assert a.loglik == pytest.approx(b.loglik, rel=1e-12)
