"""The chunks of the Zarr stores dclust writes: a CRC-32C checksum after the compressor, streamed writes, and the
translation of a damaged chunk into :class:`~dclust.errors.CorruptStoreError`.

Every array dclust writes (data through ``write_array``, labels, models, checkpoints, constraint graphs) is created
by :func:`create_array`, whose codec chain ends with zarr v3's ``crc32c`` codec (:class:`zarr.codecs.Crc32cCodec`):
4 bytes per chunk, computed over the encoded (compressed) bytes when the chunk is written and verified by zarr on
every read. A chunk whose bytes changed, or a chunk file that is empty (0 bytes), then fails its read with zarr's
``ValueError: Stored and computed checksum do not match``; stores written by others (no checksum) fail an empty
chunk with numpy's ``cannot reshape array of size 0``. :func:`chunk_error` turns either (and any other decoding
failure) into one :class:`~dclust.errors.CorruptStoreError` naming the store, the chunk file and its rows: the pass
engine calls it when a task's read of a row block fails (``dclust._dask.passes._read``), and :func:`read_all`
wraps the whole-array reads of models, checkpoints and constraint graphs.

Reads of whole row chunks of uncompressed local stores (what ``write_array`` writes for floating-point data) skip
zarr's decoding: :class:`CheckedArray` reads the chunk file into the returned array and checks the CRC-32C itself
(:class:`_DirectChunks`; any other read, and any chunk that fails, goes through zarr as before).

The codec chain is the only change to the format: the compressor (``write_array``'s ``codec=``) is unchanged,
readers of older stores (without the checksum) are unchanged, and a zarr v3 reader outside dclust reads the stores
as before (``crc32c`` is one of zarr v3's core codecs).
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import numpy as np

from ..errors import CorruptStoreError
from ._atomic import _GuardedTarget

__all__ = ["checksummed", "create_array", "stream_array", "read_all", "chunk_error", "CheckedArray", "dask_from_zarr"]


def checksummed(compressors: list | None) -> list:
    """``compressors`` (None: no compression) followed by the CRC-32C checksum codec, exactly once."""
    from zarr.codecs import Crc32cCodec

    chain = list(compressors or [])
    if not any(isinstance(c, Crc32cCodec) for c in chain):
        chain.append(Crc32cCodec())
    return chain


def create_array(store: Any, name: str | None, *, data: Any = None, compressors: list | None = None,
                 **kwargs: Any) -> Any:
    """``zarr.create_array`` (Zarr v3) with the checksum codec after ``compressors``; ``data`` is written if given."""
    import zarr

    if data is not None:
        kwargs.setdefault("shape", data.shape)
        kwargs.setdefault("dtype", data.dtype)
    z = zarr.create_array(store=store, name=name, compressors=checksummed(compressors), zarr_format=3, **kwargs)
    if data is not None and z.size:
        z[...] = data
    return z


def zarr_chunk_shape(x: Any) -> tuple[int, ...]:
    """The Zarr chunk shape of a dask array's blocks (the largest block along every axis)."""
    return tuple(max(1, max(c) if c else 1) for c in x.chunks)


def stream_array(x: Any, store: str, name: str | None, compressors: list | None, sentinel: str | None) -> None:
    """Create the array ``name`` in ``store`` and stream the dask array ``x`` into it block by block (each block
    covers whole Zarr chunks); the writes stop once ``sentinel`` (the temporary store's metadata) is removed."""
    import dask.array as da

    z = create_array(store, name, shape=x.shape, dtype=x.dtype, chunks=zarr_chunk_shape(x), compressors=compressors)
    da.store(x, _GuardedTarget(z, sentinel), lock=False, compute=True)


# --------------------------------------------------------------------------------------------------------------
# damaged chunks
# --------------------------------------------------------------------------------------------------------------


def _store_name(z: Any) -> str:
    """The store of the zarr array ``z`` as a user knows it: a local path (with the array's path), else its URL."""
    text = str(getattr(z, "store_path", "") or "")
    if text.startswith("file://"):
        return text[len("file://"):]
    return text or type(z).__name__


def _problem(z: Any, key: str, exc: BaseException) -> str:
    """What is wrong with the chunk ``key`` of ``z``, in words."""
    root = getattr(getattr(z, "store", None), "root", None)
    if root is not None:
        try:
            if os.path.getsize(os.path.join(os.fspath(root), *str(z.path).split("/"), *key.split("/"))) == 0:
                return "an empty (0-byte) chunk file"
        except (OSError, TypeError, ValueError):
            pass
    text = f"{exc}"
    if "checksum do not match" in text:
        return "Stored: b''" in text and "an empty (0-byte) chunk file" or "a checksum mismatch (changed bytes)"
    if "array of size 0" in text:
        return "an empty (0-byte) chunk file"
    return "an undecodable chunk (" + f"{type(exc).__name__}: {text}".splitlines()[0][:160] + ")"


