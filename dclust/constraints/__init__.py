"""Side information: must-link / cannot-link pairs over the rows of X, block-sparse and aligned to row chunks.

>>> from dclust.constraints import ConstraintGraph
>>> G = ConstraintGraph.from_pairs([0, 2], [1, 3], [True, False], n_samples=4, chunks=(2, 2))
>>> G
ConstraintGraph(n_samples=4, n_blocks=2, n_must=1, n_cannot=1, block_pairs=2)
"""

from ..kernels.coloring import greedy_coloring
from ._graph import ConstraintGraph

__all__ = ["ConstraintGraph", "greedy_coloring"]
