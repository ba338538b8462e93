"""Whole chunks of the uncompressed local stores dclust writes are read straight from their chunk files
(``_DirectChunks``): the same arrays as zarr's read, and every other case (other codecs, partial selections,
missing or damaged chunk files) left to zarr."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import zarr

import dclust
from dclust._store._zarr import CheckedArray, _DirectChunks
from dclust.errors import CorruptStoreError


def _data(dtype, n=450, d=3) -> np.ndarray:
    rng = np.random.default_rng(1)
    return (rng.normal(size=(n, d)) * 100).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8])
def test_whole_chunks_equal_zarr(tmp_path, dtype):
    X = _data(dtype)
    p = dclust.write_array(X, tmp_path / "x.zarr", codec="none", chunks=100)
    z = zarr.open_array(p, mode="r")
    direct = _DirectChunks.of(z)
    assert direct is not None and direct.checksum
    for start in range(0, 450, 100):  # the last chunk (rows 400..449) is short
        key = (slice(start, min(start + 100, 450)), slice(0, 3))
        got = direct.read(key)
        assert got is not None and got.dtype == X.dtype and got.flags.c_contiguous
        np.testing.assert_array_equal(got, X[start:start + 100])
        np.testing.assert_array_equal(CheckedArray(z)[key], X[start:start + 100])
    np.testing.assert_array_equal(dclust.open_array(p).compute(), X)


def test_other_reads_go_to_zarr(tmp_path):
    X = _data(np.float32)
    p = dclust.write_array(X, tmp_path / "x.zarr", codec="none", chunks=100)
    z = zarr.open_array(p, mode="r")
    direct = _DirectChunks.of(z)
    for key in [(slice(0, 50), slice(0, 3)), (slice(50, 150), slice(0, 3)), (slice(0, 100), slice(0, 2)),
                (slice(0, 200), slice(0, 3)), (slice(0, 100, 2), slice(0, 3)), 5, (np.arange(3), slice(0, 3))]:
        assert direct.read(key) is None, key
        np.testing.assert_array_equal(CheckedArray(z)[key], X[key])
    compressed = dclust.write_array(X, tmp_path / "lz4.zarr", codec="lz4", chunks=100)
    assert _DirectChunks.of(zarr.open_array(compressed, mode="r")) is None
    plain = zarr.create_array(store=str(tmp_path / "plain.zarr"), shape=X.shape, chunks=(100, 3), dtype=X.dtype,
                              compressors=None)  # no checksum (written by others)
    plain[...] = X
    direct = _DirectChunks.of(plain)
    assert direct is not None and not direct.checksum
    np.testing.assert_array_equal(direct.read((slice(100, 200), slice(0, 3))), X[100:200])


def test_missing_chunk_is_the_fill_value(tmp_path):
    z = zarr.create_array(store=str(tmp_path / "m.zarr"), shape=(300, 2), chunks=(100, 2), dtype="float32",
                          compressors=None, fill_value=7.0)
    z[200:300] = 1.0  # chunks 0 and 1 are never written
    assert not os.path.exists(tmp_path / "m.zarr" / "c" / "0" / "0")
    got = CheckedArray(z)[(slice(0, 100), slice(0, 2))]
    np.testing.assert_array_equal(got, np.full((100, 2), 7.0, np.float32))
    np.testing.assert_array_equal(CheckedArray(z)[(slice(200, 300), slice(0, 2))], np.ones((100, 2), np.float32))


@pytest.mark.parametrize("change", ["flip", "append", "truncate"])
def test_changed_chunk_file_raises(tmp_path, change):
    p = dclust.write_array(_data(np.float32), tmp_path / "x.zarr", codec="none", chunks=100)
    chunk = os.path.join(p, "c", "1", "0")
    data = bytearray(open(chunk, "rb").read())
    if change == "flip":
        data[10] ^= 0xFF
    elif change == "append":
        data += b"\0\0\0\0"
    else:
        data = data[:-8]
    open(chunk, "wb").write(bytes(data))
    z = zarr.open_array(p, mode="r")
    assert _DirectChunks.of(z).read((slice(100, 200), slice(0, 3))) is None
    with pytest.raises(CorruptStoreError, match="chunk c/1/0"):
        CheckedArray(z)[(slice(100, 200), slice(0, 3))]


def test_pickled_array_finds_its_reader_again(tmp_path):
    X = _data(np.float32)
    p = dclust.write_array(X, tmp_path / "x.zarr", codec="none", chunks=100)
    a = CheckedArray(zarr.open_array(p, mode="r"))
    a[(slice(0, 100), slice(0, 3))]
    b = pickle.loads(pickle.dumps(a))
    assert "_direct" not in b.__dict__
    np.testing.assert_array_equal(b[(slice(300, 400), slice(0, 3))], X[300:400])
    assert isinstance(b.__dict__["_direct"], _DirectChunks)


@pytest.mark.parametrize("n", [0, 1, 7, 64, 4097, 1 << 20])
def test_direct_checksum_is_zarrs(n):
    """The direct read checks chunks with the ``crc32c`` package; zarr writes them with ``google_crc32c``: the two
    must agree on every length (hardware paths differ for short tails and long buffers)."""
    import google_crc32c
    from crc32c import crc32c

    buf = np.random.default_rng(n).integers(0, 256, size=n, dtype=np.uint8)
    assert int(crc32c(buf)) == int(google_crc32c.value(buf.tobytes()))
