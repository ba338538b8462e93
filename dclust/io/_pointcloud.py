"""Point-cloud frames: read sequences of ``.ply`` / ``.las`` / ``.laz`` / ``.npy`` files or a Zarr array of frames,
and write the per-frame label store and the tracks table of ``dclust pointcloud track``.

A source is scanned once from metadata (file headers, array shapes) by :func:`scan_frames`: every frame's point
count and the attributes it carries (colour, normals) are known before any output is written, and problems
(missing optional dependency, unreadable or empty frame, wrong point dimensions) raise then. Frames are then read
one at a time (:meth:`FrameSource.read`), so memory is bounded by one frame.

Attributes per frame: ``xyz`` (float64, (n, 3)), ``rgb`` (float64 in [0, 1], (n, 3); integer colours are divided
by their type's maximum, e.g. 255 for ``uchar`` PLY colours, 65535 for LAS) and ``normals`` (float64, (n, 3)).

- ``.ply`` (plyfile): element ``vertex`` with ``x, y, z`` and optionally ``red, green, blue`` and ``nx, ny, nz``.
- ``.las`` / ``.laz`` (laspy, with the lazrs backend for ``.laz``): scaled ``x, y, z``; ``red, green, blue`` when
  the point format has them. LAS has no normals.
- ``.npy``: a structured array with fields ``x, y, z`` (and optionally ``red, green, blue``, ``nx, ny, nz``), or a
  plain (n, 3) xyz, (n, 6) xyz+rgb or (n, 9) xyz+rgb+normals array.
- Zarr: a 3-D array (frames, points, 3|6|9) whose padding rows are all-NaN; a group with such an array ``points``
  and optionally ``counts`` (frames,) giving the valid rows of each frame; or a group of 2-D arrays named
  ``0, 1, 2, ...`` (one per frame).

Optional dependencies are imported lazily; a missing one raises an ImportError naming the extra
(``pip install 'dclust[pointcloud]'``).
"""

from __future__ import annotations

import csv
import glob
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import InvalidDataError, InvalidParameterError, StorageError, message
from .._store._atomic import _atomic_write, _check_new_target, _resolve
from ._write import _compressors

__all__ = [
    "FEATURES",
    "FrameInfo",
    "FrameSource",
    "PointFrame",
    "scan_frames",
    "write_ply",
    "write_las",
    "write_npy",
    "FrameLabelsWriter",
    "check_new_store",
    "write_labels_store",
    "write_table",
    "check_new_file",
    "atomic_file",
]

FEATURES = ("xyz", "rgb", "normals")
EXTENSIONS = (".ply", ".las", ".laz", ".npy")
_EXTRA = "pip install 'dclust[pointcloud]'"


def _import(module: str, what: str) -> Any:
    try:
        return __import__(module)
    except ImportError as exc:
        raise ImportError(f"{what} needs the optional dependency {module!r}, which is not installed; install the "
                          f"extra: {_EXTRA}") from exc


@dataclass
class PointFrame:
    """One frame: ``xyz`` (n, 3) and optionally ``rgb`` / ``normals`` (n, 3), all float64.

    Examples
    --------
    >>> import numpy as np
    >>> from dclust.io.pointcloud import PointFrame
    >>> frame = PointFrame(xyz=np.zeros((5, 3)), rgb=np.ones((5, 3)))
    >>> len(frame), frame.get("rgb").shape, frame.normals is None
    (5, (5, 3), True)
    """

    xyz: np.ndarray
    rgb: np.ndarray | None = None
    normals: np.ndarray | None = None
    name: str = ""

    def __len__(self) -> int:
        return int(self.xyz.shape[0])

    def get(self, feature: str) -> np.ndarray | None:
        value: np.ndarray | None = getattr(self, feature)
        return value


@dataclass
class FrameInfo:
    """What the metadata of one frame says: where it is, how many points, which attributes."""

    name: str
    kind: str  # "ply", "las", "npy", "zarr"
    n_points: int
    has: frozenset[str] = field(default_factory=frozenset)  # subset of {"rgb", "normals"}
    loc: Any = None  # path, or (zarr array, frame index) / zarr member


