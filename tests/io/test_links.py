"""dclust.io.read_links: the links CSV format of ``--constraints LINKS.csv`` and ``dclust constraints import``, read
from local files and fsspec URLs; bad rows are named by line (the CLI's messages come from here)."""

from __future__ import annotations

import fsspec
import numpy as np
import pytest

import dclust
from dclust.errors import InvalidDataError, InvalidParameterError, StorageError
from dclust.io import LinkPairs, read_links


def test_types_weights_blank_lines_and_a_bom(tmp_path):
    p = tmp_path / "links.csv"
    p.write_text("\ufeffJ, i ,Type,weight\n1,0,ML,0.5\n\n3,2,-1,2\n5,4,cannot-link,1e-3\n", encoding="utf-8")
    pairs = read_links(p)
    assert isinstance(pairs, LinkPairs)
    assert pairs.i.tolist() == [0, 2, 4] and pairs.j.tolist() == [1, 3, 5]
    assert pairs.must_link.tolist() == [True, False, False]
    np.testing.assert_array_equal(pairs.weight, [0.5, 2.0, 1e-3])
    assert pairs.i.dtype == np.int64 and pairs.weight.dtype == np.float64
    G = dclust.ConstraintGraph.from_pairs(pairs.i, pairs.j, pairs.must_link, n_samples=6, chunks=(3, 3),
                                          weight=pairs.weight)
    assert (G.n_must, G.n_cannot) == (1, 2)


@pytest.mark.parametrize("text, match", [
    ("", "empty file"),
    ("i,j\n0,1\n", "missing type"),
    ("i,j,type,i\n0,1,must,0\n", "each column once"),
    ("i,j,type\n0,1,must\n2,x,must\n", "line 3.*integer row index in column 'j'"),
    ("i,j,type\n0,1,maybe\n", "line 2.*'maybe'"),
    ("i,j,type\n0,1\n", "line 2.*3 fields"),
    ("i,j,type,weight\n0,1,must,0\n", "finite weight > 0"),
    ("i,j,type,weight\n0,1,must,heavy\n", "a number in column 'weight'"),
])
def test_bad_files_name_the_line(tmp_path, text, match):
    p = tmp_path / "links.csv"
    p.write_text(text)
    with pytest.raises(InvalidDataError, match=match):
        read_links(p)


def test_urls_and_storage_options(tmp_path):
    fs = fsspec.filesystem("memory")
    fs.pipe_file("/dclust-links/l.csv", b"i,j,type\n0,1,must\n")
    try:
        assert read_links("memory://dclust-links/l.csv").must_link.tolist() == [True]
        with pytest.raises(StorageError, match="does not exist"):
            read_links("memory://dclust-links/none.csv")
    finally:
        fs.rm("/dclust-links", recursive=True)
    (tmp_path / "l.csv").write_text("i,j,type\n0,1,must\n")
    with pytest.raises(InvalidParameterError, match="local path"):
        read_links(tmp_path / "l.csv", storage_options={"anon": True})
