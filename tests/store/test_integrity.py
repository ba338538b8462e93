"""Every Zarr store dclust writes carries a CRC-32C checksum per chunk: a damaged (changed bytes) or empty (0-byte)
chunk of data, labels, models, checkpoints and constraint graphs raises CorruptStoreError naming the store, the
chunk and its rows -- in Python and as one line in the CLI. Stores without a checksum still report empty chunks."""

from __future__ import annotations

import os

import dask.array as da
import numpy as np
import pytest
import zarr
from typer.testing import CliRunner

import dclust
from dclust.errors import CorruptStoreError, DclustError, InvalidDataError, StorageError


def _points(n: int = 400) -> np.ndarray:
    rng = np.random.default_rng(0)
    return (rng.normal(size=(n, 4)) + 10 * (np.arange(n) % 3)[:, None]).astype(np.float32)


def _damage(chunk: str) -> None:
    """Overwrite 8 bytes inside the chunk file (as a bit rot or a bad copy would)."""
    data = bytearray(open(chunk, "rb").read())
    assert len(data) > 12, chunk
    middle = len(data) // 2 - 4
    data[middle:middle + 8] = bytes(255 - b for b in data[middle:middle + 8])
    open(chunk, "wb").write(bytes(data))


def _empty(chunk: str) -> None:
    open(chunk, "wb").close()


BREAK = {"damaged": (_damage, "checksum mismatch"), "empty": (_empty, "empty")}


def _codecs(path: str, name: str | None = None) -> list[str]:
    z = zarr.open_array(path, path=name, mode="r") if name else zarr.open_array(path, mode="r")
    return [type(c).__name__ for c in z.compressors]


@pytest.mark.parametrize("kind", sorted(BREAK))
def test_data_store(tmp_path, kind):
    p = dclust.write_array(_points(), tmp_path / "p.zarr", chunks=100)
    assert _codecs(p)[-1] == "Crc32cCodec"
    breaker, said = BREAK[kind]
    breaker(os.path.join(p, "c", "3", "0"))
    with pytest.raises(CorruptStoreError, match=said) as info:
        dclust.KMeans(n_clusters=3, random_state=0, max_iter=5).fit(dclust.open_array(p))
    text = str(info.value)
    assert p in text and "chunk c/3/0" in text and "rows 300..399" in text and "expected" in text
    with pytest.raises(CorruptStoreError, match="chunk c/3/0 \\(rows 300..399"):  # a pass on the local scheduler
        dclust.KMeans(n_clusters=3, random_state=0, max_iter=5, persist=False).fit(dclust.open_array(p))
    assert isinstance(info.value, StorageError) and isinstance(info.value, InvalidDataError)


@pytest.mark.parametrize("kind", sorted(BREAK))
def test_labels_store(tmp_path, kind):
    from dclust._store import read_all
    from dclust.metrics import adjusted_rand_score

    truth = np.arange(400, dtype=np.int32) % 3
    p = dclust.write_labels(da.from_array(truth, chunks=100), tmp_path / "l.zarr")
    assert _codecs(p) == ["BloscCodec", "Crc32cCodec"]
    BREAK[kind][0](os.path.join(p, "c", "2"))
    with pytest.raises(CorruptStoreError, match="l.zarr.*chunk c/2 \\(rows 200..299\\)"):
        read_all(zarr.open_array(p, mode="r"))
    for pair in ((dclust.open_array(p), da.from_array(truth, chunks=100)),
                 (da.from_array(truth, chunks=100), dclust.open_array(p))):  # any Dask read of an opened store
        with pytest.raises(CorruptStoreError, match="l.zarr.*chunk c/2 \\(rows 200..299\\)"):
            adjusted_rand_score(*pair)
    with pytest.raises(CorruptStoreError, match="chunk c/2 \\(rows 200..299\\)"):
        dclust.open_array(p).compute()


@pytest.mark.parametrize("kind", sorted(BREAK))
def test_model_store(tmp_path, kind):
    km = dclust.KMeans(n_clusters=3, random_state=0).fit(_points())
    p = dclust.save(km, tmp_path / "km.zarr")
    assert _codecs(p, "attributes/cluster_centers_")[-1] == "Crc32cCodec"
    BREAK[kind][0](os.path.join(p, "attributes", "cluster_centers_", "c", "0", "0"))
    with pytest.raises(CorruptStoreError, match=BREAK[kind][1]) as info:
        dclust.load(p)
    assert "attributes/cluster_centers_" in str(info.value) and "chunk c/0/0 (rows 0..2)" in str(info.value)


