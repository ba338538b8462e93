"""Pixel kernels of the video job (pure numpy/numba): sRGB <-> CIE Lab, and the fused per-frame quantiser.

The quantiser reads every pixel once: colour conversion, nearest palette centre, the output pixel, and the sums
PSNR and flicker need (squared error against the original, ``|Q_t - Q_{t-1}|`` and ``|O_t - O_{t-1}|``).
With D = 3 and a small palette a direct loop beats GEMM; it also starts from the left neighbour's centre and stops
after one distance when that centre is provably nearest (Elkan's bound: ``d(x, c) < s(c)``, half the distance from
``c`` to its nearest other centre), which is exact and takes most pixels of smooth images in one distance.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["srgb_to_lab", "lab_to_srgb", "features", "quantise_rows", "half_gaps"]

_JIT = dict(nogil=True, cache=True, fastmath=False)

# D65 white, sRGB primaries (IEC 61966-2-1)
_M = np.array([[0.4124564, 0.3575761, 0.1804375],
               [0.2126729, 0.7151522, 0.0721750],
               [0.0193339, 0.1191920, 0.9503041]])
_WHITE = np.array([0.95047, 1.0, 1.08883])
_M_INV = np.linalg.inv(_M)
_EPS = (6.0 / 29.0) ** 3
_SLOPE = 1.0 / (3.0 * (6.0 / 29.0) ** 2)

_c = np.arange(256) / 255.0
#: sRGB byte -> linear light
_LINEAR = np.where(_c <= 0.04045, _c / 12.92, ((_c + 0.055) / 1.055) ** 2.4)
#: rows of _M divided by the white point: byte-linear RGB -> X/Xn, Y/Yn, Z/Zn
_MW = _M / _WHITE[:, None]
#: f(t) of Lab tabulated on [0, 1.2] (t <= 1 + 1e-7 for sRGB input), linearly interpolated: |error| < 2e-6
_F_N = 8192
_F_T = np.linspace(0.0, 1.2, _F_N + 1)
_F_TAB = np.where(_F_T > _EPS, np.cbrt(_F_T), _F_T * _SLOPE + 4.0 / 29.0)
_F_SCALE = _F_N / 1.2


@numba.njit(inline="always")
def _f(t, tab, scale):
    u = t * scale
    if u <= 0.0:
        return tab[0]
    i = int(u)
    if i >= tab.shape[0] - 1:
        return tab[tab.shape[0] - 1]
    w = u - i
    return tab[i] + w * (tab[i + 1] - tab[i])


@numba.njit(inline="always")
def _lab(r, g, b, lin, mw, tab, scale, out):
    R, G, B = lin[r], lin[g], lin[b]
    fx = _f(mw[0, 0] * R + mw[0, 1] * G + mw[0, 2] * B, tab, scale)
    fy = _f(mw[1, 0] * R + mw[1, 1] * G + mw[1, 2] * B, tab, scale)
    fz = _f(mw[2, 0] * R + mw[2, 1] * G + mw[2, 2] * B, tab, scale)
    out[0] = 116.0 * fy - 16.0
    out[1] = 500.0 * (fx - fy)
    out[2] = 200.0 * (fy - fz)


@numba.njit(**_JIT)
def _to_lab(P, lin, mw, tab, scale):
    out = np.empty((P.shape[0], 3))
    px = np.empty(3)
    for i in range(P.shape[0]):
        _lab(P[i, 0], P[i, 1], P[i, 2], lin, mw, tab, scale, px)
        out[i, 0], out[i, 1], out[i, 2] = px[0], px[1], px[2]
    return out


def srgb_to_lab(pixels: np.ndarray) -> np.ndarray:
    """CIE Lab (D65) of uint8 sRGB pixels ``(n, 3)`` -> float64 ``(n, 3)``: the conversion every pixel goes through.

    >>> srgb_to_lab(np.array([[255, 255, 255], [0, 0, 0]], np.uint8)).round(2) + 0.0  # + 0.0 turns -0. into 0.
    array([[100.,   0.,   0.],
           [  0.,   0.,   0.]])
    """
    P = np.ascontiguousarray(np.asarray(pixels, dtype=np.uint8).reshape(-1, 3))
    return _to_lab(P, _LINEAR, _MW, _F_TAB, _F_SCALE)


def lab_to_srgb(lab: np.ndarray) -> np.ndarray:
    """Inverse of :func:`srgb_to_lab` for palette colours ``(k, 3)`` -> uint8 sRGB (rounded, clipped to the gamut)."""
    L = np.asarray(lab, dtype=np.float64).reshape(-1, 3)
    fy = (L[:, 0] + 16.0) / 116.0
    f = np.stack([fy + L[:, 1] / 500.0, fy, fy - L[:, 2] / 200.0], axis=1)
    t = np.where(f > 6.0 / 29.0, f ** 3, (f - 4.0 / 29.0) / _SLOPE)
    lin = np.clip((t * _WHITE) @ _M_INV.T, 0.0, 1.0)
    c = np.where(lin <= 0.0031308, 12.92 * lin, 1.055 * lin ** (1.0 / 2.4) - 0.055)
    return np.clip(np.rint(c * 255.0), 0, 255).astype(np.uint8)


def features(pixels: np.ndarray, colorspace: str) -> np.ndarray:
    """Feature vectors (float64) of uint8 RGB pixels in ``colorspace`` ("rgb": values 0..255, or "lab")."""
    P = np.asarray(pixels).reshape(-1, 3)
    return srgb_to_lab(P) if colorspace == "lab" else P.astype(np.float64)


def palette_rgb(centers: np.ndarray, colorspace: str) -> np.ndarray:
    """uint8 RGB of feature-space centres (the same conversion for every pixel of a cluster)."""
    C = np.asarray(centers, dtype=np.float64).reshape(-1, 3)
    return lab_to_srgb(C) if colorspace == "lab" else np.clip(np.rint(C), 0, 255).astype(np.uint8)


def half_gaps(C: np.ndarray) -> np.ndarray:
    """``s(c) = min_{c' != c} ||c - c'|| / 2`` (inf for a single centre)."""
    C = np.asarray(C, dtype=np.float64)
    if C.shape[0] < 2:
        return np.full(C.shape[0], np.inf)
    d = np.sqrt(((C[:, None, :] - C[None, :, :]) ** 2).sum(axis=2))
    np.fill_diagonal(d, np.inf)
    return d.min(axis=1) / 2.0


_CELL_BITS = 1  # cells of 2 x 2 x 2 byte values: 128^3 cells (lazily filled)
_NC = 256 >> _CELL_BITS
_MAX_CAND = 8


@numba.njit(inline="always")
def _box_bounds(r, g, b, lab, lin, mw, tab, scale, lo, hi):
    """Feature-space bounding box of the RGB cell holding byte values (r, g, b) (cell corners)."""
    w = (1 << _CELL_BITS) - 1
    r0, g0, b0 = (r >> _CELL_BITS) << _CELL_BITS, (g >> _CELL_BITS) << _CELL_BITS, (b >> _CELL_BITS) << _CELL_BITS
    if not lab:
        lo[0], lo[1], lo[2] = r0, g0, b0
        hi[0], hi[1], hi[2] = r0 + w, g0 + w, b0 + w
        return
    # every coefficient of the RGB -> XYZ matrix is positive and f is increasing, so fx, fy, fz are increasing
    # in each of R, G, B: their ranges over the cell are reached at the low and high corners
    R0, G0, B0, R1, G1, B1 = lin[r0], lin[g0], lin[b0], lin[r0 + w], lin[g0 + w], lin[b0 + w]
    fx0 = _f(mw[0, 0] * R0 + mw[0, 1] * G0 + mw[0, 2] * B0, tab, scale)
    fy0 = _f(mw[1, 0] * R0 + mw[1, 1] * G0 + mw[1, 2] * B0, tab, scale)
    fz0 = _f(mw[2, 0] * R0 + mw[2, 1] * G0 + mw[2, 2] * B0, tab, scale)
    fx1 = _f(mw[0, 0] * R1 + mw[0, 1] * G1 + mw[0, 2] * B1, tab, scale)
    fy1 = _f(mw[1, 0] * R1 + mw[1, 1] * G1 + mw[1, 2] * B1, tab, scale)
    fz1 = _f(mw[2, 0] * R1 + mw[2, 1] * G1 + mw[2, 2] * B1, tab, scale)
    lo[0], hi[0] = 116.0 * fy0 - 16.0, 116.0 * fy1 - 16.0
    lo[1], hi[1] = 500.0 * (fx0 - fy1), 500.0 * (fx1 - fy0)
    lo[2], hi[2] = 200.0 * (fy0 - fz1), 200.0 * (fy1 - fz0)


@numba.njit(inline="always")
def _fill_cell(cell, r, g, b, lab, C, lin, mw, tab, scale, ncand, cand, lo, hi):
    """Candidates of one cell: the centres whose distance to the box can be the smallest (exact pruning)."""
    _box_bounds(r, g, b, lab, lin, mw, tab, scale, lo, hi)
    k = C.shape[0]
    upper = np.inf
    for j in range(k):  # U = min_j maxdist(box, c_j)
        s = 0.0
        for d in range(3):
            t = max(abs(C[j, d] - lo[d]), abs(C[j, d] - hi[d]))
            s += t * t
        if s < upper:
            upper = s
    n = 0
    for j in range(k):
        s = 0.0
        for d in range(3):
            t = 0.0
            if C[j, d] < lo[d]:
                t = lo[d] - C[j, d]
            elif C[j, d] > hi[d]:
                t = C[j, d] - hi[d]
            s += t * t
        if s <= upper:
            if n < _MAX_CAND:
                cand[cell, n] = j
            n += 1
    ncand[cell] = n if n <= _MAX_CAND else -1


@numba.njit(**_JIT)
def _quantise_rows(O, r0, r1, lab, C, pal, prevO, prevQ, has_prev, Q, ncand, cand, lin, mw, tab, scale):
    """Rows ``r0:r1`` of frame ``O`` (H, W, 3) uint8: write ``Q`` and return (sse, sum|dQ|, sum|dO|).

    ``ncand`` (32^3,) int16 is 0 for a cell not yet seen (filled on first use), else its number of candidates
    (``-1``: more than ``_MAX_CAND``, scan every centre); ``cand`` holds them. Threads working on disjoint rows may
    share the table: a cell is filled completely before its count is set, and refilling gives the same content.
    """
    k = C.shape[0]
    x = np.empty(3)
    lo = np.empty(3)
    hi = np.empty(3)
    sse = 0
    dq = 0
    do = 0
    for r in range(r0, r1):
        for c in range(O.shape[1]):
            p0, p1, p2 = O[r, c, 0], O[r, c, 1], O[r, c, 2]
            cell = ((np.int64(p0) >> _CELL_BITS) * _NC + (np.int64(p1) >> _CELL_BITS)) * _NC + (
                np.int64(p2) >> _CELL_BITS)
            n = ncand[cell]
            if n == 0:
                _fill_cell(cell, p0, p1, p2, lab, C, lin, mw, tab, scale, ncand, cand, lo, hi)
                n = ncand[cell]
            if n == 1:
                bk = cand[cell, 0]
            else:
                if lab:
                    _lab(p0, p1, p2, lin, mw, tab, scale, x)
                else:
                    x[0], x[1], x[2] = np.float64(p0), np.float64(p1), np.float64(p2)
                best = np.inf
                bk = 0
                m = n if n > 0 else k
                for i in range(m):
                    j = cand[cell, i] if n > 0 else i
                    t0 = x[0] - C[j, 0]
                    t1 = x[1] - C[j, 1]
                    t2 = x[2] - C[j, 2]
                    d = t0 * t0 + t1 * t1 + t2 * t2
                    if d < best:  # candidates are in increasing index: lowest index on ties
                        best = d
                        bk = j
            q0, q1, q2 = pal[bk, 0], pal[bk, 1], pal[bk, 2]
            Q[r, c, 0], Q[r, c, 1], Q[r, c, 2] = q0, q1, q2
            e0 = np.int64(p0) - np.int64(q0)
            e1 = np.int64(p1) - np.int64(q1)
            e2 = np.int64(p2) - np.int64(q2)
            sse += e0 * e0 + e1 * e1 + e2 * e2
            if has_prev:
                dq += (abs(np.int64(q0) - np.int64(prevQ[r, c, 0])) + abs(np.int64(q1) - np.int64(prevQ[r, c, 1]))
                       + abs(np.int64(q2) - np.int64(prevQ[r, c, 2])))
                do += (abs(np.int64(p0) - np.int64(prevO[r, c, 0])) + abs(np.int64(p1) - np.int64(prevO[r, c, 1]))
                       + abs(np.int64(p2) - np.int64(prevO[r, c, 2])))
    return sse, dq, do


class CellTable:
    """The per-palette table of candidate centres per RGB cell (filled lazily by the quantiser)."""

    def __init__(self) -> None:
        self.ncand = np.zeros(_NC ** 3, dtype=np.int16)
        self.cand = np.zeros((_NC ** 3, _MAX_CAND), dtype=np.int16)

    def reset(self) -> None:
        self.ncand[:] = 0


def quantise_rows(O, r0, r1, colorspace, C, pal, prevO, prevQ, Q, table=None):
    """Quantise rows ``r0:r1`` of ``O`` into ``Q`` (see module doc); returns integer ``(sse, dq, do)``.

    ``C`` (k, 3) are the centres in ``colorspace``, ``pal`` (k, 3) their uint8 RGB; ``prevO``/``prevQ`` the previous
    original and quantised frames, or None for the first frame. ``table`` is a :class:`CellTable` reset for this
    palette (shared by the threads quantising other rows of the same frame), or None for a fresh one.
    """
    C = np.ascontiguousarray(C, dtype=np.float64)
    if table is None:
        table = CellTable()
    has_prev = prevO is not None
    if not has_prev:
        prevO = prevQ = O[:1, :1]
    return _quantise_rows(O, r0, r1, colorspace == "lab", C, np.ascontiguousarray(pal), prevO, prevQ, has_prev, Q,
                          table.ncand, table.cand, _LINEAR, _MW, _F_TAB, _F_SCALE)


def quantise_numpy(O, colorspace, C, pal):
    """Plain-numpy twin of the quantiser (the test oracle): the quantised frame ``(H, W, 3)`` uint8."""
    X = features(O.reshape(-1, 3), colorspace)
    d = ((X[:, None, :] - np.asarray(C, np.float64)[None, :, :]) ** 2).sum(axis=2)
    return np.asarray(pal, np.uint8)[np.argmin(d, axis=1)].reshape(O.shape)
