"""Security of dclust's file formats and outputs.

- No pickle anywhere: the source never imports an unpickler, and ``np.load`` always has ``allow_pickle=False``.
- ``load`` validates a model store's schema: unknown versions, missing arrays, mismatched shapes, wrong dtypes,
  unknown estimators, bad names, invalid parameters and unsafe codecs are refused with a clear dclust error.
- Output paths are never followed outside the requested location (symlinks at or inside an output, ``..``).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr

import dclust
from dclust.errors import FormatVersionError, InvalidParameterError, StorageError

SRC = Path(dclust.__file__).resolve().parent
UNPICKLERS = {"pickle", "cPickle", "_pickle", "cloudpickle", "dill", "joblib", "marshal", "shelve", "jsonpickle"}


def _sources():
    return sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_unpickler_is_imported_anywhere():
    offenders = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [(node.module or "").split(".")[0]]
            else:
                continue
            offenders += [f"{path.relative_to(SRC)}:{node.lineno} {n}" for n in names if n in UNPICKLERS]
    assert offenders == []
    assert len(_sources()) > 30  # the scan really covered the package


def test_every_numpy_load_refuses_pickles():
    calls = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in ("np", "numpy"):
                kw = {k.arg: k.value for k in node.keywords}
                ok = isinstance(kw.get("allow_pickle"), ast.Constant) and kw["allow_pickle"].value is False
                calls.append((f"{path.relative_to(SRC)}:{node.lineno}", ok))
    assert all(ok for _, ok in calls), calls


# ----------------------------------------------------------------------------------------------- load schema


@pytest.fixture
def model(tmp_path):
    X = np.random.default_rng(0).normal(size=(200, 3))
    km = dclust.KMeans(n_clusters=3, random_state=0, max_iter=5).fit(X)
    path = tmp_path / "km.zarr"
    dclust.save(km, path)
    return km, path


def _attrs(path: Path) -> dict:
    return json.loads((path / "zarr.json").read_text())


def _set_attrs(path: Path, fn) -> None:
    doc = _attrs(path)
    fn(doc["attributes"])
    (path / "zarr.json").write_text(json.dumps(doc))


def _replace_array(path: Path, name: str, value: np.ndarray) -> None:
    shutil.rmtree(path / name)
    zarr.open_group(str(path), mode="a").create_array(name=name, data=value, compressors=None)


def test_round_trip_still_loads(model):
    km, path = model
    np.testing.assert_array_equal(dclust.load(path).cluster_centers_, km.cluster_centers_)
    entry = _attrs(path)["attributes"]["attributes"]["cluster_centers_"]
    assert entry["shape"] == [3, 3] and entry["dtype"] == "<f8"


def test_unknown_format_version_is_refused(model):
    _, path = model
    _set_attrs(path, lambda a: a.update(dclust_format=99))
    with pytest.raises(FormatVersionError, match="format 99"):
        dclust.load(path)


def test_unknown_estimator_is_refused(model):
    _, path = model
    _set_attrs(path, lambda a: a.update(estimator="os.system"))
    with pytest.raises(StorageError, match="a known estimator"):
        dclust.load(path)


def test_missing_array_is_refused(model):
    _, path = model
    shutil.rmtree(path / "attributes" / "cluster_centers_")
    with pytest.raises(StorageError, match="attributes/cluster_centers_"):
        dclust.load(path)


def test_mismatched_shape_is_refused(model):
    _, path = model
    _replace_array(path, "attributes/cluster_centers_", np.zeros((3, 5)))
    with pytest.raises(StorageError, match=r"shape \(3, 3\)"):
        dclust.load(path)


def test_mismatched_shapes_without_recorded_shapes_are_refused(model):
    """Stores written before shapes were recorded: the attributes must still agree with each other."""
    _, path = model
    _replace_array(path, "attributes/cluster_centers_", np.zeros((3, 5)))
    _set_attrs(path, lambda a: a["attributes"]["cluster_centers_"].pop("shape"))
    with pytest.raises(StorageError, match="mismatched shapes"):
        dclust.load(path)


def test_wrong_dtype_is_refused(model):
    _, path = model
    _replace_array(path, "attributes/cluster_centers_", np.zeros((3, 3), dtype=np.int64))
    with pytest.raises(StorageError, match="dtype"):
        dclust.load(path)


def test_unsafe_names_and_invalid_parameters_are_refused(model):
    _, path = model
    good = _attrs(path)

    def bad_name(a):
        a["attributes"]["../../escape_"] = a["attributes"].pop("cluster_centers_")

    _set_attrs(path, bad_name)
    with pytest.raises(StorageError, match="names"):
        dclust.load(path)
    (path / "zarr.json").write_text(json.dumps(good))
    _set_attrs(path, lambda a: a["params"].update(n_clusters=-3))
    with pytest.raises(StorageError, match="valid KMeans parameters"):
        dclust.load(path)


def test_an_array_with_a_pickle_codec_is_never_decoded(model):
    _, path = model
    arr = path / "attributes" / "cluster_centers_"
    shutil.rmtree(arr)
    arr.mkdir()
    (arr / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": [3, 3], "chunks": [3, 3], "dtype": "|O", "fill_value": None, "order": "C",
        "filters": [{"id": "pickle", "protocol": 5}], "compressor": None}))
    (arr / "0.0").write_bytes(b"cos\nsystem\n(S'exit 1'\ntR.")  # a pickle that would run a shell command
    with pytest.raises(StorageError, match="cluster_centers_"):
        dclust.load(path)


# ------------------------------------------------------------------------------------ outputs and symlinks


@pytest.fixture
def outside(tmp_path):
    """A directory outside the output location, with a Zarr store in it that must never change."""
    d = tmp_path / "outside"
    d.mkdir()
    dclust.write_array(np.arange(6.0).reshape(3, 2), d / "victim.zarr")
    return d


def _snapshot(d: Path) -> dict:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_a_symlink_at_the_output_path_is_refused(tmp_path, outside):
    before = _snapshot(outside)
    out = tmp_path / "out"
    out.mkdir()
    (out / "x.zarr").symlink_to(outside / "victim.zarr")
    (out / "dangling.zarr").symlink_to(outside / "not-yet.zarr")
    for overwrite in (False, True):
        with pytest.raises(StorageError, match="symbolic link"):
            dclust.write_array(np.zeros((4, 2)), out / "x.zarr", overwrite=overwrite)
    with pytest.raises(StorageError, match="symbolic link"):
        dclust.write_labels(np.zeros(4, dtype=np.int32), out / "dangling.zarr", overwrite=True)
    km = dclust.KMeans(n_clusters=2, random_state=0).fit(np.random.default_rng(0).normal(size=(50, 2)))
    with pytest.raises(StorageError, match="symbolic link"):
        dclust.save(km, out / "x.zarr", overwrite=True)
    G = dclust.ConstraintGraph.from_pairs(np.array([0]), np.array([1]), np.array([True]), n_samples=4, chunks=(4,))
    with pytest.raises(StorageError, match="symbolic link"):
        G.to_zarr(out / "dangling.zarr", overwrite=True)
    assert _snapshot(outside) == before
    assert not (outside / "not-yet.zarr").exists()
    assert sorted(os.listdir(out)) == ["dangling.zarr", "x.zarr"]  # no temporaries left either


def test_links_inside_an_existing_group_are_never_followed(tmp_path, outside):
    group = tmp_path / "g.zarr"
    dclust.write_array(np.zeros((4, 2)), group, component="a")
    zarr.open_group(str(outside), mode="a")  # make `outside` a group, as a link target would be
    before = _snapshot(outside)
    (group / "run").symlink_to(outside)  # an intermediate "group" that is a link
    with pytest.raises(StorageError, match="symbolic link"):
        dclust.write_array(np.ones((4, 2)), group, component="run/b")
    (group / "b").symlink_to(outside / "victim.zarr")  # the member itself
    with pytest.raises(StorageError, match="symbolic link"):
        dclust.write_array(np.ones((4, 2)), group, component="b", overwrite=True)
    (group / "run").unlink()
    (group / "b").unlink()
    (group / "zarr.json").rename(tmp_path / "real-zarr.json")  # the group's metadata document
    (group / "zarr.json").symlink_to(tmp_path / "real-zarr.json")
    with pytest.raises(StorageError, match="symbolic link"):
        dclust.write_array(np.ones((4, 2)), group, component="c")
    assert _snapshot(outside) == before


def test_replacing_a_store_with_links_inside_never_touches_their_targets(tmp_path, outside):
    before = _snapshot(outside)
    store = tmp_path / "x.zarr"
    dclust.write_array(np.zeros((4, 2)), store)
    (store / "c").symlink_to(outside / "victim.zarr" / "c")  # a chunk directory that is a link
    (store / "extra").symlink_to(outside)
    dclust.write_array(np.ones((4, 2)), store, overwrite=True)
    np.testing.assert_array_equal(dclust.open_array(store).compute(), np.ones((4, 2)))
    assert not (store / "extra").exists() and not (store / "c").is_symlink()
    assert _snapshot(outside) == before
    assert sorted(os.listdir(tmp_path)) == ["outside", "x.zarr"]


@pytest.mark.parametrize("component", ["../escape", "a/../../escape", "/abs", "a//b", "."])
def test_array_names_cannot_climb_out(tmp_path, component):
    with pytest.raises(InvalidParameterError, match="component"):
        dclust.write_array(np.zeros((4, 2)), tmp_path / "g.zarr", component=component)
    assert os.listdir(tmp_path) == []


def test_the_cli_refuses_a_symlinked_output_before_any_work(tmp_path, outside):
    from typer.testing import CliRunner

    from dclust._cli.main import app

    X = tmp_path / "x.zarr"
    dclust.write_array(np.random.default_rng(0).normal(size=(40, 2)), X)
    (tmp_path / "labels.zarr").symlink_to(outside / "victim.zarr")
    before = _snapshot(outside)
    r = CliRunner().invoke(app, ["fit", "kmeans", str(X), "--k", "2", "--labels", str(tmp_path / "labels.zarr"),
                                 "--model", str(tmp_path / "m.zarr"), "--overwrite", "--quiet"])
    assert r.exit_code == 1 and "symbolic link" in r.output
    assert _snapshot(outside) == before and not (tmp_path / "m.zarr").exists()
