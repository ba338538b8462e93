"""Plots of clusterings, fits, lam sweeps, video palettes, stream tracks and link satisfaction (matplotlib).

Needs the ``plot`` extra (``pip install 'dclust[plot]'``); matplotlib is imported only when a function here is
called. Every function draws on ``ax`` when given, else on a new :class:`matplotlib.figure.Figure` (no pyplot, no
GUI backend: safe on servers and in worker processes), and returns the figure; :func:`save_figure` writes it
atomically. Only small, already reduced data is drawn: a uniform sample of rows for the scatter plot, per-pass,
per-candidate, per-frame or per-step summaries for the rest.

Examples
--------
>>> import numpy as np, dclust
>>> from dclust import plot
>>> X = np.concatenate([np.random.default_rng(0).normal(c, 0.5, (100, 2)) for c in (0, 20)])
>>> fig = plot.plot_clusters(X, model=dclust.DPMeans(lam=50.0, random_state=0).fit(X))
>>> fig.axes[0].get_xlabel()
'feature 0'
"""

from ._figures import (
    check_figure_path,
    palette_image,
    plot_clusters,
    plot_link_satisfaction,
    plot_objective_history,
    plot_palette_timeline,
    plot_sweep,
    plot_track_lifetimes,
    save_figure,
)

__all__ = [
    "plot_clusters",
    "plot_objective_history",
    "plot_sweep",
    "plot_palette_timeline",
    "plot_track_lifetimes",
    "plot_link_satisfaction",
    "save_figure",
    "check_figure_path",
    "palette_image",
]