@pytest.mark.parametrize("kind", sorted(BREAK))
def test_checkpoint_store(tmp_path, kind):
    X = _points()
    ck = tmp_path / "ck"
    # a finished fit: the checkpoint holds the model
    km = dclust.KMeans(n_clusters=3, random_state=0, checkpoint=ck).fit(X)
    BREAK[kind][0](os.path.join(ck, "attributes", "cluster_centers_", "c", "0", "0"))
    with pytest.raises(CorruptStoreError, match="cluster_centers_.*chunk c/0/0"):
        dclust.KMeans(n_clusters=3, random_state=0, checkpoint=ck).fit(X)
    # a large loop state is a Zarr array of the checkpoint
    from dclust._store import Checkpointer

    big = tmp_path / "big"
    Checkpointer(big, km).save({"phase": "iter", "scores": np.arange(10_000, dtype=np.float64)})
    assert Checkpointer(big, km).resume()["scores"][-1] == 9999
    chunk = os.path.join(big, "checkpoint", "state", "a0", "c", "0")
    assert _codecs(os.fspath(big), "checkpoint/state/a0")[-1] == "Crc32cCodec"
    BREAK[kind][0](chunk)
    with pytest.raises(CorruptStoreError, match="checkpoint/state/a0.*chunk c/0 \\(rows 0..9999\\)"):
        Checkpointer(big, km).resume()


@pytest.mark.parametrize("kind", sorted(BREAK))
def test_constraint_graph_store(tmp_path, kind):
    G = dclust.ConstraintGraph.from_pairs([0, 1, 5], [2, 3, 9], [True, False, True], n_samples=10, chunks=5)
    p = G.to_zarr(tmp_path / "g.zarr")
    BREAK[kind][0](os.path.join(p, "j", "c", "0"))
    with pytest.raises(CorruptStoreError, match="g.zarr, j.*chunk c/0 \\(rows 0..2\\)"):
        dclust.ConstraintGraph.from_zarr(p)


def test_foreign_store_without_checksum_reads_as_before_and_reports_empty_chunks(tmp_path):
    p = str(tmp_path / "foreign.zarr")
    z = zarr.create_array(store=p, shape=(400, 4), chunks=(100, 4), dtype="f4", compressors=None, zarr_format=3)
    z[...] = _points()
    km = dclust.KMeans(n_clusters=3, random_state=0, max_iter=5).fit(dclust.open_array(p))
    assert km.cluster_centers_.shape == (3, 4)
    _empty(os.path.join(p, "c", "1", "0"))
    with pytest.raises(CorruptStoreError, match="empty \\(0-byte\\) chunk file in chunk c/1/0 \\(rows 100..199"):
        dclust.KMeans(n_clusters=3, random_state=0, max_iter=5).fit(dclust.open_array(p))


def test_old_stores_without_checksum_still_load(tmp_path):
    """A model saved before the checksum (plain arrays, no crc32c) loads as before."""
    km = dclust.KMeans(n_clusters=3, random_state=0).fit(_points())
    p = dclust.save(km, tmp_path / "km.zarr")
    name = "attributes/cluster_centers_"
    old = zarr.open_array(p, path=name, mode="r")[...]
    zarr.create_array(store=p, name=name, data=old, compressors=None, zarr_format=3, overwrite=True)
    assert _codecs(p, name) == []
    np.testing.assert_array_equal(dclust.load(p).cluster_centers_, km.cluster_centers_)


def test_cli_prints_one_line(tmp_path):
    from dclust._cli.main import app

    p = dclust.write_array(_points(), tmp_path / "p.zarr", chunks=100)
    _damage(os.path.join(p, "c", "3", "0"))
    r = CliRunner().invoke(app, ["fit", "kmeans", p, "--k", "3", "--labels", str(tmp_path / "l.zarr"),
                                 "--model", str(tmp_path / "m.zarr"), "--quiet"])
    assert r.exit_code == 1, r.output
    lines = [line for line in r.output.splitlines() if line.startswith("dclust: error:")]
    assert len(lines) == 1 and "chunk c/3/0 (rows 300..399" in lines[0] and "Traceback" not in r.output
    assert not (tmp_path / "m.zarr").exists() and not (tmp_path / "l.zarr").exists()
    assert issubclass(CorruptStoreError, DclustError)
