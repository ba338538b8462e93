"""dclust estimators inside scikit-learn: Pipeline, GridSearchCV, clone, check_is_fitted, labels_, fit_transform,
feature names from pandas / dask / xarray, and partial_fit over a stream of arrays."""

from __future__ import annotations

import warnings

import dask.array as da
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError as SklearnNotFittedError
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.validation import check_is_fitted

import dclust
from dclust.errors import InvalidDataError, InvalidParameterError, NotFittedError

pd = pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def points(blobs):
    return blobs[0][:600]


def test_pipeline_predicts_after_scaling(points):
    pipe = make_pipeline(StandardScaler(), dclust.KMeans(n_clusters=5, random_state=0)).fit(points)
    labels = pipe.predict(points)
    assert labels.shape == (600,) and set(np.unique(labels)) <= set(range(5))
    np.testing.assert_array_equal(labels, pipe[-1].labels_)
    assert list(pipe.get_feature_names_out()) == [f"kmeans{i}" for i in range(5)]


def test_check_is_fitted_and_not_fitted_errors(points):
    km = dclust.KMeans(n_clusters=3)
    with pytest.raises(SklearnNotFittedError):
        check_is_fitted(km)
    with pytest.raises(SklearnNotFittedError) as info:  # dclust's error is scikit-learn's too
        km.predict(points)
    assert isinstance(info.value, NotFittedError) and "fit" in str(info.value)
    check_is_fitted(km.fit(points))


def test_grid_search_uses_score(points):
    search = GridSearchCV(dclust.KMeans(random_state=0), {"n_clusters": [1, 5]}, cv=2).fit(points)
    assert search.best_params_ == {"n_clusters": 5}  # the score is -SSE: 5 centres fit 5 blobs better than 1
    assert search.best_estimator_.cluster_centers_.shape == (5, 3)


def test_clone_keeps_parameters_and_drops_the_model(points):
    km = dclust.KMeans(n_clusters=4, random_state=3).fit(points)
    twin = clone(km)
    assert twin.get_params() == km.get_params() and not hasattr(twin, "cluster_centers_")


def test_dclust_parameter_errors_survive_in_a_pipeline(points):
    with pytest.raises(InvalidParameterError, match="n_clusters"):
        make_pipeline(StandardScaler(), dclust.KMeans(n_clusters=0)).fit(points)
    with pytest.raises(InvalidParameterError, match="no_such"):
        dclust.KMeans().set_params(no_such=1)


def test_labels_and_fit_transform_for_numpy_input(points):
    km = dclust.KMeans(n_clusters=5, random_state=0)
    distances = km.fit_transform(points)
    assert isinstance(km.labels_, np.ndarray)
    np.testing.assert_array_equal(km.labels_, km.predict(points))
    np.testing.assert_array_equal(distances.argmin(axis=1), km.labels_)
    np.testing.assert_array_equal(dclust.DPMeans(lam=30.0, random_state=0).fit_predict(points),
                                  dclust.DPMeans(lam=30.0, random_state=0).fit(points).predict(points))


def test_labels_of_dask_input_stay_lazy_and_are_not_saved(points, tmp_path):
    X = da.from_array(points, chunks=(150, -1))
    km = dclust.KMeans(n_clusters=5, random_state=0).fit(X)
    assert isinstance(km.labels_, da.Array) and km.labels_.chunks == (X.chunks[0],)
    np.testing.assert_array_equal(km.labels_.compute(), km.predict(points))
    dclust.save(km, tmp_path / "m.zarr")
    assert not (tmp_path / "m.zarr" / "attributes" / "labels_").exists()  # saving would be a pass over N rows
    back = dclust.load(tmp_path / "m.zarr")
    assert not hasattr(back, "labels_")
    np.testing.assert_array_equal(back.predict(points), km.predict(points))


def test_labels_of_a_fit_that_sets_them_are_kept(points):
    tv = dclust.TVClust(random_state=0, n_sweeps=3).fit(points[:200])
    assert isinstance(tv.labels_, np.ndarray) and "_transient_attributes" not in vars(tv)


# ------------------------------------------------------------------------------------------------ feature names
@pytest.fixture(scope="module")
def frame(points):
    return pd.DataFrame(points, columns=["a", "b", "c"])


