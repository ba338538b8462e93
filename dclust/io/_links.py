"""Reading must-link / cannot-link pairs from a links CSV: the format the CLI's ``--constraints LINKS.csv`` and
``dclust constraints import`` take, public so that Python users read the same files the same way.

A links CSV has a header row with the columns ``i``, ``j`` (0-based row indices) and ``type`` (``must`` /
``cannot``, ``ml`` / ``cl`` or ``1`` / ``-1``, case-insensitive), and optionally ``weight`` (a positive confidence per
link). Blank lines are skipped; a bad row raises :class:`~dclust.errors.InvalidDataError` naming its line.
"""

from __future__ import annotations

import csv
import io as _io
import os
from typing import Any, NamedTuple, Optional

import numpy as np

from .._store._atomic import _local_only, _resolve, _url_fs, check_storage_options
from ..errors import InvalidDataError, StorageError, message

__all__ = ["LinkPairs", "read_links"]

_MUST = {"must", "ml", "1", "+1", "must-link", "must_link", "mustlink"}
_CANNOT = {"cannot", "cl", "-1", "cannot-link", "cannot_link", "cannotlink"}
_REQUIRED = ("i", "j", "type")


class LinkPairs(NamedTuple):
    """The rows of a links CSV: endpoints, must-link flags, and the weights (None without a ``weight`` column).

    Pass them to :meth:`dclust.ConstraintGraph.from_pairs` (``weight=pairs.weight``).

    Examples
    --------
    >>> import os, tempfile, dclust
    >>> from dclust.io import read_links
    >>> with tempfile.TemporaryDirectory() as d:
    ...     path = os.path.join(d, "links.csv")
    ...     _ = open(path, "w").write("i,j,type,weight\\n0,1,must,1.0\\n2,3,cannot,0.5\\n")
    ...     pairs = read_links(path)
    >>> G = dclust.ConstraintGraph.from_pairs(pairs.i, pairs.j, pairs.must_link, n_samples=4, weight=pairs.weight)
    >>> pairs.must_link.tolist(), pairs.weight.tolist()
    ([True, False], [1.0, 0.5])
    """

    i: np.ndarray
    j: np.ndarray
    must_link: np.ndarray
    weight: Optional[np.ndarray]


def _bad(path: str, line: int | None, expected: str, received: str, fix: str) -> InvalidDataError:
    where = f"links CSV {path!r}" + (f" line {line}" if line is not None else "")
    return InvalidDataError(message(where, expected, received, fix))


def _index(path: str, line: int, column: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise _bad(path, line, f"an integer row index in column {column!r}", repr(text),
                   "Row indices are 0-based integers.") from None


def _text(path: str | os.PathLike[str], storage_options: dict[str, Any] | None) -> tuple[str, str]:
    """``(shown path, the file's text)`` of a local path or fsspec URL (a BOM is dropped)."""
    url, local = _resolve(path, "read_links")
    options = check_storage_options(storage_options, "read_links")
    if local is not None:
        _local_only(options, "read_links", local)
    shown = local if local is not None else url
    fs, root = _url_fs(local if local is not None else url, options)
    try:
        with fs.open(root, "rb") as fh:
            return shown, fh.read().decode("utf-8-sig")
    except FileNotFoundError:
        raise StorageError(message("read_links", "an existing links CSV", f"{shown!r}, which does not exist",
                                   "Check the path.")) from None


def read_links(path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None) -> LinkPairs:
    """Read a links CSV (header ``i, j, type[, weight]``).

    Parameters
    ----------
    path : str or os.PathLike
        Local path or fsspec URL of the CSV file.
    storage_options : dict, optional
        Arguments of the fsspec filesystem of a URL ``path``.

    Returns
    -------
    LinkPairs
        ``i``, ``j`` (int64), ``must_link`` (bool) and ``weight`` (float64, or None without a ``weight`` column),
        one entry per link, in file order.

    Raises
    ------
    InvalidDataError
        A missing or repeated column, a row with another number of fields, a row index that is not an integer, an
        unknown link type, or a weight that is not a finite positive number: the message names the line.
    StorageError
        The file does not exist.

    Examples
    --------
    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "links.csv")
    >>> _ = open(p, "w").write("i,j,type\\n0,1,must\\n2,3,cannot\\n")
    >>> pairs = read_links(p)
    >>> pairs.i.tolist(), pairs.j.tolist(), pairs.must_link.tolist(), pairs.weight
    ([0, 2], [1, 3], [True, False], None)
    """
    shown, text = _text(path, storage_options)
    reader = csv.reader(_io.StringIO(text, newline=""))
    header = next(reader, None)
    if header is None:
        raise _bad(shown, None, "a header row with the columns i, j, type", "an empty file",
                   "Write the header 'i,j,type' (optionally ',weight') and one link per line.")
    names = [h.strip().lower() for h in header]
    missing = [c for c in _REQUIRED if c not in names]
    if missing:
        raise _bad(shown, 1, "a header with the columns i, j, type (and optionally weight)",
                   f"the columns {', '.join(repr(h) for h in header)} (missing {', '.join(missing)})",
                   "Name the columns i, j and type in the first row.")
    if len(set(names)) != len(names):
        raise _bad(shown, 1, "each column once", f"the columns {', '.join(repr(h) for h in header)}",
                   "Remove the repeated column.")
    col = {name: names.index(name) for name in names}
    has_weight = "weight" in col
    i: list[int] = []
    j: list[int] = []
    must: list[bool] = []
    weight: list[float] = []
    for row in reader:
        line = reader.line_num
        if not row or all(not cell.strip() for cell in row):
            continue  # blank lines
        if len(row) != len(names):
            raise _bad(shown, line, f"{len(names)} fields like the header", f"{len(row)} fields",
                       "Give every link the same columns as the header.")
        i.append(_index(shown, line, "i", row[col["i"]]))
        j.append(_index(shown, line, "j", row[col["j"]]))
        kind = row[col["type"]].strip().lower()
        if kind in _MUST:
            must.append(True)
        elif kind in _CANNOT:
            must.append(False)
        else:
            raise _bad(shown, line, "a link type must/cannot, ml/cl or 1/-1", repr(row[col["type"]]),
                       "Fix the type column.")
        if has_weight:
            value = row[col["weight"]]
            try:
                w = float(value)
            except ValueError:
                raise _bad(shown, line, "a number in column 'weight'", repr(value),
                           "Weights are positive confidences (1 = certain).") from None
            if not (np.isfinite(w) and w > 0):
                raise _bad(shown, line, "a finite weight > 0", repr(value),
                           "Weights are positive confidences; drop links you do not trust.")
            weight.append(w)
    return LinkPairs(np.asarray(i, dtype=np.int64), np.asarray(j, dtype=np.int64), np.asarray(must, dtype=bool),
                     np.asarray(weight, dtype=np.float64) if has_weight else None)
