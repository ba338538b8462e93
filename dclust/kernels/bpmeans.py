"""BP-means kernels (docs/algorithms.md 2.2, 2.7, 8.3): bit sweeps, the OCC block step, the serial validation of
proposals, the feature update ``A = pinv(G) B``, feature pruning, the objective and a plain serial reference.

Everything here is pure numpy/numba: one block (or the driver's small arrays) in, arrays out.

Arithmetic is shared on purpose: the serial reference :func:`bpmeans_reference` performs the same floating-point
operations per row, in the same order, as the numba sweeps, so that OCC and the serial algorithm make the same
decisions on exact ties too. The block kernel settles most rows by a cheaper screen whose decisions are those of
the sweep whenever they are clear beyond a rounding bound; every other row is swept (:func:`_bp_block`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

__all__ = [
    "sweep_rows",
    "feature_norms",
    "serial_sweep",
    "BPBlockResult",
    "bp_block",
    "gram_partial",
    "feature_means",
    "prune_features",
    "bp_objective",
    "collapsed_objective",
    "bpmeans_reference",
    "delete_redundant",
    "serial_bpmeans",
    "sample_restarts",
]

_JIT = dict(nogil=True, cache=True, error_model="numpy")
#: Relative cut-off of the pseudo-inverse of G = Z'Z (relative to its largest singular value, ~ max(G)).
PINV_RCOND = 1e-10


@numba.njit(inline="always", **_JIT)
def _start_row(X, Z, i, A, K, r, zf, on):
    """Set ``r = x_i - sum_{k < K: z_ik = 1} a_k`` (features subtracted in index order) and ``zf[k] = z_ik`` as
    0.0/1.0; returns the number of bits set, listed in ``on[:m]`` (a branch-free compaction)."""
    D = X.shape[1]
    m = 0
    for k in range(K):
        zf[k] = np.float64(Z[i, k])
        on[m] = k
        m += Z[i, k] != 0
    for j in range(D):
        r[j] = np.float64(X[i, j])
    for a in range(m):
        k = on[a]
        for j in range(D):
            r[j] -= A[k, j]
    return m


@numba.njit(inline="always", **_JIT)
def _scores(r, AT, zf, s, k0, K):
    """``s[k] = sum_j (r_j + z_k a_kj) a_kj`` for ``k0 <= k < K``, over j in index order.

    Every bit's sum is formed in the order of the row-by-row sweep, so its value is the same: ``z_k a_kj`` is
    exactly ``a_kj`` or 0, and adding 0 leaves ``r_j``. The features are read transposed (``AT``, (D, >= K)), so
    the inner loop runs over contiguous bits, each with its own accumulator (a vector loop, not one latency-bound
    chain after another)."""
    for k in range(k0, K):
        s[k] = 0.0
    for j in range(r.shape[0]):
        rj = r[j]
        for k in range(k0, K):
            t = AT[j, k]
            s[k] += (rj + zf[k] * t) * t


@numba.njit(inline="always", **_JIT)
def _decide(v, a, cur):
    """T1: bit on when ``v = 2 s_k`` is above ``a = ||a_k||^2``, off below, unchanged on a tie (or NaN)."""
    if cur:
        return not (v < a)
    return v > a


@numba.njit(inline="always", **_JIT)
def _sweep_from(Z, i, A, AT, aa, r, s, zf, first, K):
    """The rest of a sweep whose scores ``s`` are those of the row's state and whose first bit to change is
    ``first`` (K: none): changes the bits ``first..K-1`` as :func:`_sweep` does. Returns the number changed."""
    D = A.shape[1]
    flips = 0
    for k in range(first, K):
        cur = zf[k] != 0.0
        new = _decide(2.0 * s[k], aa[k], cur)
        if new != cur:
            sign = -1.0 if new else 1.0
            for j in range(D):
                r[j] += sign * A[k, j]
            Z[i, k] = 1 if new else 0
            zf[k] = 1.0 if new else 0.0
            flips += 1
            _scores(r, AT, zf, s, k + 1, K)
    return flips


@numba.njit(inline="always", **_JIT)
def _first_change(s, zf, aa, k0, K):
    """The first bit in ``k0..K-1`` whose decision on the scores ``s`` changes it (K: none)."""
    for k in range(k0, K):
        cur = zf[k] != 0.0
        if _decide(2.0 * s[k], aa[k], cur) != cur:
            return k
    return K


@numba.njit(inline="always", **_JIT)
def _sweep(Z, i, A, AT, aa, r, s, zf, k0, K):
    """Coordinate sweep of the bits ``k0..K-1`` of row ``i`` (T1: a bit changes only on a strict gain).

    ``r`` is the current residual (it includes the current bits, ``zf`` as 0.0/1.0) and is updated in place with
    ``Z[i]`` and ``zf``. The scores of all bits come first; a bit that changes renews the scores of the bits after
    it, so the decisions are those of the bit-by-bit sweep. Returns the number of bits that changed."""
    _scores(r, AT, zf, s, k0, K)
    return _sweep_from(Z, i, A, AT, aa, r, s, zf, _first_change(s, zf, aa, k0, K), K)


@numba.njit(inline="always", **_JIT)
def _sq(r):
    s = 0.0
    for j in range(r.shape[0]):
        s += r[j] * r[j]
    return s


@numba.njit(**_JIT)
def _norms(A):
    out = np.empty(A.shape[0])
    for k in range(A.shape[0]):
        out[k] = _sq(A[k])
    return out


@numba.njit(inline="always", **_JIT)
def _transposed(A, width):
    """``A.T`` as a C-contiguous (D, width) array, zero beyond K (columns for features opened later)."""
    K, D = A.shape
    AT = np.zeros((D, width))
    for k in range(K):
        for j in range(D):
            AT[j, k] = A[k, j]
    return AT


def feature_norms(A: np.ndarray) -> np.ndarray:
    """``||a_k||^2`` of every feature, summed in index order (the order every sweep uses)."""
    return _norms(np.ascontiguousarray(A, dtype=np.float64))


@numba.njit(**_JIT)
def _sweep_rows(X, Z, A, aa, repeat):
    n, D = X.shape
    K = A.shape[0]
    AT = _transposed(A, K)
    r = np.empty(D)
    s = np.empty(K)
    zf = np.zeros(K)
    on = np.empty(K, dtype=np.int64)
    q = np.empty(n)
    flips = 0
    for i in range(n):
        _start_row(X, Z, i, A, K, r, zf, on)
        while True:
            f = _sweep(Z, i, A, AT, aa, r, s, zf, 0, K)
            flips += f
            if f == 0 or not repeat:
                break
        q[i] = _sq(r)
    return q, flips


def sweep_rows(X: np.ndarray, Z: np.ndarray, A: np.ndarray, *, repeat: bool = False):
    """Coordinate sweeps of every row of ``Z`` (uint8, (n, K), changed in place) against fixed features ``A``.

    One sweep per row, or (``repeat=True``, the K-features step of docs/algorithms.md 2.4) sweeps until the row stops
    changing. Returns ``(q, flips)``: the final squared residual of every row and the number of bits changed.
    """
    A = np.ascontiguousarray(A, dtype=np.float64).reshape(-1, X.shape[1])
    return _sweep_rows(X, Z, A, _norms(A), bool(repeat))


@numba.njit(**_JIT)
def _serial_sweep(X, Z0, R, A0, lam, k_from, max_new, saturate):
    m, D = X.shape
    K0 = A0.shape[0]
    A = np.empty((K0 + max_new, D))
    A[:K0] = A0
    aa = np.empty(K0 + max_new)
    for k in range(K0):
        aa[k] = _sq(A0[k])
    Zo = np.zeros((m, K0 + max_new), dtype=np.uint8)
    Zo[:, : Z0.shape[1]] = Z0
    q = np.empty(m)
    K = K0
    flips = 0
    overflow = -1
    AT = _transposed(A0, K0 + max_new)
    r = np.empty(D)
    s = np.empty(K0 + max_new)
    zf = np.zeros(K0 + max_new)
    on = np.empty(K0 + max_new, dtype=np.int64)
    for i in range(m):
        if k_from[i] < 0:
            _start_row(X, Zo, i, A, K, r, zf, on)
            k0 = 0
        else:
            r[:] = R[i]
            for k in range(K):
                zf[k] = np.float64(Zo[i, k])
            k0 = k_from[i]
        flips += _sweep(Zo, i, A, AT, aa, r, s, zf, k0, K)
        qi = _sq(r)
        if qi > lam and not (saturate and K - K0 >= max_new):  # T3: a new feature only when strictly better
            if K - K0 >= max_new:
                overflow = i
                break
            AT[:, K] = r
            A[K] = r
            aa[K] = qi
            Zo[i, K] = 1
            K += 1
            qi = 0.0
        q[i] = qi
    return Zo[:, :K].copy(), A[K0:K].copy(), q, flips, overflow


def serial_sweep(X: np.ndarray, Z: np.ndarray, A: np.ndarray, lam: float, *, R: np.ndarray | None = None,
                 k_from: np.ndarray | None = None, max_new: int | None = None,
                 saturate: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """Serial BP-means step 1 over the rows of ``X`` in order, opening features (docs/algorithms.md 2.2 and 8.3).

    Parameters
    ----------
    X : (m, D) array
        The rows, in processing order.
    Z : (m, K0') uint8
        Their current bits (``K0' <= K0``; missing columns are 0).
    A : (K0, D) float64
        The features at the start; features opened by earlier rows are visible to later rows.
    lam : float
        Penalty per feature.
    R, k_from : optional
        For OCC validation: row i's residual ``R[i]`` after a worker swept its bits ``0..k_from[i]-1``; the sweep
        resumes at bit ``k_from[i]``. Rows with ``k_from[i] < 0`` (the default) are swept from bit 0.
    max_new : int, optional
        Most features that may be opened (default m).
    saturate : bool, default False
        What happens when a row would open feature ``K0 + max_new + 1``: stop and report it in ``overflow``
        (False), or keep the row's swept bits and open nothing (True: capped BP-means, [MB] eq. 15).

    Returns
    -------
    Z : (m, K) uint8
        Final bits over the ``K = K0 + new`` features.
    new : (new, D) float64
        The opened features (each is the residual of the row that opened it).
    q : (m,) float64
        Final squared residual of every row.
    flips : int
        Bits changed (opening a feature is not counted).
    overflow : int
        Position of the row that would have opened feature ``K0 + max_new + 1``, or -1.
    """
    X = np.asarray(X)
    m, d = X.shape
    A = np.ascontiguousarray(A, dtype=np.float64).reshape(-1, d)
    Z = np.ascontiguousarray(Z, dtype=np.uint8).reshape(m, -1)
    if R is None:
        R = np.zeros((m, d))
        k_from = np.full(m, -1, dtype=np.int64)
    max_new = m if max_new is None else int(max_new)
    return _serial_sweep(X, Z, np.ascontiguousarray(R, dtype=np.float64), A, float(lam),
                         np.asarray(k_from, dtype=np.int64), max_new, bool(saturate))


#: Rows per tile of :func:`_bp_block`: their products ``x a_k`` come from one BLAS call.
_TILE = 256
#: log2 of the most slots of the pattern table of :func:`_bp_block` (folded into (G, B) when half full) and the most
#: features whose bit patterns it keys (one bit each in a uint64; with more features every row is its own pattern).
_PATTERN_SLOT_BITS = 12
_PATTERN_BITS = 63
_EMPTY = np.uint64(2**64 - 1)
_HASH = np.uint64(0x9E3779B97F4A7C15)
#: Most features whose pattern keys a block keeps with its bits (uint16, :attr:`BPBlockResult.keys`).
_KEY_BITS = 16
#: The screen's columns are padded to a multiple of this (whole vectors, no scalar remainder).
_LANES = 4
#: Safety factor of the screen's rounding bounds (see :func:`_bp_block`).
_SCREEN_SAFETY = 16.0


@numba.njit(inline="always", **_JIT)
def _add_terms(G, B, on, n_on, c, xs):
    """Add ``c`` rows with the bits ``on[:n_on]`` and the sum of rows ``xs`` to ``G = Z'Z`` and ``B = Z'X``."""
    for a in range(n_on):
        ka = on[a]
        for b in range(n_on):
            G[ka, on[b]] += c
        for j in range(xs.shape[0]):
            B[ka, j] += xs[j]


@numba.njit(inline="always", **_JIT)
def _fold_patterns(ZP, cnt, SX, used, n_used, G, B, on):
    """Fold the patterns of the slots ``used[:n_used]`` (bits ``ZP``, row counts ``cnt``, row sums ``SX``) into
    (G, B), in filling order, and zero their counts and sums."""
    K = G.shape[0]
    for u in range(n_used):
        s = used[u]
        m = 0
        for k in range(K):
            on[m] = k
            m += ZP[s, k] != 0.0
        _add_terms(G, B, on, m, cnt[s], SX[s])
        cnt[s] = 0.0
        SX[s, :] = 0.0


@numba.njit(inline="always", **_JIT)
def _pattern(s, M, aa, ZP, THR, SG):
    """The screen's terms of the pattern whose bits are ``ZP[s]`` (0.0/1.0): the threshold ``THR[s, k]`` of
    ``2 x a_k`` (``aa_k + 2 sum_{l on} M_lk - 2 z_k aa_k``, so that ``2 x a_k - THR = 2 s_k - aa_k``), the sign
    ``SG[s, k]`` (+1 for a bit on, -1 off: the bit stays when ``SG (2 x a_k - THR) > 0``); returns
    ``sum_{l, m on} M_lm`` and the number of bits on."""
    K = aa.shape[0]
    mm = 0.0
    n_on = 0
    for k in range(K):
        z = ZP[s, k]
        THR[s, k] = aa[k] - 2.0 * z * aa[k]
        SG[s, k] = 2.0 * z - 1.0
    for l in range(K):
        if ZP[s, l] != 0.0:
            n_on += 1
            for k in range(K):
                THR[s, k] += 2.0 * M[l, k]
                mm += ZP[s, k] * M[l, k]
    return mm, n_on


@numba.njit(inline="always", **_JIT)
def _probe(keys, key, shift, mask):
    """The slot of ``key`` in the pattern table ``keys`` (linear probing): the slot holding it, or the empty slot
    where it goes."""
    h = ((key * _HASH) >> shift) & mask
    while keys[h] != key and keys[h] != _EMPTY:
        h = (h + np.uint64(1)) & mask
    return h


@numba.njit(**_JIT)
def _row_keys(Z):
    """The pattern key of every row of ``Z`` (bit k set when ``Z[i, k]`` is not 0), uint16 (at most
    ``_KEY_BITS`` columns)."""
    n, K = Z.shape
    out = np.empty(n, dtype=np.uint16)
    for i in range(n):
        key = 0
        for k in range(K):
            key |= np.int64(Z[i, k] != 0) << k
        out[i] = key
    return out


@numba.njit(inline="always", **_JIT)
def _bits_of(key, zz):
    """``zz[k]`` = bit k of the pattern key ``key`` as 0.0/1.0."""
    for k in range(zz.shape[0]):
        zz[k] = np.float64((key >> np.uint64(k)) & np.uint64(1))


@numba.njit(inline="always", **_JIT)
def _screened_sweep(Y, t, THR, SG, hs, M, dv, sg, tol_s, R, amax):
    """The sweep of tile row ``t`` (pattern slot ``hs``) on its screened values ``dv = 2 y - THR``: bit k changes
    where its sign-adjusted value ``sg_k dv_k`` is below ``-tol``, stays above ``tol`` (the bound grown per change:
    ``|r_j|`` grows by at most ``amax`` per flip), and a change moves the later values by ``+-2 M_kl``. Leaves the
    final signs in ``sg`` and returns the number of changes, or -1 when a value lies within the bound (the row
    then takes the exact sweep)."""
    K = M.shape[0]
    for k in range(K):
        dv[k] = 2.0 * Y[t, k] - THR[hs, k]
        sg[k] = SG[hs, k]
    nf = 0
    for k in range(K):
        tol = tol_s * (R + (nf + 1) * amax)
        mg = sg[k] * dv[k]
        if mg > tol:
            continue
        if not (mg < -tol):
            return -1
        d = 2.0 * sg[k]  # on -> off: the later values grow by 2 M_kl; off -> on: they drop by it
        sg[k] = -sg[k]
        nf += 1
        for l in range(k + 1, K):
            dv[l] += d * M[k, l]
    return nf


@numba.njit(inline="always", **_JIT)
def _flipped_key(sg, SG, hs):
    """The key bits of the bits whose sign ``sg`` differs from that of slot ``hs``."""
    f = np.uint64(0)
    for k in range(sg.shape[0]):
        f |= np.uint64(sg[k] != SG[hs, k]) << np.uint64(k)
    return f


@numba.njit(**_JIT)
def _insert(key, h, zz, keys, used, n_used, M, aa, ZP, THR, SG, MM, NON):
    """Put the bits ``zz`` (key ``key``, empty slot ``h``) into the pattern table with their screen terms
    (:func:`_pattern`); returns the slot and the new number of used slots. (Called on misses only: a call with
    many arrays costs their reference counts. The caller keeps the table at most half full.)"""
    hs = np.int64(h)
    keys[h] = key
    used[n_used] = hs
    for k in range(zz.shape[0]):
        ZP[hs, k] = zz[k]
    MM[hs], NON[hs] = _pattern(hs, M, aa, ZP, THR, SG)
    return hs, n_used + 1


@numba.njit(**_JIT)
def _bp_block(X, Z, A, aa, perm, start, lam, max_proposals, RK):
    """Sweep the rows ``perm[start:]`` of one block, fused with the (G, B, sse) partial of the rows that do not
    propose; stops after the ``max_proposals``-th proposal (``stop``: the next position).

    Screen (up to ``_PATTERN_BITS`` features; with more, every row is swept exactly): with ``y_k = x a_k`` (one
    BLAS product per tile of ``_TILE`` rows) and the Gram ``M = A A'`` of the features, a row's decision values
    are ``2 s_k - aa_k = 2 y_k - THR_pk`` and its squared residual is ``||x||^2 - 2 sum_{l on} y_l +
    sum_{l,m on} M_lm``, with terms of its bit pattern p only (kept in a table keyed by the bits). A row whose
    every decision is clear, and whose squared residual is below ``lam``, by more than a bound on the rounding of
    both these forms and of the sweep's own arithmetic (``_SCREEN_SAFETY`` times it) is settled without its
    residual: its bits change where the sweep would change them (a change of bit k moves the later values by
    -+2 M_kl, the bound grows with every change), its squared residual (the expansion, over its final pattern)
    goes into ``sse``. Every other row (a tie or a value within rounding of one, a proposal, NaN or inf) is swept
    exactly as by :func:`_sweep` (from :func:`_start_row`). So the bits, flips and proposals (with their
    residuals) are those of the serial sweep bit for bit.

    A tile goes in three loops: the screen of every row (slot, decision count, squared residual, a settled flag;
    no branch on the outcome), then the rows it did not settle, in row order (the screened sweep of rows with
    bits to change, else the exact sweep; a stop ends the tile there), then the settled rows up to the stop into
    their patterns' counts and sums. With at most ``_KEY_BITS`` features the rows' keys come in ``RK`` (one per
    row of the block) and are kept up to date for the rows whose bits change; else ``RK`` is empty and the keys
    are formed from the bits. With up to 11 features a pattern's slot is its key.

    (G, B) of the settled rows are gathered by pattern: the table holds the number of rows and the sum of their
    x, folded into ``G = sum_p n_p z_p z_p'`` and ``B = sum_p z_p (sum of x over p)`` between tiles when it could
    not hold another tile's patterns, and at the end (rows swept exactly are added on their own). G is exact
    (counts); B and sse equal the row-by-row sums up to the order and rounding of their float64 sums."""
    n, D = X.shape
    K = A.shape[0]
    KL = -(-K // _LANES) * _LANES  # the screen's columns: K, padded to whole vectors (pads: always clear)
    AT = _transposed(A, KL)
    M = np.dot(A, _transposed(A, K)) if K else np.zeros((0, 0))
    amax = 0.0
    for k in range(K):
        for j in range(D):
            amax = max(amax, abs(A[k, j]))
    u = 2.0 ** -53
    tol_q = _SCREEN_SAFETY * u * D * (D + 2 * K + 4)  # times R^2, R = max|x_j| + (n_on + flips) * amax >= |r_j|
    tol_s = tol_q * amax  # times R + amax
    G = np.zeros((K, K))
    B = np.zeros((K, D))
    r = np.empty(D)
    s = np.empty(K)
    zf = np.zeros(K)
    on = np.empty(K, dtype=np.int64)
    XF = np.zeros((_TILE, D))  # the tile's rows in float64
    XX = np.empty(_TILE)
    KEYS = np.empty(_TILE, dtype=np.uint64)
    zz = np.empty(K)
    dv = np.empty(K)
    sg = np.empty(K)
    HS = np.zeros(_TILE, dtype=np.int64)
    Q = np.empty(_TILE)
    STAY = np.zeros(_TILE, dtype=np.bool_)
    UNSURE = np.zeros(_TILE, dtype=np.bool_)
    ODD = np.empty(_TILE, dtype=np.int64)
    Y = np.empty((_TILE, KL))
    by_pattern = K <= _PATTERN_BITS
    cached = RK.shape[0] > 0  # the rows' keys are given (and kept up to date)
    n_slots = 2 ** min(K + 1, _PATTERN_SLOT_BITS) if by_pattern else 1  # K <= 11: room for every pattern
    direct = by_pattern and K + 1 <= _PATTERN_SLOT_BITS  # slot = key (never folded before the end)
    keys = np.full(n_slots, _EMPTY)
    spare = n_slots  # a slot for the sums of rows the screen does not settle (added, never folded)
    cnt = np.zeros(n_slots + 1)
    SX = np.zeros((n_slots + 1, D))
    ZP = np.zeros((n_slots, K))
    THR = np.full((n_slots, KL), -1e300)  # pads: SG (2 y - THR) = 1e300 (y = 0)
    SG = np.ones((n_slots, KL))
    MM = np.empty(n_slots)
    NON = np.empty(n_slots)
    used = np.empty(n_slots, dtype=np.int64)
    n_used = 0
    mask = np.uint64(n_slots - 1)
    shift = np.uint64(64 - int(np.log2(n_slots)) if n_slots > 1 else 0)
    flips = 0
    count = 0
    sse = 0.0
    m = perm.shape[0]
    pos = np.empty(min(m, max_proposals), dtype=np.int64)
    res = np.empty((min(m, max_proposals), D))
    p = start
    stop = m
    while p < m and stop == m:
        n_t = min(_TILE, m - p)
        if not direct and 2 * (n_used + 2 * n_t) > n_slots:  # room for the tile's patterns (none folded mid-tile)
            _fold_patterns(ZP, cnt, SX, used, n_used, G, B, on)
            keys[:] = _EMPTY
            n_used = 0
        for t in range(n_t):  # the tile's rows, their squared norms and bit keys (independent rows: overlapped)
            i = perm[p + t]
            xx = 0.0
            for j in range(D):
                x = np.float64(X[i, j])
                XF[t, j] = x
                xx += x * x
            XX[t] = xx
            key = np.uint64(0)
            if cached:
                key = np.uint64(RK[i])
            elif by_pattern:
                for k in range(K):
                    key |= np.uint64(Z[i, k] != 0) << np.uint64(k)
            KEYS[t] = key
        np.dot(XF, AT, Y)
        n_odd = 0
        for t in range(n_t):  # the screen of every row (no branch on its outcome): the rows it cannot settle
            if not by_pattern:  # more features than a key holds: every row is swept exactly
                ODD[n_odd] = t
                n_odd += 1
                continue
            key = KEYS[t]
            h = key if direct else _probe(keys, key, shift, mask)
            hs = np.int64(h)
            if keys[h] != key:
                _bits_of(key, zz)
                hs, n_used = _insert(key, h, zz, keys, used, n_used, M, aa, ZP, THR, SG, MM, NON)
            xx = XX[t]
            R = np.sqrt(xx) + NON[hs] * amax  # >= max_j |r_j| (within rounding)
            tol = tol_s * (R + amax)
            zy = 0.0
            unsure = 0
            for k in range(KL):
                unsure += not (SG[hs, k] * (2.0 * Y[t, k] - THR[hs, k]) > tol)
            for k in range(K):
                zy += ZP[hs, k] * Y[t, k]
            q = xx - 2.0 * zy + MM[hs]
            stay = (unsure == 0) & (q < lam - tol_q * R * R)  # every bit stays, no proposal (False on NaN)
            HS[t] = hs
            Q[t] = q
            STAY[t] = stay
            UNSURE[t] = unsure != 0
            ODD[n_odd] = t
            n_odd += not stay
        n_end = n_t
        for o in range(n_odd):  # rows with bits to change, near a tie, proposals: in row order
            t = ODD[o]
            i = perm[p + t]
            if by_pattern and UNSURE[t]:  # the sweep on the screened values (see _screened_sweep)
                hs = HS[t]
                xx = XX[t]
                R = np.sqrt(xx) + NON[hs] * amax
                nf = _screened_sweep(Y, t, THR, SG, hs, M, dv, sg, tol_s, R, amax)
                if nf > 0:
                    key = KEYS[t] ^ _flipped_key(sg, SG, hs)
                    h = key if direct else _probe(keys, key, shift, mask)
                    hs = np.int64(h)
                    if keys[h] != key:
                        _bits_of(key, zz)
                        hs, n_used = _insert(key, h, zz, keys, used, n_used, M, aa, ZP, THR, SG, MM, NON)
                    zy = 0.0
                    for k in range(K):
                        zy += ZP[hs, k] * Y[t, k]
                    R += nf * amax
                    q = xx - 2.0 * zy + MM[hs]
                    if q < lam - tol_q * R * R:
                        for k in range(K):
                            Z[i, k] = np.uint8(ZP[hs, k])
                        if cached:
                            RK[i] = key
                        flips += nf
                        sse += q
                        cnt[hs] += 1.0
                        for j in range(D):
                            SX[hs, j] += XF[t, j]
                        continue
            _start_row(X, Z, i, A, K, r, zf, on)
            flips += _sweep(Z, i, A, AT, aa, r, s, zf, 0, K)
            if cached:
                key = np.uint64(0)
                for k in range(K):
                    key |= np.uint64(zf[k] != 0.0) << np.uint64(k)
                RK[i] = key
            qi = _sq(r)
            if qi > lam:
                pos[count] = p + t
                res[count] = r
                count += 1
                if count >= max_proposals:
                    stop = p + t + 1
                    n_end = t + 1
                    break
                continue
            sse += qi
            n_on = 0
            for k in range(K):
                on[n_on] = k
                n_on += zf[k] != 0.0
            for j in range(D):
                r[j] = XF[t, j]
            _add_terms(G, B, on, n_on, 1.0, r)
        if by_pattern:
            for t in range(n_end):  # the settled rows (up to a stop) into their patterns' counts and sums
                st = STAY[t]
                hs = HS[t] if st else spare  # the others into a spare slot (never folded)
                sse += Q[t] if st else 0.0
                cnt[hs] += 1.0
                for j in range(D):
                    SX[hs, j] += XF[t, j]
        if stop == m:
            p += n_t
    _fold_patterns(ZP, cnt, SX, used, n_used, G, B, on)
    return pos[:count].copy(), res[:count].copy(), flips, stop, G, B, sse


def gram_partial(X: np.ndarray, Z: np.ndarray, rows: np.ndarray | None = None):
    """``(G, B) = (Z'Z, Z'X)`` over ``rows`` (all rows by default), float64."""
    if rows is not None:
        X, Z = X[rows], Z[rows]
    Zf = Z.astype(np.float64)
    return Zf.T @ Zf, Zf.T @ np.asarray(X, dtype=np.float64)


@dataclass
class BPBlockResult:
    """What one block returns from a keyed OCC epoch of BP-means (docs/algorithms.md 8.3)."""

    Z: np.ndarray  # (n_b, K_snapshot) uint8: the block's bits after the epoch (proposers' swept bits included)
    G: np.ndarray  # Z'Z over the rows finished in this epoch (non-proposers)
    B: np.ndarray  # Z'X over the same rows
    sse: float  # their squared residuals
    flips: int  # bits changed in this epoch (all processed rows)
    n_rows: int  # rows whose order key lies in the epoch's range
    local: np.ndarray  # local row indices of the proposals, in row order
    resid: np.ndarray  # (m, D) their residuals after the sweep over the snapshot
    zbits: np.ndarray  # (m, K_snapshot) their bits
    keys: np.ndarray | None = None  # (n_b,) uint16 pattern keys of Z's rows (K_snapshot <= _KEY_BITS), else None


#: Proposals a block expects at most per kernel call (more: the kernel resumes where it stopped).
_PROPOSAL_ROOM = 1024


def bp_block(Xb, Zb, *, offset, features, lam, mix, lo, hi, copy: bool = True, keys=None) -> BPBlockResult:
    """One keyed OCC epoch of BP-means on one block.

    The rows whose order key (:func:`dclust.kernels.distances.order_keys`) lies in ``[lo, hi]`` have their bits
    swept over the snapshot ``features`` (final for this pass); a row whose squared residual still exceeds ``lam``
    is proposed. A row's sweep does not depend on the other rows, so they are visited in storage order. ``Zb``
    (uint8, (n_b, K_snapshot)) is not modified, unless ``copy=False`` (then it is swept in place: a C-contiguous
    uint8 array the caller no longer needs). ``keys``: the pattern keys of ``Zb``'s rows as returned with it
    (:attr:`BPBlockResult.keys`, not modified), so that the kernel does not form them from the bits again.
    """
    from .distances import _one_blas_thread, order_keys

    A = np.ascontiguousarray(features, dtype=np.float64)
    Z = np.array(Zb, dtype=np.uint8, order="C", copy=True) if copy else Zb
    n, d = Xb.shape
    aa = _norms(A)
    if (lo, hi) == (0, 2**64 - 1):
        rows = np.arange(n, dtype=np.int64)
    else:
        order = order_keys(mix, np.arange(offset, offset + n))
        rows = np.flatnonzero((order >= np.uint64(lo)) & (order <= np.uint64(hi))).astype(np.int64)
    K = A.shape[0]
    if K > _KEY_BITS:
        RK = np.zeros(0, np.uint16)
    elif keys is not None and keys.shape == (n,):
        RK = np.array(keys, dtype=np.uint16, copy=True)
    else:
        RK = _row_keys(Z)
    G, B, sse, flips = np.zeros((K, K)), np.zeros((K, d)), 0.0, 0
    pos, res = [], []
    start = 0
    with _one_blas_thread():  # the kernel's tile products: no BLAS threads inside a worker's kernel
        while start < rows.size:
            p, r, f, stop, g, b, q = _bp_block(Xb, Z, A, aa, rows, start, float(lam), _PROPOSAL_ROOM, RK)
            G += g
            B += b
            sse += q
            flips += f
            pos.append(p)
            res.append(r)
            start = stop
    local = rows[np.concatenate(pos)] if pos else np.zeros(0, np.int64)
    resid = np.concatenate(res) if res else np.zeros((0, d))
    return BPBlockResult(Z, G, B, float(sse), int(flips), int(rows.size), local, resid, Z[local].copy(),
                         RK if RK.size else None)


def feature_means(G: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``A = pinv(G) B``: the least-squares feature means (minimum norm when G is singular, E-MB1)."""
    if G.shape[0] == 0:
        return np.zeros((0, B.shape[1]))
    return np.linalg.pinv(G, rcond=PINV_RCOND, hermitian=True) @ B


def prune_features(G: np.ndarray) -> tuple[np.ndarray, list[list[int]]]:
    """Features to keep after deleting empty ones (G_kk = 0) and merging identical ones (G_kk = G_ll = G_kl).

    Returns ``(keep, groups)``: ``keep`` are the kept columns in increasing order and ``groups[i]`` lists the
    columns merged into ``keep[i]`` (itself first).
    """
    K = G.shape[0]
    d = np.diag(G)
    taken = np.zeros(K, dtype=bool)
    keep, groups = [], []
    for k in range(K):
        if taken[k] or d[k] == 0:
            continue
        same = [l for l in range(k + 1, K) if not taken[l] and d[l] == d[k] and G[k, l] == d[k]]
        taken[same] = True
        keep.append(k)
        groups.append([k] + same)
    return np.array(keep, dtype=np.int64), groups


def bp_objective(X: np.ndarray, Z: np.ndarray, A: np.ndarray, lam: float) -> float:
    """``||X - ZA||_F^2 + lam * K`` (direct form)."""
    X = np.asarray(X, dtype=np.float64)
    R = X - Z.astype(np.float64) @ A
    return float((R * R).sum() + lam * A.shape[0])


def collapsed_objective(G: np.ndarray, B: np.ndarray, sq_norm: float, lam: float) -> float:
    """``||X||^2 - tr(B' pinv(G) B) + lam * K``: the objective at ``A = pinv(G) B`` from (G, B, ||X||^2)."""
    if G.shape[0] == 0:
        return float(sq_norm)
    return float(sq_norm - np.sum(B * feature_means(G, B)) + lam * G.shape[0])


def _ref_sweep(x, z, A, lam_open=None):
    """Plain-Python twin of the numba sweep of one row (same operations in the same order)."""
    D = x.shape[0]
    r = np.array(x, dtype=np.float64)
    for k in range(A.shape[0]):
        if z[k]:
            r = r - A[k]
    flips = 0
    for k in range(A.shape[0]):
        a = A[k]
        s = 0.0
        base = r + a if z[k] else r
        for j in range(D):
            s += base[j] * a[j]
        s = 2.0 * s
        aa = 0.0
        for j in range(D):
            aa += a[j] * a[j]
        new = 1 if s > aa else (0 if s < aa else z[k])
        if new != z[k]:
            r = r - a if new else r + a
            z[k] = new
            flips += 1
    q = 0.0
    for j in range(D):
        q += r[j] * r[j]
    return r, q, flips


def bpmeans_reference(X, lam, orders, *, features=None, Z=None, max_iter=100, cap=None):
    """Serial BP-means (docs/algorithms.md 2.2), plain Python loops: the oracle of the tests.

    Parameters
    ----------
    X : (N, D) array
    lam : float
    orders : permutation, or a list with one permutation per pass (the last one is reused)
    features, Z : initial (K, D) features and (N, K) bits (default: K = 0)
    max_iter : int
    cap : int, optional
        Capped BP-means ([MB] eq. 15): no feature is opened while there are ``cap`` features.

    Returns
    -------
    Z : (N, K) uint8, A : (K, D) float64, history : list of float
        ``history`` holds the objective after every pass's feature update.
    """
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    A = np.zeros((0, d)) if features is None else np.array(features, dtype=np.float64).reshape(-1, d)
    Z = np.zeros((n, A.shape[0]), np.uint8) if Z is None else np.array(Z, dtype=np.uint8)
    if isinstance(orders, np.ndarray) and orders.ndim == 1:
        orders = [orders]
    history = []
    for p in range(max_iter):
        order = orders[min(p, len(orders) - 1)]
        start = Z.copy()
        feats = [a for a in A]
        Zl = [list(row) for row in Z]
        for i in order:
            z = Zl[i] + [0] * (len(feats) - len(Zl[i]))
            Acur = np.array(feats).reshape(-1, d)
            r, q, _ = _ref_sweep(X[i], z, Acur)
            if q > lam and (cap is None or len(feats) < cap):
                feats.append(r.copy())
                z.append(1)
            Zl[i] = z
        K = len(feats)
        Z = np.array([row + [0] * (K - len(row)) for row in Zl], dtype=np.uint8).reshape(n, K)
        Zf = Z.astype(np.float64)
        keep, _ = prune_features(Zf.T @ Zf)
        Z = Z[:, keep]
        Zf = Z.astype(np.float64)
        A = feature_means(Zf.T @ Zf, Zf.T @ X)
        history.append(bp_objective(X, Z, A, lam))
        if Z.shape == start.shape and np.array_equal(Z, start):
            break
    return Z, A, history


def serial_bpmeans(X, lam, order, *, features=None, max_iter=100, max_features=None, cap=None):
    """Serial BP-means (docs/algorithms.md 2.2) on in-memory rows with the numba kernels, rows visited in ``order``.

    ``cap`` (capped BP-means, [MB] eq. 15): never more than ``cap`` features. Without a cap, more than
    ``max_features`` features stops the run: the function then returns ``None`` for Z.

    Returns ``(Z (n, K) uint8, A (K, D), J)`` with ``J = ||X - ZA||^2 + lam * K``.
    """
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    A = np.zeros((0, d)) if features is None else np.asarray(features, dtype=np.float64).reshape(-1, d)
    Z = np.zeros((n, A.shape[0]), np.uint8)
    if A.shape[0]:
        sweep_rows(X, Z, A, repeat=True)
    limit = cap if cap is not None else (max_features if max_features is not None else n + A.shape[0])
    for _ in range(max_iter):
        Zo, new, q, flips, overflow = serial_sweep(X[order], Z[order], A, lam, max_new=max(0, limit - A.shape[0]),
                                                   saturate=cap is not None)
        if overflow >= 0:
            return None, A, float("inf")
        Z = np.empty_like(Zo)
        Z[order] = Zo
        G, B = gram_partial(X, Z)
        keep, _ = prune_features(G)
        A = feature_means(G[np.ix_(keep, keep)], B[keep])
        Z = np.ascontiguousarray(Z[:, keep])
        if flips == 0 and new.shape[0] == 0 and keep.size == G.shape[0]:
            break
    return Z, A, bp_objective(X, Z, A, lam)


def delete_redundant(X, Z, A, lam):
    """Delete features whose removal lowers ``||X - ZA||^2 + lam * K`` (a descent move on the BP-means objective).

    Repeatedly: for every feature k, the rows that use it are swept (until stable) over the other features with A
    fixed; the feature whose deletion raises the squared error the least is deleted if that raise is strictly
    below ``lam``, then ``A = pinv(G) B``. Every accepted deletion strictly lowers the objective. Used on the
    small sample of the ``init="sample"`` restarts, where it removes the redundant "combination" features
    (e.g. ``a + b`` next to ``a`` and ``b``) that BP-means' opening rule creates and never removes.

    Returns ``(Z, A)``.
    """
    X = np.asarray(X, dtype=np.float64)
    Z = np.ascontiguousarray(Z, dtype=np.uint8)
    while A.shape[0]:
        R = X - Z.astype(np.float64) @ A
        q0 = (R * R).sum(axis=1)
        best, choice = 0.0, None
        for k in range(A.shape[0]):
            rows = np.flatnonzero(Z[:, k])
            keep = np.array([j for j in range(A.shape[0]) if j != k], dtype=np.int64)
            Zk = np.ascontiguousarray(Z[np.ix_(rows, keep)])
            q, _ = sweep_rows(X[rows], Zk, A[keep], repeat=True)
            gain = lam - (q.sum() - q0[rows].sum())
            if gain > best:
                best, choice = gain, (rows, Zk, keep)
        if choice is None:
            break
        rows, Zk, keep = choice
        Z = np.ascontiguousarray(Z[:, keep])
        Z[rows] = Zk
        G, B = gram_partial(X, Z)
        kept, _ = prune_features(G)
        Z, A = np.ascontiguousarray(Z[:, kept]), feature_means(G[np.ix_(kept, kept)], B[kept])
    return Z, A


def sample_restarts(X: np.ndarray, lam: float, *, n_init: int, seed: int, max_features: int, cap: int | None = None,
                    max_iter: int = 100) -> tuple[np.ndarray, float]:
    """The ``init="sample"`` features: ``n_init`` restarts of serial BP-means on the in-memory sample ``X``.

    Each restart visits the rows in its own random order, runs BP-means to convergence, deletes redundant
    features (:func:`delete_redundant`) and runs BP-means again from the remaining features. The features of the
    restart with the lowest objective ``||X - ZA||^2 + lam * K`` on the sample are returned (the first on ties),
    with that objective. Raises ``OverflowError`` when every restart would exceed ``max_features``.
    """
    X = np.asarray(X, dtype=np.float64)
    rng = np.random.default_rng(seed)
    best_A, best_J = None, np.inf
    for _ in range(n_init):
        order = rng.permutation(X.shape[0])
        Z, A, J = serial_bpmeans(X, lam, order, max_iter=max_iter, max_features=max_features, cap=cap)
        if Z is None:
            continue
        Z, A = delete_redundant(X, Z, A, lam)
        Z, A, J = serial_bpmeans(X, lam, order, features=A, max_iter=max_iter, max_features=max_features, cap=cap)
        if Z is not None and J < best_J:
            best_A, best_J = A, J
    if best_A is None:
        raise OverflowError("every restart exceeded max_features")
    return best_A, best_J