def test_feature_names_are_kept_and_checked(frame):
    km = dclust.KMeans(n_clusters=5, random_state=0).fit(frame)
    assert list(km.feature_names_in_) == ["a", "b", "c"] and km.n_features_in_ == 3
    np.testing.assert_array_equal(km.predict(frame), km.labels_)
    for bad, what in ((frame[["b", "a", "c"]], "another order"), (frame[["a", "b"]], "missing 'c'"),
                      (frame.assign(d=1.0), "extra 'd'")):
        with pytest.raises(InvalidDataError, match=what) as info:
            km.predict(bad)
        text = str(info.value)
        assert "expected" in text and "received" in text and "feature_names_in_" in text, text
    with pytest.raises(InvalidDataError, match="another order"):
        km.transform(frame[["c", "b", "a"]])
    with pytest.raises(InvalidDataError, match="another order"):
        km.score(frame[["c", "b", "a"]])


def test_names_and_no_names_warn_as_scikit_learn(frame, points):
    fitted_on_frame = dclust.KMeans(n_clusters=5, random_state=0).fit(frame)
    with pytest.warns(UserWarning, match="does not have valid feature names"):
        fitted_on_frame.predict(points)
    fitted_on_array = dclust.KMeans(n_clusters=5, random_state=0).fit(points)
    assert not hasattr(fitted_on_array, "feature_names_in_")
    with pytest.warns(UserWarning, match="was fitted without feature names"):
        fitted_on_array.predict(frame)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fitted_on_frame.predict(frame)


def test_refit_on_an_array_forgets_the_names(frame, points):
    km = dclust.KMeans(n_clusters=5, random_state=0).fit(frame).fit(points)
    assert not hasattr(km, "feature_names_in_")


def test_mixed_column_name_types_are_refused(points):
    mixed = pd.DataFrame(points, columns=["a", 1, "c"])
    with pytest.raises(InvalidDataError, match="all str"):
        dclust.KMeans(n_clusters=2).fit(mixed)


def test_dask_dataframe_columns_are_feature_names(frame):
    dd = pytest.importorskip("dask.dataframe")
    ddf = dd.from_pandas(frame, npartitions=3)
    km = dclust.KMeans(n_clusters=5, random_state=0).fit(ddf)
    assert list(km.feature_names_in_) == ["a", "b", "c"]
    assert isinstance(km.labels_, da.Array)  # lazy: nothing of N rows on the driver
    lazy = km.predict(ddf)
    assert isinstance(lazy, da.Array)
    np.testing.assert_array_equal(lazy.compute(), km.predict(frame))
    with pytest.raises(InvalidDataError, match="another order"):
        km.predict(ddf[["b", "a", "c"]])


def test_xarray_feature_coordinate_is_feature_names(points):
    xr = pytest.importorskip("xarray")
    arr = xr.DataArray(points, dims=("sample", "band"), coords={"band": ["red", "green", "blue"]})
    km = dclust.KMeans(n_clusters=5, random_state=0).fit(arr)
    assert list(km.feature_names_in_) == ["red", "green", "blue"]
    with pytest.raises(InvalidDataError, match="another order"):
        km.predict(arr.isel(band=[2, 1, 0]))


def test_partial_fit_checks_names_and_features(frame):
    km = dclust.KMeans(n_clusters=2, random_state=0).partial_fit(frame[:100])
    assert list(km.feature_names_in_) == ["a", "b", "c"]
    with pytest.raises(InvalidDataError, match="another order"):
        km.partial_fit(frame[["b", "a", "c"]][100:200])
    with pytest.raises(InvalidDataError, match="X has 2 features, but KMeans is expecting 3 features"), \
            pytest.warns(UserWarning, match="does not have valid feature names"):
        km.partial_fit(frame[["a", "b"]].to_numpy())


# ------------------------------------------------------------------------------------------------ partial_fit
@pytest.fixture(scope="module")
def overlapping():
    """Five blobs of standard deviation 2.5 whose centres lie in [-10, 10]^2: neighbours overlap."""
    return np.asarray(dclust.make_blobs(6000, 2, 5, cluster_std=2.5, random_state=0).X.compute(), dtype=np.float64)