def _chunk_key(z: Any, coords: tuple) -> str:
    """The chunk's key in its store: ``c/3/0`` (Zarr v3), ``3.0`` (Zarr v2)."""
    return str(z.metadata.encode_chunk_key(coords))


def chunk_error(z: Any, first: int, last: int, exc: BaseException, *, what: str | None = None,
                block: int | None = None) -> CorruptStoreError:
    """The :class:`~dclust.errors.CorruptStoreError` of a failed read of rows ``first..last`` of the zarr array
    ``z``: re-reads the chunks of those rows one by one (only on this error path) to name the first damaged one.

    ``what`` overrides the store's name in the message (e.g. ``"model.zarr, attributes/cluster_centers_"``);
    ``block`` is the row block of the pass that read them (named in the message). Sources other than zarr arrays
    (h5py, memory maps) get the error for the rows read.
    """
    store = what or _store_name(z)
    shape, chunks = tuple(getattr(z, "shape", ())), tuple(getattr(z, "chunks", ()))
    if not shape or not chunks or not hasattr(z, "blocks") or not hasattr(z, "metadata"):
        return CorruptStoreError.of_chunk(store, "?", first, last, _problem(z, "", exc), block)
    grid = [range(first // chunks[0], last // chunks[0] + 1)] + [range(-(-s // c)) for s, c in zip(shape[1:],
                                                                                                   chunks[1:])]
    for coords in itertools.product(*grid):
        try:
            z.blocks[coords]
        except Exception as err:  # noqa: BLE001 - the chunk's own decoding failure
            key = _chunk_key(z, coords)
            lo = coords[0] * chunks[0]
            hi = min(lo + chunks[0], shape[0]) - 1
            return CorruptStoreError.of_chunk(store, key, lo, hi, _problem(z, key, err), block)
    return CorruptStoreError.of_chunk(store, "?", first, last, _problem(z, "", exc), block)


def read_all(z: Any, what: str | None = None) -> np.ndarray:
    """All of the zarr array ``z`` in memory; a damaged or empty chunk raises
    :class:`~dclust.errors.CorruptStoreError` naming it."""
    try:
        return np.asarray(z[...])
    except Exception as exc:  # noqa: BLE001 - checksum, decompression and reshape failures of zarr and numcodecs
        n = int(z.shape[0]) if getattr(z, "ndim", 0) else 1
        raise chunk_error(z, 0, max(n - 1, 0), exc, what=what) from exc



def _rows_of(key: Any, n: int) -> tuple[int, int]:
    """The first and last row a ``__getitem__`` key of an array of ``n`` rows reads (all rows if unknown)."""
    first = key[0] if isinstance(key, tuple) and key else key
    if isinstance(first, slice):
        start, stop, _ = first.indices(n)
        return start, max(start, stop - 1)
    if isinstance(first, (int, np.integer)):
        return int(first) % max(n, 1), int(first) % max(n, 1)
    return 0, max(n - 1, 0)


