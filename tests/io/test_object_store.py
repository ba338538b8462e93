"""Every writer on a real S3 server (moto's server mode on 127.0.0.1, tests/conftest.py) with ``storage_options=``
and no ``AWS_*`` environment, and the object-store commit (docs/object-storage.md) under SIGKILL: a writer process
killed before its commit point leaves nothing that opens (a first write) or the previous version (an overwrite);
killed after it, the complete new version; never a partial store. The next write or ``dclust.io.clean(URL)`` removes
what the killed writer left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import dask.array as da
import fsspec
import numpy as np
import pytest
import zarr

import dclust
from dclust.errors import InvalidParameterError, StorageError

pytestmark = pytest.mark.usefixtures("threaded")


@pytest.fixture
def bucket(s3, monkeypatch):
    """The bucket, with every ``AWS_*`` variable removed: only ``storage_options=`` can reach the server."""
    import s3fs

    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    s3fs.S3FileSystem.clear_instance_cache()
    url, options, fs = s3
    return url, options, fs


def _points(n=400, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, 3)) + rng.integers(0, 3, size=(n, 1)) * 6).astype(np.float64)


def _hidden(fs, url):
    """The objects beside the outputs: temporaries, probes and commit records (none after a clean write)."""
    fs.invalidate_cache()
    return sorted(p.rsplit("/", 1)[-1] for p in fs.find(url[5:]) if "/." in p)


# ------------------------------------------------------------------------------------------------ round trips


def test_every_writer_round_trips_with_storage_options(bucket):
    url, options, fs = bucket
    X = _points()
    assert dclust.write_array(da.from_array(X, chunks=(100, -1)), f"{url}/x.zarr", storage_options=options) \
        == f"{url}/x.zarr"
    np.testing.assert_array_equal(dclust.open_array(f"{url}/x.zarr", storage_options=options).compute(), X)
    dclust.write_array(X * 2, f"{url}/x.zarr", overwrite=True, chunks=150, storage_options=options)
    back = dclust.open_array(f"{url}/x.zarr", storage_options=options)
    assert back.chunks[0] == (150, 150, 100)
    np.testing.assert_array_equal(back.compute(), X * 2)
    # a group, then a new member and a replaced member of it
    dclust.write_array(X, f"{url}/g.zarr", component="data", storage_options=options)
    dclust.write_array(X[:, :1], f"{url}/g.zarr", component="run/one", storage_options=options)
    dclust.write_array(X[:, :2], f"{url}/g.zarr", component="data", overwrite=True, storage_options=options)
    for component, expected in (("data", X[:, :2]), ("run/one", X[:, :1])):
        got = dclust.open_array(f"{url}/g.zarr", component=component, storage_options=options).compute()
        np.testing.assert_array_equal(got, expected)
    km = dclust.KMeans(n_clusters=3, random_state=0).fit(X)
    labels = km.predict(da.from_array(X, chunks=100))
    dclust.write_labels(labels, f"{url}/labels.zarr", storage_options=options)
    np.testing.assert_array_equal(dclust.open_array(f"{url}/labels.zarr", storage_options=options).compute(),
                                  km.predict(X))
    dclust.save(km, f"{url}/model.zarr", storage_options=options)
    loaded = dclust.load(f"{url}/model.zarr", storage_options=options)
    np.testing.assert_array_equal(loaded.cluster_centers_, km.cluster_centers_)
    G = dclust.ConstraintGraph.from_pairs([0, 2, 5], [1, 3, 9], [True, False, True], n_samples=400,
                                          chunks=(100,) * 4)
    G.to_zarr(f"{url}/links.zarr", storage_options=options)
    H = dclust.ConstraintGraph.from_zarr(f"{url}/links.zarr", storage_options=options)
    assert (H.n_samples, H.chunks, H.n_must, H.n_cannot) == (400, (100,) * 4, 2, 1)
    assert _hidden(fs, url) == []  # no temporary, probe or commit record left
    with pytest.raises(StorageError, match="already exists"):
        dclust.save(km, f"{url}/model.zarr", storage_options=options)


def test_a_checkpoint_on_s3_resumes_and_is_a_model(bucket):
    """checkpoint= an fsspec mapper (it carries the storage options); a finished fit's checkpoint returns the same
    model without a pass, loads as a model, and the saved model keeps the URL, never the credentials."""
    url, options, fs = bucket
    X = _points()
    ck = fsspec.get_mapper(f"{url}/ck.zarr", **options)
    km = dclust.KMeans(n_clusters=3, random_state=0, checkpoint=ck).fit(X)
    reads = []

    def counted(block):
        if block.size:
            reads.append(1)
        return block

    again = dclust.KMeans(n_clusters=3, random_state=0, checkpoint=fsspec.get_mapper(f"{url}/ck.zarr", **options))
    again.fit(da.from_array(X, chunks=(400, -1)).map_blocks(counted, dtype=X.dtype))
    np.testing.assert_array_equal(again.cluster_centers_, km.cluster_centers_)
    assert len(reads) <= 1  # the fingerprint reads the first rows; no pass over the data
    np.testing.assert_array_equal(dclust.load(f"{url}/ck.zarr", storage_options=options).cluster_centers_,
                                  km.cluster_centers_)
    dclust.save(km, f"{url}/m.zarr", storage_options=options)
    attrs = zarr.open_group(store=f"{url}/m.zarr", mode="r", storage_options=options).attrs.asdict()
    assert attrs["params"]["checkpoint"] == f"{url}/ck.zarr"
    assert options["secret"] not in json.dumps(attrs)
    assert _hidden(fs, url) == []


def test_storage_options_are_checked(bucket, tmp_path):
    url, options, _ = bucket
    with pytest.raises(InvalidParameterError, match="storage_options"):
        dclust.write_array(np.zeros((3, 2)), f"{url}/x.zarr", storage_options="endpoint_url=x")
    with pytest.raises(InvalidParameterError, match="local path"):
        dclust.write_labels(np.zeros(3, dtype=int), tmp_path / "l.zarr", storage_options=options)
    with pytest.raises(InvalidParameterError, match="local path"):
        dclust.load(tmp_path / "m.zarr", storage_options=options)
    with pytest.raises(StorageError, match="does not exist"):
        dclust.load(f"{url}/none.zarr", storage_options=options)


# ------------------------------------------------------------------------------------------------ killed writers

WRITER = textwrap.dedent('''
    import json, os, signal, sys

    import dask
    import dask.array as da
    import numpy as np
    import s3fs

    import dclust

    what, point, url, options = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    dask.config.set(scheduler="threads", num_workers=2)


    def die():
        os.kill(os.getpid(), signal.SIGKILL)


    def dying_block(block, block_info=None):
        if point == "chunk" and block_info[None]["chunk-location"][0] == 2:  # the third of four row blocks
            die()
        return block


    real_pipe, real_cp = s3fs.S3FileSystem._pipe_file, s3fs.S3FileSystem._cp_file
    commits = []  # the commit records written so far
    nth = 3 if what == "checkpoint" else 1  # a checkpoint dies in its third save (after iteration 3)

    async def pipe_file(self, path, data, *args, **kwargs):
        if path.endswith(".commit") and point == "before-commit":
            die()
        out = await real_pipe(self, path, data, *args, **kwargs)
        if path.endswith(".commit"):
            commits.append(path)
            if point == "after-commit":
                die()
        return out

    async def cp_file(self, src, dst, *args, **kwargs):
        if point == "mid-roll" and dst.endswith("zarr.json") and len(commits) >= nth:  # chunks in, no metadata
            die()
        return await real_cp(self, src, dst, *args, **kwargs)

    s3fs.S3FileSystem._pipe_file, s3fs.S3FileSystem._cp_file = pipe_file, cp_file
    rng = np.random.default_rng(1)  # version 2 of every output
    X = rng.normal(size=(400, 3))
    if what == "array":
        x = da.from_array(X, chunks=(100, 3)).map_blocks(dying_block, dtype=X.dtype)
        dclust.write_array(x, url, overwrite=True, storage_options=options)
    elif what == "labels":
        y = da.from_array(rng.integers(0, 5, 400), chunks=100)
        dclust.write_labels(y.map_blocks(dying_block, dtype=y.dtype), url, overwrite=True, storage_options=options)
    elif what == "save":
        km = dclust.KMeans(n_clusters=4, random_state=1, max_iter=3).fit(X)
        dclust.save(km, url, overwrite=True, storage_options=options)
    elif what == "checkpoint":
        import fsspec

        dclust.KMeans(n_clusters=6, random_state=1, tol=0, init="k-means++", max_iter=6,
                      checkpoint=fsspec.get_mapper(url, **options)).fit(X)
    print("the writer was not killed")
''')


def _version(what, seed):
    """What the test (seed 0) or the writer (seed 1) writes."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(400, 3))
    if what == "array":
        return X
    if what == "labels":
        return rng.integers(0, 5, 400)
    return dclust.KMeans(n_clusters=4, random_state=seed, max_iter=3).fit(X).cluster_centers_