def _objective(model, X, lam=0.0):
    k = np.unique(model.predict(X)).size
    return -model.score(X) + lam * k


def test_kmeans_partial_fit_is_within_5_percent_of_fit(overlapping):
    fit = dclust.KMeans(n_clusters=5, random_state=0).fit(overlapping)
    stream = dclust.KMeans(n_clusters=5, random_state=0)
    for piece in np.array_split(overlapping, 12):
        stream.partial_fit(piece)
    assert stream.n_iter_ == 12 and len(stream.objective_history_) == 12
    assert _objective(stream, overlapping) <= 1.05 * _objective(fit, overlapping)


@pytest.mark.parametrize("cluster_std, lam", [(2.5, 250.0), (1.0, 20.0), (2.0, 20.0), (3.0, 20.0), (3.0, 60.0)])
def test_dpmeans_partial_fit_is_within_5_percent_of_fit(cluster_std, lam):
    """Overlapping blobs fed in a dozen random pieces; small lam (many clusters) is the hard case: before the
    stream kept finer summaries than the model, partial_fit reached 1.2-1.7 x fit's objective there."""
    X = np.asarray(dclust.make_blobs(6000, 2, 5, cluster_std=cluster_std, random_state=0).X.compute(), np.float64)
    fit = dclust.DPMeans(lam=lam, random_state=0).fit(X)
    stream = dclust.DPMeans(lam=lam, random_state=0)
    for piece in np.array_split(np.random.default_rng(0).permutation(len(X)), 12):
        stream.partial_fit(X[piece])
    assert stream.lam_ == lam and len(stream.objective_history_) == 12
    assert _objective(stream, X, lam) <= 1.05 * _objective(fit, X, lam)


def test_partial_fit_takes_dask_batches_and_refits_start_afresh(overlapping):
    X = da.from_array(overlapping, chunks=(500, -1))
    km = dclust.KMeans(n_clusters=5, random_state=0)
    for b in range(X.numblocks[0]):
        km.partial_fit(X.blocks[b])
    assert isinstance(km.labels_, da.Array) and km.labels_.shape == (500,)  # the last batch's, lazy
    centers = km.cluster_centers_.copy()
    km.fit(overlapping[:600])
    assert km.labels_.shape == (600,)
    km.partial_fit(overlapping[:600])  # the model of fit is not a stream: a new one starts from this batch
    assert km.n_iter_ == 1 and not np.allclose(km.cluster_centers_, centers)


def test_dpmeans_partial_fit_with_the_n_clusters_heuristic(overlapping):
    dp = dclust.DPMeans(n_clusters=5, random_state=0)
    for piece in np.array_split(overlapping, 4):
        dp.partial_fit(piece)
    assert dp.lam_ > 0 and dp.n_clusters_ >= 4


def test_a_parquet_table_opened_by_open_array_keeps_its_column_names(tmp_path):
    import pandas as pd

    from dclust.errors import InvalidDataError

    rng = np.random.default_rng(0)
    df = pd.DataFrame({"a": rng.normal(size=300), "b": rng.normal(size=300)})
    df.to_parquet(tmp_path / "t.parquet")
    X = dclust.open_array(str(tmp_path / "t.parquet"))
    km = dclust.KMeans(n_clusters=2, random_state=0).fit(X)
    assert km.feature_names_in_.tolist() == ["a", "b"]
    np.testing.assert_array_equal(np.asarray(km.predict(df)), np.asarray(km.predict(X)))
    with pytest.raises(InvalidDataError, match="b"):
        km.predict(df[["b", "a"]])


def test_feature_names_survive_save_and_load(tmp_path):
    import pandas as pd

    df = pd.DataFrame({"a": np.arange(20.0), "b": np.arange(20.0) % 3})
    km = dclust.KMeans(n_clusters=2, random_state=0).fit(df)
    dclust.save(km, tmp_path / "m.zarr")
    back = dclust.load(tmp_path / "m.zarr")
    assert back.feature_names_in_.dtype == object and back.feature_names_in_.tolist() == ["a", "b"]
    with pytest.raises(InvalidDataError):
        back.predict(df[["b", "a"]])
