"""The per-vertex features the records store, by name and width: the one list the
converter, the record schema and the tf.data pipeline share.

Configuration only (`meshseg.config`): importing it loads none of the descriptor
libraries (SciPy, robust_laplacian, fast_simplification) that computing the features
needs (`meshseg.data.features.derived`), so the training process, which reads stored
features, never loads them.
"""

from typing import Sequence

from meshseg.config import POSITION_FEATURES, feature_widths

# The per-vertex features the records store (not those computed from the vertices when a
# mesh is read, `POSITION_FEATURES`), in the order of `meshseg.config.FEATURE_NAMES`,
# with their widths: normals 3, hks 16.
STORED_FEATURES = {name: width for name, width in feature_widths().items()
                   if name not in POSITION_FEATURES}


def stored_features(features: Sequence[str]) -> tuple[str, ...]:
    """The features of a `data.features` list that the records must store, in
    `STORED_FEATURES` order (so [xyz, hks] and [hks, xyz] need the same records)."""
    return tuple(name for name in STORED_FEATURES if name in features)