def _write(what, url, options):
    if what == "array":
        dclust.write_array(da.from_array(_version(what, 0), chunks=(100, 3)), url, storage_options=options)
    elif what == "labels":
        dclust.write_labels(_version(what, 0), url, storage_options=options)
    else:
        X = np.random.default_rng(0).normal(size=(400, 3))
        dclust.save(dclust.KMeans(n_clusters=4, random_state=0, max_iter=3).fit(X), url, storage_options=options)


def _read(what, url, options):
    if what == "save":
        return dclust.load(url, storage_options=options).cluster_centers_
    return np.asarray(dclust.open_array(url, storage_options=options).compute())


def _kill(tmp_path, what, point, url, options):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    r = subprocess.run([sys.executable, str(script), what, point, url, json.dumps(options)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=180, env=env)
    assert r.returncode == -signal.SIGKILL, (r.stdout, r.stderr[-3000:])


@pytest.mark.slow  # a killed writer process (make test-fast skips it)
@pytest.mark.parametrize("what, point", [("array", "chunk"), ("save", "before-commit")])
def test_a_killed_first_write_leaves_nothing_that_opens(what, point, bucket, tmp_path):
    url, options, fs = bucket
    target = f"{url}/out.zarr"
    _kill(tmp_path, what, point, target, options)
    with pytest.raises(StorageError):
        _read(what, target, options)
    fs.invalidate_cache()
    assert not fs.exists(target[5:])  # nothing under the output's name
    _write(what, target, options)  # the next write succeeds and removes the killed writer's temporaries
    np.testing.assert_array_equal(_read(what, target, options), _version(what, 0))
    assert _hidden(fs, url) == []


@pytest.mark.slow  # a killed writer process (make test-fast skips it)
@pytest.mark.parametrize("what, point", [("array", "chunk"), ("save", "before-commit")])
def test_an_overwrite_killed_before_its_commit_keeps_the_previous_version(what, point, bucket, tmp_path):
    url, options, fs = bucket
    target = f"{url}/out.zarr"
    _write(what, target, options)
    _kill(tmp_path, what, point, target, options)
    np.testing.assert_array_equal(_read(what, target, options), _version(what, 0))
    assert dclust.io.clean(target, storage_options=options)  # the killed writer's temporary prefix
    assert _hidden(fs, url) == []
    np.testing.assert_array_equal(_read(what, target, options), _version(what, 0))


@pytest.mark.slow  # a killed writer process (make test-fast skips it)
@pytest.mark.parametrize("what, point", [("array", "after-commit"), ("labels", "mid-roll"), ("save", "mid-roll")])
def test_an_overwrite_killed_after_its_commit_reads_as_the_new_version(what, point, bucket, tmp_path):
    url, options, fs = bucket
    target = f"{url}/out.zarr"
    _write(what, target, options)
    _kill(tmp_path, what, point, target, options)
    np.testing.assert_array_equal(_read(what, target, options), _version(what, 1))  # committed: whole
    if point == "mid-roll":  # a reader that ignores the commit record sees no store, never a partial one
        with pytest.raises(Exception):
            zarr.open(store=target, mode="r", storage_options=options)
    assert dclust.io.clean(target, storage_options=options)  # finishes the commit of the dead writer
    assert _hidden(fs, url) == []
    np.testing.assert_array_equal(np.asarray(zarr.open(store=target, mode="r", storage_options=options)[...])
                                  if what != "save" else _read(what, target, options), _version(what, 1))


# ------------------------------------------------------------------------------------------------ the CLI


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def test_every_cli_json_output_keeps_s3_urls(bucket, tmp_path):
    """Every command that reads and writes S3 through ``--storage-option`` (no AWS_*) reports the URLs it was given,
    never a local path made of them; the outputs are where the URLs say."""
    from distributed import LocalCluster

    from tests._support.cli import ok_json, run

    url, options, fs = bucket
    flags = [f for k, v in options.items() for f in ("--storage-option", f"{k}={v}")]
    dclust.write_array(_points(), f"{url}/in.zarr", chunks=100, storage_options=options)
    (tmp_path / "links.csv").write_text("i,j,type\n0,1,must\n2,3,cannot\n")
    fs.pipe_file(f"{url[5:]}/links.csv", b"i,j,type\n0,1,must\n2,3,cannot\n")
    outputs = []
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        common = ["--scheduler", cluster.scheduler_address, "--quiet", "--json", *flags]
        commands = [
            ["fit", "kmeans", f"{url}/in.zarr", "--k", 3, "--seed", 0, "--labels", f"{url}/l.zarr", "--model",
             f"{url}/m.zarr", "--checkpoint", f"{url}/ck.zarr", *common],
            ["fit", "dpmeans", f"{url}/in.zarr", "--lam", 40, "--seed", 0, "--labels", f"{url}/dl.zarr", "--model",
             f"{url}/dm.zarr", *common],
            ["predict", f"{url}/m.zarr", f"{url}/in.zarr", "--labels", f"{url}/p.zarr", *common],
            ["info", f"{url}/m.zarr", "--json", *flags],
            ["constraints", "import", tmp_path / "links.csv", "--chunks-like", f"{url}/in.zarr", f"{url}/g.zarr",
             "--quiet", "--json", *flags],
            ["stream", "anytime-dpmeans", f"{url}/in.zarr", "--lam", 40, "--batch-rows", 100, "--seed", 0,
             "--labels", f"{url}/s.zarr", "--model", f"{url}/sm.zarr", *common],
            ["clean", f"{url}/l.zarr", "--json", *flags],
            ["fit", "rdpmeans", f"{url}/in.zarr", "--lam", 40, "--constraints", f"{url}/links.csv", "--seed", 0,
             "--labels", f"{url}/rl.zarr", "--model", f"{url}/rm.zarr", *common],
            ["sweep", "dpmeans", f"{url}/in.zarr", "--n-lams", 3, "--sample-size", 200, "--seed", 0, *common],
        ]
        for args in commands:
            outputs.append(ok_json(run(args)))
        again = ok_json(run([*commands[0], "--overwrite"]))  # the checkpoint on S3 exists now: the fit resumes
    assert outputs[0]["resumed"] is False and again["resumed"] is True
    seen = [s for out in outputs for s in _strings(out) if "s3:" in s]
    assert seen and all(s.startswith(f"{url}/") for s in seen), seen
    assert {outputs[0]["input"], outputs[0]["labels"], outputs[0]["model"], outputs[0]["checkpoint"]} == {
        f"{url}/in.zarr", f"{url}/l.zarr", f"{url}/m.zarr", f"{url}/ck.zarr"}
    assert outputs[2]["labels"] == f"{url}/p.zarr" and outputs[3]["model"] == f"{url}/m.zarr"
    assert outputs[4]["output"] == f"{url}/g.zarr" and outputs[5]["labels"] == f"{url}/s.zarr"
    assert outputs[6]["path"] == f"{url}/l.zarr" and outputs[6]["removed"] == []
    assert (outputs[7]["constraints"], outputs[7]["model"]) == (f"{url}/links.csv", f"{url}/rm.zarr")
    assert outputs[8]["input"] == f"{url}/in.zarr" and outputs[8]["command"] == "sweep dpmeans"
    model = dclust.load(f"{url}/m.zarr", storage_options=options)
    np.testing.assert_array_equal(dclust.open_array(f"{url}/p.zarr", storage_options=options).compute(),
                                  model.predict(_points()))
    np.testing.assert_array_equal(dclust.load(f"{url}/ck.zarr", storage_options=options).cluster_centers_,
                                  model.cluster_centers_)
    assert dclust.ConstraintGraph.from_zarr(f"{url}/g.zarr", storage_options=options).n_must == 1


@pytest.mark.slow  # a killed writer process (make test-fast skips it)
def test_a_fit_killed_inside_a_checkpoint_commit_on_s3_resumes_to_the_same_model(bucket, tmp_path):
    """SIGKILL while the third checkpoint save is being copied into place: the resumed fit reads the committed
    state (iteration 3) and ends with the model of a fit that was never interrupted."""
    url, options, fs = bucket
    target = f"{url}/ck.zarr"
    X = np.random.default_rng(1).normal(size=(400, 3))
    whole = dclust.KMeans(n_clusters=6, random_state=1, tol=0, init="k-means++", max_iter=6).fit(X)
    assert whole.n_iter_ > 3
    _kill(tmp_path, "checkpoint", "mid-roll", target, options)
    with pytest.raises(Exception):  # the checkpoint's final name holds no store yet: zarr alone refuses it
        zarr.open_group(store=target, mode="r", storage_options=options)
    resumed = dclust.KMeans(n_clusters=6, random_state=1, tol=0, init="k-means++", max_iter=6,
                            checkpoint=fsspec.get_mapper(target, **options)).fit(X)
    np.testing.assert_array_equal(resumed.cluster_centers_, whole.cluster_centers_)
    assert resumed.n_iter_ == whole.n_iter_ and resumed.inertia_ == whole.inertia_
    assert _hidden(fs, url) == []  # the resumed run's first save removed the killed run's leftovers


def test_the_example_of_docs_object_storage_runs(bucket):
    """docs/object-storage.md's example, as written, with only its endpoint/credentials and bucket lines set to this
    test's server."""
    import re
    from pathlib import Path

    url, options, _ = bucket
    text = (Path(__file__).resolve().parents[2] / "docs" / "object-storage.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, flags=re.S).group(1)
    code, n = re.subn(r"^opts = .*$", f"opts = {options!r}", code, flags=re.M)
    code, m = re.subn(r"^bucket = .*$", f"bucket = {url!r}", code, flags=re.M)
    assert (n, m) == (1, 1)
    scope: dict = {}
    exec(compile(code, "docs/object-storage.md", "exec"), scope)
    np.testing.assert_array_equal(scope["km2"].cluster_centers_, scope["km"].cluster_centers_)
    assert (scope["G2"].n_must, scope["G2"].n_cannot) == (1, 1)