def _bad_frame(info_name: str, index: int, expected: str, received: str, fix: str) -> InvalidDataError:
    return InvalidDataError(message(f"point-cloud frame {index} ({info_name})", expected, received, fix))


# -------------------------------------------------------------------------------------------------- PLY


def _ply_header(path: str) -> tuple[int, set[str]]:
    """(vertex count, vertex property names) from the header alone."""
    with open(path, "rb") as f:
        if f.readline().strip() != b"ply":
            raise ValueError("not a PLY file (no 'ply' magic line)")
        count, props, element = None, set(), None
        for _ in range(10_000):
            line = f.readline()
            if not line:
                raise ValueError("truncated header (no end_header)")
            parts = line.decode("ascii", "replace").split()
            if not parts:
                continue
            if parts[0] == "end_header":
                break
            if parts[0] == "element":
                element = parts[1] if len(parts) > 1 else None
                if element == "vertex":
                    count = int(parts[2])
            elif parts[0] == "property" and element == "vertex":
                props.add(parts[-1])
        else:
            raise ValueError("header longer than 10,000 lines")
    if count is None:
        raise ValueError("no 'vertex' element")
    return count, props


def _has(props: set[str] | Sequence[str]) -> frozenset[str]:
    props = set(props)
    out = set()
    if {"red", "green", "blue"} <= props:
        out.add("rgb")
    if {"nx", "ny", "nz"} <= props:
        out.add("normals")
    return frozenset(out)


def _color(cols: Sequence[np.ndarray]) -> np.ndarray:
    c = np.stack([np.asarray(v) for v in cols], axis=1)
    if c.dtype.kind in "iu":
        return c.astype(np.float64) / float(np.iinfo(c.dtype).max)
    return c.astype(np.float64)


def _from_fields(get: Callable[[str], np.ndarray], has: frozenset[str], name: str) -> PointFrame:
    xyz = np.stack([np.asarray(get(a), dtype=np.float64) for a in ("x", "y", "z")], axis=1)
    rgb = _color([get(a) for a in ("red", "green", "blue")]) if "rgb" in has else None
    nrm = (np.stack([np.asarray(get(a), dtype=np.float64) for a in ("nx", "ny", "nz")], axis=1)
           if "normals" in has else None)
    return PointFrame(xyz, rgb, nrm, name)


def _read_ply(path: str, has: frozenset[str]) -> PointFrame:
    plyfile = _import("plyfile", "reading .ply frames")
    data = plyfile.PlyData.read(path)
    v = data["vertex"].data
    return _from_fields(lambda a: v[a], has, os.path.basename(path))


# -------------------------------------------------------------------------------------------------- LAS


def _laspy(what: str) -> Any:
    return _import("laspy", what)


def _las_header(path: str) -> tuple[int, set[str]]:
    laspy = _laspy("reading .las/.laz frames")
    with laspy.open(path) as reader:
        dims = set(reader.header.point_format.dimension_names)
        return int(reader.header.point_count), dims


def _read_las(path: str, has: frozenset[str]) -> PointFrame:
    laspy = _laspy("reading .las/.laz frames")
    try:
        las = laspy.read(path)
    except laspy.errors.LaspyException as exc:
        if "backend" in str(exc).lower() or "laz" in str(exc).lower():
            raise ImportError(f"reading .laz frames needs a LAZ backend for laspy (lazrs), which is not installed; "
                              f"install the extra: {_EXTRA}") from exc
        raise
    return _from_fields(lambda a: getattr(las, a), has, os.path.basename(path))


# -------------------------------------------------------------------------------------------------- NPY


def _npy_layout(shape: tuple[int, ...], dtype: np.dtype) -> tuple[int, frozenset[str]]:
    """(points, attributes) of a .npy / Zarr frame array, or ValueError with what is wrong."""
    if dtype.names:
        if not {"x", "y", "z"} <= set(dtype.names):
            raise ValueError(f"a structured array without fields x, y, z (fields {', '.join(dtype.names)})")
        if len(shape) != 1:
            raise ValueError(f"a structured array of shape {shape} (expected 1-D)")
        return int(shape[0]), _has(dtype.names)
    if len(shape) != 2 or shape[1] not in (3, 6, 9):
        raise ValueError(f"shape {shape}")
    if dtype.kind not in "iuf":
        raise ValueError(f"dtype {dtype}")
    return int(shape[0]), frozenset({3: (), 6: ("rgb",), 9: ("rgb", "normals")}[shape[1]])