class _DirectChunks:
    """Whole-chunk reads of an uncompressed local Zarr v3 array straight from its chunk files (the stores
    ``write_array`` writes for floating-point data: ``bytes`` + ``crc32c``, or ``bytes`` alone).

    zarr decodes a chunk into a buffer of its own and copies it into the array it returns, through its event-loop
    thread; for these stores a chunk file *is* the array's bytes (plus a 4-byte CRC-32C), so one ``readinto`` into
    the returned array and the checksum are all a read needs (half the CPU time of zarr's read, measured on
    500,000 x 8 float32 chunks). Only reads of exactly one whole row chunk with every column take this path, and
    only when the file has the chunk's exact size and its checksum matches; anything else (a missing chunk file,
    i.e. the fill value; a damaged or empty one; other codecs, remote stores, partial selections) returns None and
    is read by zarr, which raises its usual errors (turned into :class:`~dclust.errors.CorruptStoreError`).
    """

    def __init__(self, z: Any, root: str) -> None:
        self.root, self.path = root, str(z.path or "")
        self.shape, self.chunks = tuple(int(n) for n in z.shape), tuple(int(c) for c in z.chunks)
        self.dtype = np.dtype(z.dtype)
        self.checksum = len(z.metadata.codecs) == 2
        self.nbytes = int(np.prod(self.chunks)) * self.dtype.itemsize
        self.encode = z.metadata.encode_chunk_key

    @classmethod
    def of(cls, z: Any) -> "_DirectChunks | None":
        """The direct reader of ``z``, or None when its chunks are not plain bytes in local files."""
        import sys

        try:
            from zarr.codecs import BytesCodec, Crc32cCodec
            from zarr.storage import LocalStore

            meta = z.metadata
            codecs = tuple(meta.codecs)
            plain = (
                meta.zarr_format == 3 and isinstance(z.store, LocalStore) and sys.byteorder == "little"
                and z.ndim >= 1 and type(meta.chunk_grid).__name__ == "RegularChunkGrid"
                and not tuple(getattr(meta, "storage_transformers", ()) or ())
                and np.dtype(z.dtype).kind in "biuf" and 1 <= len(codecs) <= 2
                and type(codecs[0]) is BytesCodec
                and (np.dtype(z.dtype).itemsize == 1 or getattr(codecs[0].endian, "value", None) == "little")
                and (len(codecs) == 1 or type(codecs[1]) is Crc32cCodec)
                and tuple(z.chunks[1:]) == tuple(z.shape[1:])
            )
            return cls(z, os.fspath(z.store.root)) if plain else None
        except Exception:  # noqa: BLE001 - any other zarr version or array type: zarr reads it
            return None

    def read(self, key: Any) -> np.ndarray | None:
        """Rows of one whole chunk (``key`` a tuple of slices covering every column), or None."""
        rows = self.chunks[0]
        if not isinstance(key, tuple) or len(key) != len(self.shape) or not all(isinstance(k, slice) for k in key):
            return None
        start, stop, step = key[0].indices(self.shape[0])
        if step != 1 or stop <= start or start % rows or stop != min(start + rows, self.shape[0]):
            return None
        if any(k.indices(n) != (0, n, 1) for k, n in zip(key[1:], self.shape[1:])):
            return None
        index = (start // rows,) + (0,) * (len(self.shape) - 1)
        buf = np.empty(self.nbytes + 4 * self.checksum + 1, dtype=np.uint8)  # one spare byte: a longer file
        try:
            with open(os.path.join(self.root, *self.path.split("/"), *self.encode(index).split("/")), "rb",
                      buffering=0) as f:
                view, got = memoryview(buf), 0
                while got < len(buf):
                    n = f.readinto(view[got:])
                    if not n:
                        break
                    got += n
        except OSError:  # no chunk file (the fill value) or no access: zarr decides
            return None
        if got != len(buf) - 1:
            return None
        if self.checksum:
            from crc32c import crc32c  # the checksum zarr writes; 3 x google_crc32c's speed, without the GIL

            stored = int.from_bytes(buf[self.nbytes:self.nbytes + 4].tobytes(), "little")
            if int(crc32c(buf[: self.nbytes])) != stored:
                return None
        return buf[: self.nbytes].view(self.dtype).reshape(self.chunks)[: stop - start]


_UNSET = object()


class CheckedArray:
    """A zarr array whose reads raise :class:`~dclust.errors.CorruptStoreError` (store, chunk, rows) instead of
    zarr's checksum or reshape errors: the source of the dask arrays :func:`dask_from_zarr` builds, so that every
    Dask read of a store opened by dclust (a pass, a persist, a metric, ``compute()``) names a damaged chunk. One
    attribute lookup and a ``try`` per chunk read; everything else is the zarr array's. Whole chunks of
    uncompressed local stores are read straight from their files (:class:`_DirectChunks`)."""

    _direct: Any = _UNSET  # the direct reader, found at the first read in each process

    def __init__(self, z: Any) -> None:
        self._z = z

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_z", "_direct"):  # (pickling looks up dunders before __init__ ran)
            raise AttributeError(name)
        return getattr(self._z, name)

    def __getstate__(self) -> dict:
        return {"_z": self._z}  # the direct reader is found again where the array is read

    def __setstate__(self, state: dict) -> None:
        self._z = state["_z"]

    def __getitem__(self, key: Any) -> Any:
        direct = self._direct
        if direct is _UNSET:
            direct = self._direct = _DirectChunks.of(self._z)
        if direct is not None:
            out = direct.read(key)
            if out is not None:
                return out
        try:
            return self._z[key]
        except OSError:  # the storage itself (network, permissions): not a damaged chunk
            raise
        except Exception as exc:  # noqa: BLE001 - checksum, decompression and reshape failures
            first, last = _rows_of(key, int(self._z.shape[0]) if self._z.ndim else 1)
            raise chunk_error(self._z, first, last, exc) from exc

    def __len__(self) -> int:
        return len(self._z)


def dask_from_zarr(z: Any, chunks: Any = None) -> Any:
    """``dask.array.from_zarr(z, chunks)`` (the same graph name and layout) reading through :class:`CheckedArray`."""
    import dask.array as da
    from dask.base import tokenize

    chunks = chunks if chunks is not None else z.chunks
    name = "from-zarr-" + tokenize(z, None, None, chunks)
    return da.from_array(CheckedArray(z), chunks, name=name, inline_array=False, asarray=True)
