"""``dclust.io.check_outputs`` (all outputs of a job checked before any work) and ``dclust.io.BatchLabelsWriter``
(labels written batch by batch, resumable, renamed into place at the end), on real Zarr stores in ``tmp_path``."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr

import dclust
from dclust.errors import InvalidParameterError, StorageError
from dclust.io import BatchLabelsWriter, check_outputs


@pytest.fixture
def store(tmp_path):
    return dclust.write_array(np.zeros((6, 2)), str(tmp_path / "X.zarr"))


def test_check_outputs_refuses_shared_paths_and_existing_stores(store, tmp_path):
    check_outputs({"--labels": tmp_path / "y.zarr", "--model": tmp_path / "m.zarr"}, [store])
    with pytest.raises(InvalidParameterError, match="--labels .* same store as input"):
        check_outputs({"--labels": store}, [store])
    with pytest.raises(InvalidParameterError, match="--model .* same store as --labels"):
        check_outputs({"--labels": tmp_path / "y.zarr", "--model": tmp_path / "y.zarr"})
    with pytest.raises(StorageError, match="already exists"):
        check_outputs({"--labels": store})
    check_outputs({"--labels": store}, overwrite=True)  # an existing Zarr store may be replaced
    (tmp_path / "notes.txt").write_text("keep")
    with pytest.raises(StorageError, match="not a Zarr store"):
        check_outputs({"--labels": tmp_path / "notes.txt"}, overwrite=True)
    with pytest.raises(StorageError, match="regular file"):
        check_outputs({"--labels": tmp_path / "notes.txt" / "y.zarr"})
    with pytest.raises(StorageError, match="regular file"):
        check_outputs({}, rewritten={"--checkpoint": tmp_path / "notes.txt" / "ck"})
    assert sorted(os.listdir(tmp_path)) == ["X.zarr", "notes.txt"]  # nothing written by a check


def test_batch_labels_writer_resumes_and_commits(tmp_path):
    path = str(tmp_path / "ids.zarr")
    w = BatchLabelsWriter(path, n_samples=5, batch_rows=2)
    w.write(0, [3, 3])
    assert not os.path.exists(path) and os.path.isdir(w.partial)  # durable, not yet in place
    again = BatchLabelsWriter(path, n_samples=5, batch_rows=2, resume=True)  # the interrupted run's store
    again.write(2, [4, 3])
    again.write(4, [5])
    assert again.commit() == path and not os.path.exists(again.partial)
    assert zarr.open_array(path, mode="r")[:].tolist() == [3, 3, 4, 3, 5]
    with pytest.raises(StorageError, match="already exists"):  # a second run without overwrite
        w2 = BatchLabelsWriter(path, n_samples=5, batch_rows=2)
        w2.write(0, [0, 0])
        w2.commit()
    w2.commit(overwrite=True)
    assert zarr.open_array(path, mode="r")[:2].tolist() == [0, 0]


def test_batch_labels_writer_refuses_another_run_and_remote_paths(tmp_path):
    path = str(tmp_path / "ids.zarr")
    with pytest.raises(StorageError, match="partial labels"):
        BatchLabelsWriter(path, n_samples=5, batch_rows=2, resume=True)  # nothing to resume
    w = BatchLabelsWriter(path, n_samples=5, batch_rows=2)
    with pytest.raises(StorageError, match="batches of 3"):
        BatchLabelsWriter(path, n_samples=5, batch_rows=3, resume=True)  # other batches
    w.discard()
    assert os.listdir(tmp_path) == []
    with pytest.raises(InvalidParameterError, match="local path"):
        BatchLabelsWriter("s3://bucket/ids.zarr", n_samples=5, batch_rows=2)