def _plain_frame(a: np.ndarray, has: frozenset[str], name: str) -> PointFrame:
    a = np.asarray(a)
    if a.dtype.names:
        return _from_fields(lambda f: a[f], has, name)
    xyz = a[:, :3].astype(np.float64)
    rgb = a[:, 3:6].astype(np.float64) if "rgb" in has else None
    if rgb is not None and a.dtype.kind in "iu":
        rgb = rgb / float(np.iinfo(a.dtype).max)
    nrm = a[:, 6:9].astype(np.float64) if "normals" in has else None
    return PointFrame(xyz, rgb, nrm, name)


_DIMS_FIX = ("Give each frame as (n, 3) xyz, (n, 6) xyz+rgb or (n, 9) xyz+rgb+normals, or a structured array "
             "with fields x, y, z[, red, green, blue][, nx, ny, nz].")


# -------------------------------------------------------------------------------------------------- source


def _natural_key(path: str) -> list[int | str]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", os.path.basename(path))]


class FrameSource:
    """A scanned sequence of frames (see :func:`scan_frames`)."""

    def __init__(self, description: str, frames: list[FrameInfo]) -> None:
        self.description = description
        self.frames = frames

    def __len__(self) -> int:
        return len(self.frames)

    @property
    def max_points(self) -> int:
        return max((f.n_points for f in self.frames), default=0)

    @property
    def counts(self) -> np.ndarray:
        return np.array([f.n_points for f in self.frames], dtype=np.int64)

    def common_attributes(self) -> frozenset[str]:
        """Attributes every frame has."""
        out = frozenset({"rgb", "normals"})
        for f in self.frames:
            out &= f.has
        return out

    def require(self, features: Sequence[str]) -> None:
        """Raise (before any work) if a requested feature is missing from some frame."""
        for feat in features:
            if feat == "xyz":
                continue
            missing = [i for i, f in enumerate(self.frames) if feat not in f.has]
            if missing:
                f = self.frames[missing[0]]
                raise _bad_frame(
                    f.name, missing[0],
                    f"the attribute {feat!r} ({'red, green, blue' if feat == 'rgb' else 'nx, ny, nz'}) in every frame",
                    f"a frame without it ({len(missing)} of {len(self)} frames lack it)",
                    f"Drop {feat!r} from the features, or give frames that carry it.")

    def read(self, index: int) -> PointFrame:
        """Frame ``index`` (all its attributes), checked against its scanned point count; finite xyz."""
        info = self.frames[index]
        try:
            if info.kind == "ply":
                frame = _read_ply(info.loc, info.has)
            elif info.kind == "las":
                frame = _read_las(info.loc, info.has)
            elif info.kind == "npy":
                frame = _plain_frame(np.load(info.loc, allow_pickle=False), info.has, info.name)
            else:  # zarr: (array, frame index or None)
                arr, t = info.loc
                a = np.asarray(arr[t, : info.n_points] if t is not None else arr[...])
                frame = _plain_frame(a, info.has, info.name)
        except (ImportError, InvalidDataError):
            raise
        except Exception as exc:  # noqa: BLE001 - any parse failure is an unreadable frame
            raise _bad_frame(info.name, index, "a readable point-cloud file", f"{type(exc).__name__}: {exc}",
                             "Repair or remove that frame.") from None
        if len(frame) != info.n_points:
            raise _bad_frame(info.name, index, f"{info.n_points} points (its header)", f"{len(frame)} points",
                             "Repair or remove that frame.")
        bad = ~np.isfinite(frame.xyz).all(axis=1)
        if bad.any():
            raise _bad_frame(info.name, index, "finite x, y, z",
                             f"NaN or infinity in point {int(np.flatnonzero(bad)[0])}",
                             "Drop those points from the frame.")
        return frame


