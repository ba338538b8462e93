"""The block-sparse must-link / cannot-link graph (docs/algorithms.md 5.1, 8.4)."""

from __future__ import annotations

import numbers
import os
from typing import Any, Iterator

import numpy as np
import scipy.sparse as sp

from ..errors import ChunkingError, InvalidDataError, InvalidParameterError, message
from ._feasibility import check_closure, conflict_error, self_link_error

__all__ = ["ConstraintGraph", "normalize_chunks"]


def normalize_chunks(chunks: Any, n_samples: int, what: str = "ConstraintGraph(chunks=...)") -> tuple[int, ...]:
    """Row chunks as a tuple of block sizes summing to ``n_samples``.

    ``None`` is one block; an int is a regular size (the last block shorter); a tuple (e.g. ``X.chunks[0]``)
    is taken as is. A 2-D chunks tuple (``X.chunks``) is accepted and its row part used.
    """
    if chunks is None:
        return (int(n_samples),) if n_samples > 0 else ()
    if isinstance(chunks, numbers.Integral) and not isinstance(chunks, bool):
        if chunks < 1:
            raise ChunkingError(message(what, "a positive number of rows per block", repr(chunks),
                                        "Pass X.chunks[0] or a positive int."))
        c = int(chunks)
        return tuple([c] * (n_samples // c) + ([n_samples % c] if n_samples % c else []))
    try:
        seq = tuple(chunks)
    except TypeError:
        seq = None
    if seq is not None and seq and all(isinstance(s, tuple) for s in seq):
        seq = seq[0]  # X.chunks
    if seq is None or not all(isinstance(s, numbers.Integral) and not isinstance(s, bool)
                              and s >= 0 for s in seq):  # type: ignore[operator]  # typeshed numbers.Integral
        raise ChunkingError(message(what, "None, an int or a tuple of row-block sizes (X.chunks[0])",
                                    repr(chunks), "Pass X.chunks[0]."))
    seq = tuple(int(s) for s in seq)
    if sum(seq) != n_samples:
        raise ChunkingError(message(what, f"row blocks summing to n_samples={n_samples}", f"sum {sum(seq)}",
                                    "Pass the row chunks of the data the links refer to: X.chunks[0]."))
    return seq


def _offsets(chunks: tuple[int, ...]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(chunks, dtype=np.int64)]).astype(np.int64)


def _as_index(a: Any, name: str) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise InvalidDataError(message(f"ConstraintGraph.from_pairs({name}=...)", "a 1-D array of integer row indices",
                                       f"shape {arr.shape}, dtype {arr.dtype}", "Pass integer row numbers of X."))
    return arr.astype(np.int64)


class ConstraintGraph:
    """Must-link / cannot-link pairs over the rows of X, stored block-sparse and aligned to X's row chunks.

    Pairs are canonical: ``i < j``, no self-pairs (a self must-link is dropped, a self cannot-link refused),
    duplicates merged. The pairs whose endpoints fall in row
    blocks ``(bi, bj)`` (``bi <= bj``) form one sparse matrix of shape ``(n_bi, n_bj)`` in local row
    coordinates, holding ``+w`` for a must-link and ``-w`` for a cannot-link (``w = 1`` unless weights were
    given). Only non-empty block pairs are stored, each as its sorted (row, column, value) triplets, so memory
    is O(number of links) however many rows the blocks have; :meth:`block` and :meth:`blocks` hand them out as
    ``scipy.sparse.csr_matrix`` (built on the fly: a CSR's row pointer is O(rows of the block)).

    Build one with :meth:`from_pairs`, :meth:`from_labels_sample` or :meth:`from_zarr`; the constructor is
    internal.

    Attributes
    ----------
    n_samples : int
        Number of rows of the data the links refer to.
    chunks : tuple of int
        Row-block sizes (``X.chunks[0]``).
    offsets : ndarray of int64, shape (n_blocks + 1,)
        First global row of every block, and ``n_samples`` at the end.

    Examples
    --------
    >>> from dclust.constraints import ConstraintGraph
    >>> G = ConstraintGraph.from_pairs([0, 5, 3, 5], [1, 2, 4, 2], [True, False, True, False],
    ...                                n_samples=6, chunks=(3, 3))
    >>> G.n_must, G.n_cannot, G.n_links
    (2, 1, 3)
    >>> [(bi, bj, csr.shape) for bi, bj, csr in G.blocks()]
    [(0, 0, (3, 3)), (0, 1, (3, 3)), (1, 1, (3, 3))]
    >>> G.pairs()[0].tolist(), G.pairs()[1].tolist(), G.pairs()[2].tolist()
    ([0, 2, 3], [1, 5, 4], [1, -1, 1])
    """

    def __init__(self, n_samples: int, chunks: tuple[int, ...], blocks: dict[tuple[int, int], Any], *,
                 weighted: bool = False) -> None:
        self.n_samples = int(n_samples)
        self.chunks = tuple(int(c) for c in chunks)
        self.offsets = _offsets(self.chunks)
        self._blocks: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = dict(sorted(blocks.items()))
        self.weighted = bool(weighted)

    # ------------------------------------------------------------------------------------------------------
    # constructors
    # ------------------------------------------------------------------------------------------------------

    @classmethod
    def from_pairs(
        cls,
        i: Any,
        j: Any,
        must_link: Any,
        n_samples: int,
        chunks: Any = None,
        *,
        weight: Any = None,
        check_feasible: bool = True,
    ) -> "ConstraintGraph":
        """Build a graph from pairs of row indices.

        Parameters
        ----------
        i, j : array-like of int, shape (n_pairs,)
            Endpoints (global row indices of X, ``0 <= i, j < n_samples``); order within a pair does not matter.
        must_link : bool or array-like of bool, shape (n_pairs,)
            True for a must-link (may-link), False for a cannot-link (may-not-link).
        n_samples : int
            Number of rows of X.
        chunks : None, int or tuple of int, optional
            Row blocks to align to, normally ``X.chunks[0]``; default one block.
        weight : array-like of float, shape (n_pairs,), optional
            Positive confidence of each link (default 1). Duplicates of one pair keep the largest weight.
        check_feasible : bool, default True
            Reject cannot-links inside a must-link component (found with the union-find closure of the
            must-links). Pass False for noisy links, which RDP-means treats softly. A pair given as both a
            must-link and a cannot-link, and a cannot-link from a row to itself, are always rejected (a
            must-link from a row to itself always holds and is dropped).

        Returns
        -------
        ConstraintGraph

        Raises
        ------
        InvalidDataError
            Indices out of range, mismatched lengths, non-positive weights.
        InfeasibleConstraintsError
            A pair is both must and cannot, a cannot-link joins a row to itself, or (``check_feasible``) a
            cannot-link lies inside a must-link component; the message names the pair and the must-link chain.

        Examples
        --------
        >>> ConstraintGraph.from_pairs([3], [3], [False], n_samples=5)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        dclust.errors.InfeasibleConstraintsError: ConstraintGraph: expected cannot-links between two different rows ...
        """
        n = _check_n(n_samples)
        ii, jj = _as_index(i, "i"), _as_index(j, "j")
        ml = np.asarray(must_link)
        if ml.ndim == 0:
            ml = np.full(ii.size, bool(ml))
        if ml.ndim != 1 or (ml.size and ml.dtype.kind not in "biu"):
            raise InvalidDataError(message("ConstraintGraph.from_pairs(must_link=...)", "booleans (True = must-link)",
                                           f"dtype {ml.dtype}, shape {ml.shape}", "Pass a bool per pair."))
        w = np.ones(ii.size) if weight is None else np.asarray(weight, dtype=np.float64).reshape(-1)
        if not (ii.size == jj.size == ml.size == w.size):
            raise InvalidDataError(message("ConstraintGraph.from_pairs", "i, j, must_link (and weight) of one length",
                                           f"lengths {ii.size}, {jj.size}, {ml.size}, {w.size}",
                                           "Pass one entry per pair."))
        if w.size and not (np.isfinite(w).all() and (w > 0).all()):
            raise InvalidDataError(message("ConstraintGraph.from_pairs(weight=...)", "finite weights > 0",
                                           "zero, negative or non-finite weights", "Drop those links instead."))
        out = (ii < 0) | (ii >= n) | (jj < 0) | (jj >= n)
        if out.any():
            k = int(np.flatnonzero(out)[0])
            raise InvalidDataError(message(
                "ConstraintGraph.from_pairs", f"row indices in [0, {n}) (n_samples={n})",
                f"the pair ({int(ii[k])}, {int(jj[k])}) ({int(out.sum())} pair(s) out of range)",
                "Drop links to rows that are not in X, or pass the right n_samples."))
        sign = np.where(ml.astype(bool), 1.0, -1.0)
        a, b = np.minimum(ii, jj), np.maximum(ii, jj)
        keep = a != b
        if (~keep & (sign < 0)).any():  # a must-link to itself always holds (dropped); a cannot-link never does
            raise self_link_error(np.unique(a[~keep & (sign < 0)]))
        a, b, sign, w = a[keep], b[keep], sign[keep], w[keep]
        # canonical order (i, j), duplicates merged, conflicts detected
        order = np.lexsort((sign, b, a))
        a, b, sign, w = a[order], b[order], sign[order], w[order]
        new = np.ones(a.size, dtype=bool)
        new[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
        start = np.flatnonzero(new)
        mixed = np.minimum.reduceat(sign, start) != np.maximum.reduceat(sign, start) if a.size else np.zeros(0, bool)
        if mixed.any():
            raise conflict_error(a[start][mixed], b[start][mixed])
        wmax = np.maximum.reduceat(w, start) if a.size else w
        a, b, sign = a[start], b[start], sign[start]
        if check_feasible:
            must = sign > 0
            check_closure(a[must], b[must], a[~must], b[~must])
        weighted = weight is not None and not np.all(wmax == 1.0)
        return cls._from_canonical(n, normalize_chunks(chunks, n), a, b, sign * wmax, weighted=weighted)

    @classmethod
    def from_labels_sample(
        cls,
        y: Any,
        fraction: float,
        rng: Any = None,
        *,
        p: float = 1.0,
        chunks: Any = None,
        check_feasible: bool | None = None,
    ) -> "ConstraintGraph":
        """Side information drawn from true labels, the protocol of [TV] 5.2 (docs/algorithms.md 10.3).

        Draw ``round(fraction * N (N-1) / 2)`` distinct unordered pairs uniformly, make each a must-link when the
        two labels are equal and a cannot-link otherwise, then flip each link's type with probability ``1 - p``.

        Parameters
        ----------
        y : array-like of int, shape (n_samples,)
            True labels (numpy or dask; for dask only the sampled rows are read).
        fraction : float in [0, 1]
            The fraction r of all pairs that carry a link.
        rng : int, numpy.random.Generator or None
            Seed of the draw.
        p : float in [0.5, 1], default 1
            Probability that a link's type is correct (noise 1 - p).
        chunks : None, int or tuple of int
            Row blocks of X (``X.chunks[0]``).
        check_feasible : bool, optional
            Default: True when ``p == 1`` (noiseless links are always feasible), False otherwise.

        Returns
        -------
        ConstraintGraph

        Examples
        --------
        >>> import numpy as np
        >>> G = ConstraintGraph.from_labels_sample(np.repeat([0, 1, 2], 50), 0.05, rng=0)
        >>> G.n_links  # round(0.05 * 150 * 149 / 2)
        559
        """
        y_arr = y if hasattr(y, "compute") else np.asarray(y)
        if getattr(y_arr, "ndim", 1) != 1:
            raise InvalidDataError(message("ConstraintGraph.from_labels_sample(y=...)", "a 1-D label array",
                                           f"shape {tuple(y_arr.shape)}", "Pass one label per row of X."))
        n = int(y_arr.shape[0])
        if not isinstance(fraction, numbers.Real) or isinstance(fraction, bool) or not 0 <= fraction <= 1:
            raise InvalidParameterError(message("ConstraintGraph.from_labels_sample(fraction=...)", "a real in [0, 1]",
                                                repr(fraction), "Pass the fraction of pairs to link, e.g. 0.05."))
        if not isinstance(p, numbers.Real) or isinstance(p, bool) or not 0.5 <= p <= 1:
            raise InvalidParameterError(message("ConstraintGraph.from_labels_sample(p=...)", "a real in [0.5, 1]",
                                                repr(p), "Pass the probability that a link is correct."))
        gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        n_pairs = n * (n - 1) // 2
        m = int(round(fraction * n_pairs))
        a, b = sample_pairs(n, m, gen)
        idx, inv = np.unique(np.concatenate([a, b]), return_inverse=True)
        lab = y_arr[idx]
        lab = np.asarray(lab.compute() if hasattr(lab, "compute") else lab)
        la, lb = lab[inv[: a.size]], lab[inv[a.size :]]
        must = la == lb
        if p < 1:
            must ^= gen.random(m) >= p
        feasible = (p == 1) if check_feasible is None else bool(check_feasible)
        return cls.from_pairs(a, b, must, n_samples=n, chunks=chunks, check_feasible=feasible)

    @classmethod
    def _from_canonical(cls, n: int, chunks: tuple[int, ...], a: np.ndarray, b: np.ndarray, value: np.ndarray, *,
                        weighted: bool = False) -> "ConstraintGraph":
        """From canonical sorted pairs (``a < b``, sorted by (a, b), distinct) and signed values."""
        off = _offsets(chunks)
        ba = np.searchsorted(off, a, side="right") - 1
        bb = np.searchsorted(off, b, side="right") - 1
        blocks = {}
        if a.size:
            key = ba * max(len(chunks), 1) + bb
            order = np.argsort(key, kind="stable")
            key, a, b, value, ba, bb = key[order], a[order], b[order], value[order], ba[order], bb[order]
            cuts = np.flatnonzero(np.diff(key)) + 1
            for s, e in zip(np.r_[0, cuts], np.r_[cuts, key.size]):
                r, c = int(ba[s]), int(bb[s])
                # (a, b) sorted within the block; local rows fit int32 (a chunk has < 2**31 rows)
                blocks[(r, c)] = ((a[s:e] - off[r]).astype(np.int32), (b[s:e] - off[c]).astype(np.int32),
                                  value[s:e].astype(np.float64))
        return cls(n, chunks, blocks, weighted=weighted)

    @classmethod
    def from_zarr(cls, path: str | os.PathLike[str], *,
                  storage_options: dict[str, Any] | None = None) -> "ConstraintGraph":
        """Read a graph written by :meth:`to_zarr` (its row chunks included); ``storage_options`` are the fsspec
        filesystem's arguments for a URL ``path`` (``s3://...``)."""
        from .._store._constraints import read_constraints

        doc, a, b, value = read_constraints(path, storage_options=storage_options)
        n = int(doc["n_samples"])
        chunks = normalize_chunks(tuple(int(c) for c in doc["chunks"]), n)
        ok = (a.size == 0) or bool(((a >= 0) & (a < b) & (b < n) & (value != 0)).all()
                                   and (np.diff(a * n + b) > 0).all())
        if not ok:
            from ..errors import StorageError

            raise StorageError(message(f"ConstraintGraph.from_zarr({os.fspath(path)!r})",
                                       "canonical pairs (0 <= i < j < n_samples, sorted, distinct, value != 0)",
                                       "pairs that are not", "The store is corrupt; re-write it with G.to_zarr."))
        return cls._from_canonical(n, chunks, a, b, value, weighted=bool(doc.get("weighted")))

    # ------------------------------------------------------------------------------------------------------
    # persistence and re-alignment
    # ------------------------------------------------------------------------------------------------------

    def to_zarr(self, path: str | os.PathLike[str], *, overwrite: bool = False,
                storage_options: dict[str, Any] | None = None) -> str:
        """Write the graph to a new Zarr group, atomically (temporary name, then rename; on object stores a commit
        record, see docs/object-storage.md).

        The group holds the canonical pairs (``i``, ``j``, signed ``value``) and, as attributes, ``n_samples``
        and the row ``chunks``. ``storage_options`` are the fsspec filesystem's arguments for a URL ``path``.
        Returns the store's location.
        """
        from .._store._constraints import write_constraints

        a, b, v = self._coo()
        doc = {"n_samples": self.n_samples, "chunks": list(self.chunks), "n_must": self.n_must,
               "n_cannot": self.n_cannot, "weighted": self.weighted}
        return write_constraints(path, doc, a, b, v, overwrite=overwrite, storage_options=storage_options)

    def rechunk(self, chunks: Any) -> "ConstraintGraph":
        """The same links aligned to other row blocks (``X.chunks[0]`` of the data being clustered)."""
        a, b, v = self._coo()
        return type(self)._from_canonical(self.n_samples, normalize_chunks(chunks, self.n_samples), a, b, v,
                                          weighted=self.weighted)

    def check_aligned(self, chunks: Any, n_samples: int | None = None, name: str = "X") -> None:
        """Raise unless the graph refers to ``n_samples`` rows split into the row blocks ``chunks``.

        Raises
        ------
        InvalidDataError
            The graph was built for another number of rows.
        ChunkingError
            Same rows, other blocks; the fix is ``G.rechunk(X.chunks[0])``.
        """
        seq = tuple(chunks[0]) if chunks and isinstance(chunks[0], tuple) else tuple(chunks)
        n = int(sum(seq)) if n_samples is None else int(n_samples)
        if n != self.n_samples:
            raise InvalidDataError(message("constraints", f"a graph over the {n} rows of {name}",
                                           f"a graph over {self.n_samples} rows",
                                           "Build the constraints for this data (row indices of X)."))
        if seq != self.chunks:
            raise ChunkingError(message("constraints", f"row blocks equal to {name}.chunks[0] ({_short(seq)})",
                                        f"row blocks {_short(self.chunks)}",
                                        f"Align them with G = G.rechunk({name}.chunks[0])."))

    # ------------------------------------------------------------------------------------------------------
    # access
    # ------------------------------------------------------------------------------------------------------

    @property
    def n_blocks(self) -> int:
        """Number of row blocks."""
        return len(self.chunks)

    @property
    def n_links(self) -> int:
        """Number of distinct linked pairs."""
        return int(sum(v.size for _, _, v in self._blocks.values()))

    @property
    def n_must(self) -> int:
        """Number of must-links."""
        return int(sum((v > 0).sum() for _, _, v in self._blocks.values()))

    @property
    def n_cannot(self) -> int:
        """Number of cannot-links."""
        return int(sum((v < 0).sum() for _, _, v in self._blocks.values()))

    @property
    def nbytes(self) -> int:
        """Bytes held by the stored blocks: 16 per link (two int32 local rows and a float64 value)."""
        return int(sum(r.nbytes + c.nbytes + v.nbytes for r, c, v in self._blocks.values()))

    def block_pairs(self) -> list[tuple[int, int]]:
        """The non-empty block pairs ``(bi, bj)``, ``bi <= bj``, sorted."""
        return list(self._blocks)

    def block(self, bi: int, bj: int) -> sp.csr_matrix:
        """The links between blocks ``bi`` and ``bj`` as an ``(n_bi, n_bj)`` CSR matrix (local rows/columns).

        For ``bi > bj`` this is the transpose of the stored ``(bj, bi)`` block; an empty pair gives an empty matrix.
        """
        if (bi, bj) in self._blocks:
            return self._csr(bi, bj)
        if (bj, bi) in self._blocks:
            return self._csr(bj, bi).T.tocsr()
        return sp.csr_matrix((self.chunks[bi], self.chunks[bj]))

    def _csr(self, bi: int, bj: int) -> sp.csr_matrix:
        r, c, v = self._blocks[(bi, bj)]
        return sp.csr_matrix((v, (r, c)), shape=(self.chunks[bi], self.chunks[bj]))

    def blocks(self, symmetric: bool = False) -> Iterator[tuple[int, int, sp.csr_matrix]]:
        """Iterate over the non-empty block pairs as ``(bi, bj, csr)``.

        Parameters
        ----------
        symmetric : bool, default False
            False: each link once, in the stored upper blocks ``bi <= bj`` (row ``i`` of the pair in block
            ``bi``). True: both directions, as RDP-means needs per-endpoint counts (docs/algorithms.md 8.4): the
            pairs ``(bi, bj)`` and ``(bj, bi)`` for ``bi != bj``, and the symmetrised diagonal blocks.
        """
        if not symmetric:
            yield from ((bi, bj, self._csr(bi, bj)) for bi, bj in self._blocks)
            return
        keys = sorted(set(self._blocks) | {(bj, bi) for bi, bj in self._blocks})
        for bi, bj in keys:
            if bi == bj:
                m = self._csr(bi, bi)
                yield bi, bi, (m + m.T).tocsr()
            else:
                yield bi, bj, self.block(bi, bj)

    def _coo(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        parts = []
        for (bi, bj), (r, c, v) in self._blocks.items():
            parts.append((r.astype(np.int64) + self.offsets[bi], c.astype(np.int64) + self.offsets[bj], v))
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
        a, b, v = (np.concatenate(x) for x in zip(*parts))
        order = np.lexsort((b, a))
        return a[order], b[order], v[order]

    def pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All links as global arrays ``(i, j, sign)``: int64 rows with ``i < j``, sorted by ``(i, j)``, and
        int8 ``+1`` (must) / ``-1`` (cannot). See :meth:`weights` for the magnitudes of weighted links."""
        a, b, v = self._coo()
        return a, b, np.sign(v).astype(np.int8)

    def weights(self) -> np.ndarray:
        """Positive weight of every link, in the order of :meth:`pairs` (all 1 for unweighted graphs)."""
        return np.abs(self._coo()[2])  # type: ignore[no-any-return]  # numpy stubs: a ufunc returns Any

    def must_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """``(i, j)`` of the must-links (global rows, ``i < j``)."""
        a, b, s = self.pairs()
        return a[s > 0], b[s > 0]

    def cannot_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """``(i, j)`` of the cannot-links (global rows, ``i < j``)."""
        a, b, s = self.pairs()
        return a[s < 0], b[s < 0]

    def nodes(self) -> np.ndarray:
        """Sorted distinct rows that carry at least one link."""
        a, b, _ = self._coo()
        return np.unique(np.concatenate([a, b]))

    def __len__(self) -> int:
        return self.n_links

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConstraintGraph):
            return NotImplemented
        if (self.n_samples, self.chunks) != (other.n_samples, other.chunks):
            return False
        return all(np.array_equal(x, y) for x, y in zip(self._coo(), other._coo()))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"ConstraintGraph(n_samples={self.n_samples}, n_blocks={self.n_blocks}, n_must={self.n_must}, "
                f"n_cannot={self.n_cannot}, block_pairs={len(self._blocks)})")


def _short(seq: tuple[int, ...]) -> str:
    return str(seq) if len(seq) <= 6 else f"({', '.join(map(str, seq[:3]))}, ..., {seq[-1]}) [{len(seq)} blocks]"


def _check_n(n_samples: Any) -> int:
    if not isinstance(n_samples, numbers.Integral) or isinstance(n_samples, bool) or n_samples < 0:
        raise InvalidParameterError(message("ConstraintGraph(n_samples=...)", "an int >= 0 (the rows of X)",
                                            repr(n_samples), "Pass X.shape[0]."))
    return int(n_samples)


def sample_pairs(n: int, m: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``m`` distinct unordered pairs ``i < j`` of ``range(n)``, uniformly, as two int64 arrays (sorted)."""
    total = n * (n - 1) // 2
    if m > total:
        raise InvalidParameterError(message("sample_pairs", f"at most {total} pairs", str(m), "Lower the fraction."))
    if m == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if total <= 4 * m or total <= 10_000_000:
        k = np.sort(rng.choice(total, size=m, replace=False).astype(np.int64))
    else:
        k = np.zeros(0, np.int64)
        while k.size < m:
            k = np.unique(np.concatenate([k, rng.integers(0, total, size=int(1.1 * (m - k.size)) + 16)]))
        k = np.sort(rng.choice(k, size=m, replace=False))
    return _unrank(k, n)


def _unrank(k: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Row-major rank in the strict upper triangle -> (i, j)."""
    # rows before i hold S(i) = i*(2n - i - 1)/2 pairs; find the largest i with S(i) <= k
    kf = k.astype(np.float64)
    i = np.floor(((2 * n - 1) - np.sqrt((2.0 * n - 1) ** 2 - 8 * kf)) / 2).astype(np.int64)
    i = np.clip(i, 0, max(n - 2, 0))

    def S(r: np.ndarray) -> np.ndarray:
        return r * (2 * n - r - 1) // 2  # type: ignore[no-any-return]  # numpy stubs: int arithmetic is Any

    for _ in range(3):  # fix rounding at the boundaries
        i = np.where(S(i) > k, i - 1, i)
        i = np.where(S(i + 1) <= k, i + 1, i)
    j = k - S(i) + i + 1
    return i, j