def _scan_file(path: str, index: int) -> FrameInfo:
    name = os.path.basename(path)
    ext = os.path.splitext(path)[1].lower()
    reader: Callable[[str], tuple[int, Any]]
    if ext == ".ply":
        _import("plyfile", "reading .ply frames")
        kind, reader = "ply", _ply_header
    elif ext in (".las", ".laz"):
        laspy = _laspy("reading .las/.laz frames")
        if ext == ".laz" and not laspy.LazBackend.detect_available():
            raise ImportError(f"reading .laz frames needs a LAZ backend for laspy (lazrs), which is not installed; "
                              f"install the extra: {_EXTRA}")
        kind, reader = "las", _las_header
    elif ext == ".npy":
        kind = "npy"

        def npy_reader(p: str) -> tuple[int, Any]:
            a = np.load(p, mmap_mode="r", allow_pickle=False)
            return _npy_layout(a.shape, a.dtype)

        reader = npy_reader
    else:
        raise _bad_frame(name, index, f"a file ending in {', '.join(EXTENSIONS)}", f"extension {ext or '(none)'!r}",
                         "Pass a directory or glob of supported frames.")
    try:
        n, props = reader(path)
    except ImportError:
        raise
    except ValueError as exc:
        if kind == "npy":
            raise _bad_frame(name, index, "points of 3, 6 or 9 values (xyz[, rgb][, normals])", str(exc),
                             _DIMS_FIX) from None
        raise _bad_frame(name, index, f"a readable .{ext[1:]} file", f"ValueError: {exc}",
                         "Repair or remove that frame.") from None
    except Exception as exc:  # noqa: BLE001 - anything the parsers raise on garbage
        raise _bad_frame(name, index, f"a readable {ext} file", f"{type(exc).__name__}: {exc}",
                         "Repair or remove that frame.") from None
    has = props if isinstance(props, frozenset) else _has(props)
    if kind == "ply" and not {"x", "y", "z"} <= set(props):
        raise _bad_frame(name, index, "vertices with properties x, y, z",
                         f"properties {', '.join(sorted(props)) or 'none'}", _DIMS_FIX)
    return FrameInfo(name, kind, int(n), has, path)


def _scan_zarr(local: str) -> list[FrameInfo]:
    import zarr

    node = zarr.open(local, mode="r")
    base = os.path.basename(local.rstrip(os.sep))
    if isinstance(node, zarr.Group):
        members = dict(node.arrays())
        if "points" in members:
            arr = members["points"]
            counts = np.asarray(members["counts"][...]) if "counts" in members else None
            return _zarr_frames(arr, counts, f"{base}/points")
        names = sorted((k for k in members if k.isdigit()), key=int)
        if not names:
            raise InvalidDataError(message(f"point-cloud source {local!r}", "a Zarr group with an array 'points' "
                                           "(frames, points, dims) or arrays named 0, 1, 2, ... (one per frame)",
                                           f"a group with members {', '.join(sorted(members)) or 'none'}",
                                           "Write the frames as described in dclust.io._pointcloud."))
        out = []
        for i, k in enumerate(names):
            a = members[k]
            try:
                n, has = _npy_layout(a.shape, a.dtype)
            except ValueError as exc:
                raise _bad_frame(f"{base}/{k}", i, "points of 3, 6 or 9 values", str(exc), _DIMS_FIX) from None
            out.append(FrameInfo(f"{base}/{k}", "zarr", n, has, (a, None)))
        return out
    return _zarr_frames(node, None, base)


def _zarr_frames(arr: Any, counts: np.ndarray | None, name: str) -> list[FrameInfo]:
    if arr.ndim != 3:
        raise InvalidDataError(message(f"point-cloud array {name}", "3 dimensions (frames, points, dims)",
                                       f"shape {arr.shape}", _DIMS_FIX))
    try:
        _, has = _npy_layout(arr.shape[1:], arr.dtype)
    except ValueError as exc:
        raise InvalidDataError(message(f"point-cloud array {name}", "frames of points of 3, 6 or 9 values",
                                       str(exc), _DIMS_FIX)) from None
    T, P = arr.shape[:2]
    if counts is not None:
        counts = np.asarray(counts).reshape(-1)
        if counts.shape[0] != T or (counts < 0).any() or (counts > P).any():
            raise InvalidDataError(message(f"{name} counts", f"{T} counts in [0, {P}]",
                                           f"{counts.shape[0]} counts in [{counts.min(initial=0)}, "
                                           f"{counts.max(initial=0)}]", "Write one valid row count per frame."))
    out = []
    for t in range(T):
        if counts is not None:
            n = int(counts[t])
        else:  # padding rows are all-NaN (read the xyz column of the frame; one frame at a time)
            xyz = np.asarray(arr[t, :, 0])
            valid = np.flatnonzero(~np.isnan(xyz)) if xyz.dtype.kind == "f" else np.arange(P)
            n = int(valid[-1]) + 1 if valid.size else 0
        out.append(FrameInfo(f"{name}[{t}]", "zarr", n, has, (arr, t)))
    return out


def scan_frames(source: Any) -> FrameSource:
    """Find and check the frames of ``source`` from their metadata.

    Parameters
    ----------
    source : str, os.PathLike or sequence of paths
        A directory (every ``.ply``/``.las``/``.laz``/``.npy`` file in it, in natural name order), a glob
        pattern (``"scans/*.laz"``), a list of files, or a Zarr store of frames (see the module docstring).

    Returns
    -------
    FrameSource
        ``len(source)`` frames with their point counts; ``source.read(t)`` reads frame ``t``.

    Raises
    ------
    InvalidDataError
        No frames, an unsupported file, an unreadable header, a frame with no points or with points of the
        wrong dimension.
    ImportError
        plyfile / laspy (lazrs) missing for the frames given; the message names the extra ``pointcloud``.

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> from dclust.io.pointcloud import scan_frames, write_npy
    >>> with tempfile.TemporaryDirectory() as d:
    ...     for t in range(3):
    ...         _ = write_npy(os.path.join(d, f"scan{t}.npy"), np.zeros((4 + t, 3)))
    ...     src = scan_frames(os.path.join(d, "scan*.npy"))      # a glob; a directory or a list of files works too
    ...     sizes = [len(src.read(t)) for t in range(len(src))]
    >>> sizes
    [4, 5, 6]
    """
    if isinstance(source, (list, tuple)):
        paths = [os.fspath(p) for p in source]
        description = f"{len(paths)} files"
    else:
        if not isinstance(source, (str, os.PathLike)):
            raise InvalidParameterError(message("point-cloud source", "a directory, glob, Zarr path or list of files",
                                                type(source).__name__, "Pass a path."))
        text = os.fspath(source)
        description = text
        local = _resolve(text, "point-cloud source")[1] or text
        if os.path.isdir(local) and any(os.path.isfile(os.path.join(local, m))
                                        for m in ("zarr.json", ".zarray", ".zgroup")):
            frames = _scan_zarr(local)
            return _checked(FrameSource(description, frames))
        if os.path.isdir(local):
            paths = [os.path.join(local, p) for p in os.listdir(local)
                     if os.path.splitext(p)[1].lower() in EXTENSIONS and not p.startswith(".")]
        elif os.path.isfile(local):
            paths = [local]
        else:
            paths = glob.glob(text)
            if not paths and not glob.has_magic(text):
                raise StorageError(message(f"point-cloud source {text!r}", "an existing directory, file, glob or "
                                           "Zarr store", "nothing at that path", "Check the path."))
        paths = sorted(paths, key=_natural_key)
    if not paths:
        raise InvalidDataError(message(f"point-cloud source {description!r}",
                                       f"at least one frame ({', '.join(EXTENSIONS)})", "no matching files",
                                       "Check the directory or glob pattern."))
    frames = [_scan_file(p, i) for i, p in enumerate(paths)]
    return _checked(FrameSource(description, frames))


def _checked(src: FrameSource) -> FrameSource:
    if not src.frames:
        raise InvalidDataError(message(f"point-cloud source {src.description!r}", "at least one frame", "none",
                                       "Pass a non-empty sequence of frames."))
    for i, f in enumerate(src.frames):
        if f.n_points == 0:
            raise _bad_frame(f.name, i, "a frame with at least one point", "an empty frame (0 points)",
                             "Remove the empty frame from the sequence.")
    return src


# -------------------------------------------------------------------------------------------------- writers


def _frame_fields(xyz: np.ndarray, rgb: np.ndarray | None, normals: np.ndarray | None) -> list[tuple[str, Any]]:
    cols: list[tuple[str, Any]] = [("x", xyz[:, 0]), ("y", xyz[:, 1]), ("z", xyz[:, 2])]
    if rgb is not None:
        c = np.clip(np.round(np.asarray(rgb) * 255), 0, 255).astype(np.uint8)
        cols += [("red", c[:, 0]), ("green", c[:, 1]), ("blue", c[:, 2])]
    if normals is not None:
        cols += [("nx", normals[:, 0]), ("ny", normals[:, 1]), ("nz", normals[:, 2])]
    return cols


def _check_xyz(xyz: Any, what: str) -> np.ndarray:
    arr = np.asarray(xyz)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise InvalidDataError(message(f"{what}(xyz=...)", "an (n, 3) array", f"shape {arr.shape}", "Pass x, y, z."))
    return arr


def _atomic_file(path: str | os.PathLike[str], write: Callable[[str], None]) -> str:
    """Write the file ``path`` atomically: ``write(tmp)`` writes a temporary sibling, renamed into place when it
    returns; on any error the temporary is removed and a previous file is left as it was. Returns the absolute path.

    Examples
    --------
    >>> import os, tempfile
    >>> from dclust.io.pointcloud import atomic_file
    >>> with tempfile.TemporaryDirectory() as d:
    ...     path = atomic_file(os.path.join(d, "ids.txt"), lambda tmp: open(tmp, "w").write("1 2 3"))
    ...     print(open(path).read(), sorted(os.listdir(d)))
    1 2 3 ['ids.txt']
    """
    path = os.path.abspath(os.fspath(path))
    parent, name = os.path.dirname(path), os.path.basename(path)
    tmp = os.path.join(parent, f".{name}.tmp-{os.getpid()}-{np.random.default_rng().integers(1 << 40):x}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.remove(tmp)
        raise
    return path


atomic_file = _atomic_file


def write_ply(path: str | os.PathLike[str], xyz: Any, rgb: Any = None, normals: Any = None, *,
              binary: bool = True) -> str:
    """Write one frame as a PLY file (float32 x, y, z; uchar colours from ``rgb`` in [0, 1]; float32 normals).

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> from dclust.io.pointcloud import scan_frames, write_ply
    >>> xyz, rgb = np.random.default_rng(0).random((10, 3)), np.full((10, 3), 0.5)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = write_ply(os.path.join(d, "f.ply"), xyz, rgb)
    ...     frame = scan_frames(d).read(0)
    >>> frame.xyz.shape, bool(np.allclose(frame.xyz, xyz, atol=1e-6)), frame.rgb is not None
    ((10, 3), True, True)
    """
    plyfile = _import("plyfile", "writing .ply frames")
    xyz = _check_xyz(xyz, "write_ply")
    cols = _frame_fields(xyz, rgb, normals)
    dtype = [(n, "u1" if n in ("red", "green", "blue") else "f4") for n, _ in cols]
    v = np.empty(xyz.shape[0], dtype=dtype)
    for n, c in cols:
        v[n] = c
    data = plyfile.PlyData([plyfile.PlyElement.describe(v, "vertex")], text=not binary)
    return _atomic_file(path, lambda tmp: data.write(tmp))


def write_las(path: str | os.PathLike[str], xyz: Any, rgb: Any = None, *, scale: float = 1e-4) -> str:
    """Write one frame as LAS 1.4 (``.las``) or compressed LAZ (``.laz``, lazrs): point format 7 with colour
    (16-bit, from ``rgb`` in [0, 1]) or 6 without.

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> from dclust.io.pointcloud import scan_frames, write_las
    >>> xyz = np.random.default_rng(0).random((10, 3)) * 10
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = write_las(os.path.join(d, "f.las"), xyz)
    ...     frame = scan_frames(d).read(0)
    >>> bool(np.allclose(frame.xyz, xyz, atol=1e-4))     # coordinates stored at the scale 1e-4
    True
    """
    laspy = _laspy("writing .las/.laz frames")
    xyz = _check_xyz(xyz, "write_las")
    header = laspy.LasHeader(point_format=7 if rgb is not None else 6, version="1.4")
    header.offsets = np.floor(xyz.min(axis=0)) if xyz.shape[0] else np.zeros(3)
    header.scales = np.full(3, scale)
    las = laspy.LasData(header)
    las.x, las.y, las.z = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    if rgb is not None:
        c = np.clip(np.round(np.asarray(rgb) * 65535), 0, 65535).astype(np.uint16)
        las.red, las.green, las.blue = c[:, 0], c[:, 1], c[:, 2]
    laz = os.fspath(path).lower().endswith(".laz")
    ext = ".laz" if laz else ".las"

    def write(tmp: str) -> None:
        las.write(tmp + ext, do_compress=laz)
        os.replace(tmp + ext, tmp)

    return _atomic_file(path, write)


def write_npy(path: str | os.PathLike[str], xyz: Any, rgb: Any = None, normals: Any = None) -> str:
    """Write one frame as a plain ``.npy`` array: (n, 3), (n, 6) with rgb, or (n, 9) with rgb and normals.

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> from dclust.io.pointcloud import write_npy
    >>> with tempfile.TemporaryDirectory() as d:
    ...     path = write_npy(os.path.join(d, "f.npy"), np.zeros((4, 3)), rgb=np.ones((4, 3)))
    ...     shape = np.load(path).shape
    >>> shape
    (4, 6)
    """
    xyz = _check_xyz(xyz, "write_npy")
    if normals is not None and rgb is None:
        raise InvalidParameterError(message("write_npy(normals=...)", "normals together with rgb (columns 6-8)",
                                            "normals without rgb", "Pass rgb as well, or a structured array."))
    cols = [xyz] + [np.asarray(a) for a in (rgb, normals) if a is not None]
    a = np.ascontiguousarray(np.concatenate(cols, axis=1).astype(np.float32))

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            np.save(f, a)

    return _atomic_file(path, write)


def check_new_file(path: str, overwrite: bool, option: str) -> str:
    """Absolute path of a new output file; raises StorageError if it exists (without ``overwrite``) or is a
    directory.

    Examples
    --------
    >>> import os, tempfile, dclust
    >>> from dclust.io.pointcloud import check_new_file
    >>> with tempfile.TemporaryDirectory() as d:
    ...     path = os.path.join(d, "tracks.csv")
    ...     _ = open(path, "w").write("id\\n")
    ...     try:
    ...         check_new_file(path, overwrite=False, option="--tracks")
    ...     except dclust.errors.StorageError:
    ...         print("exists:", check_new_file(path, overwrite=True, option="--tracks") == path)
    exists: True
    """
    local = os.path.abspath(os.fspath(path))
    if os.path.lexists(local):
        if os.path.isdir(local) or not overwrite:
            raise StorageError(message(f"{option} {path!r}", "a path where no file exists yet (or --overwrite for a "
                                       "file)", "a directory" if os.path.isdir(local) else "an existing file",
                                       "Pass --overwrite (overwrite=True), or choose another path."))
    if not os.path.isdir(os.path.dirname(local)):
        raise StorageError(message(f"{option} {path!r}", "a path in an existing directory",
                                   "a missing parent directory", "Create the directory first."))
    return local


class FrameLabelsWriter:
    """The label store of a tracking job, written into ``tmp`` (a new directory) frame by frame.

    Zarr v3 group with ``labels`` (frames, max_points) int32, ``-1`` padding, one chunk per frame (blosc-lz4), and
    ``counts`` (frames,) int32.

    Examples
    --------
    >>> import os, tempfile, numpy as np, zarr
    >>> from dclust.io.pointcloud import FrameLabelsWriter, write_labels_store
    >>> def fill(tmp):
    ...     writer = FrameLabelsWriter(tmp, n_frames=2, max_points=3, counts=np.array([3, 2]), attrs={"lam": 4.0})
    ...     writer.write(0, np.array([0, 0, 1]))
    ...     writer.write(1, np.array([1, 1]))
    >>> with tempfile.TemporaryDirectory() as d:
    ...     store = write_labels_store(os.path.join(d, "ids.zarr"), False, fill)
    ...     labels = zarr.open_group(store, mode="r")["labels"][...]
    >>> labels.tolist()                                     # -1 pads the shorter frame
    [[0, 0, 1], [1, 1, -1]]
    """

    def __init__(self, tmp: str, n_frames: int, max_points: int, counts: np.ndarray, attrs: dict[str, Any]) -> None:
        import zarr

        group = zarr.create_group(store=tmp, zarr_format=3, attributes=attrs)
        dtype = np.dtype(np.int32)
        self.labels = group.create_array("labels", shape=(n_frames, max_points), dtype=dtype,
                                         chunks=(1, max(1, max_points)), compressors=_compressors("auto", dtype),
                                         fill_value=-1)
        c = group.create_array("counts", shape=(n_frames,), dtype=dtype, chunks=(max(1, n_frames),),
                               compressors=_compressors("auto", dtype))
        c[...] = np.asarray(counts, dtype=np.int32)
        self.group = group
        self.max_points = max_points

    def write(self, t: int, labels: np.ndarray) -> None:
        row = np.full(self.max_points, -1, np.int32)
        row[: labels.shape[0]] = labels
        self.labels[t] = row

    def set_attrs(self, attrs: dict[str, Any]) -> None:
        self.group.attrs.update(attrs)


def check_new_store(path: str | os.PathLike[str], overwrite: bool, option: str = "OUT.zarr") -> str:
    """Absolute local path of a new Zarr store; raises StorageError (before anything is written) for a remote URL,
    an existing store without ``overwrite``, or an existing path that is not a Zarr store.

    Examples
    --------
    >>> import os, tempfile, dclust
    >>> from dclust.io.pointcloud import check_new_store
    >>> with tempfile.TemporaryDirectory() as d:
    ...     path = check_new_store(os.path.join(d, "ids.zarr"), overwrite=False)   # free: its absolute path
    ...     try:
    ...         check_new_store("s3://bucket/ids.zarr", overwrite=False)
    ...     except dclust.errors.StorageError:
    ...         print(os.path.basename(path), "remote refused")
    ids.zarr remote refused
    """
    local = _resolve(path, option)[1]
    if local is None:
        raise StorageError(message(f"{option} {os.fspath(path)!r}", "a local path (the store is renamed into place "
                                   "when complete)", "a remote URL", "Write locally, then copy the store."))
    _check_new_target(local, overwrite, option)
    return local


def write_labels_store(path: str, overwrite: bool, fill: Callable[[str], None]) -> str:
    """Create the store at ``path`` atomically: ``fill(tmp)`` writes it (e.g. through :class:`FrameLabelsWriter`).

    Examples
    --------
    >>> import os, tempfile, zarr
    >>> from dclust.io.pointcloud import write_labels_store
    >>> with tempfile.TemporaryDirectory() as d:
    ...     path = write_labels_store(os.path.join(d, "out.zarr"), False, lambda tmp: zarr.create_group(store=tmp))
    ...     print(os.listdir(d))                            # the temporary was renamed into place
    ['out.zarr']
    """
    local = check_new_store(path, overwrite)
    _atomic_write(local, fill)
    return local


def write_table(columns: dict[str, np.ndarray], path: str) -> str:
    """Write a table (equal-length columns) as Parquet (``.parquet``/``.pq``, pyarrow) or CSV, atomically.

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> from dclust.io.pointcloud import write_table
    >>> with tempfile.TemporaryDirectory() as d:
    ...     path = write_table({"id": np.array([0, 1]), "n_points": np.array([10, 12])}, os.path.join(d, "tracks.csv"))
    ...     print(open(path).read().splitlines()[0])
    id,n_points
    """
    lower = os.fspath(path).lower()
    if lower.endswith((".parquet", ".pq")):
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise ImportError("writing a Parquet tracks table needs the optional dependency 'pyarrow', which is not "
                              f"installed; install the extra: {_EXTRA} (or write .csv)") from exc
        table = pa.table({k: np.asarray(v) for k, v in columns.items()})
        return _atomic_file(path, lambda tmp: pq.write_table(table, tmp))
    if not lower.endswith(".csv"):
        raise InvalidParameterError(message(f"tracks table {path!r}", "a path ending in .parquet, .pq or .csv",
                                            repr(os.path.splitext(lower)[1]), "Use tracks.parquet or tracks.csv."))

    def write(tmp: str) -> None:
        names = list(columns)
        cols = [np.asarray(columns[k]) for k in names]
        with open(tmp, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(names)
            for row in zip(*(c.tolist() for c in cols)):
                w.writerow(row)

    return _atomic_file(path, write)
