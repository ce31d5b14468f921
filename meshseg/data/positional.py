"""Fourier features of vertex positions (`data.features` xyz_fourier): the positional
encoding of NeRF (Mildenhall et al., ECCV 2020) as studied by Tancik et al. (NeurIPS
2020, "Fourier features let networks learn high frequency functions"). A per-vertex
network given xyz alone fits a smooth function of position; given sin and cos of xyz at
octave frequencies it can fit a label map with detail at the scale of the highest one.

Computed when a mesh is read, from the positions as normalised and augmented, so it
needs nothing in the records. On unit-area meshes (`data.scale=unit_area`) the periods
run from 2 down to 2 / 2**(OCTAVES-1) = 1/16 (an RNA surface of rms radius 0.28 spans
about 1.2).
"""

import math

import tensorflow as tf

from meshseg.config import FEATURE_WIDTHS, FOURIER_OCTAVES as OCTAVES

WIDTH = FEATURE_WIDTHS["xyz_fourier"]  # sin and cos of each of x, y, z at each frequency


def fourier_features(positions: tf.Tensor) -> tf.Tensor:
    """sin and cos of every coordinate at the frequencies pi * 2**k, k < OCTAVES.

    Args:
      positions: float [..., 3] vertex positions (normalised: `data.center`, `data.scale`).

    Returns:
      [..., WIDTH] of the positions' dtype: for k = 0 .. OCTAVES-1, sin(pi 2^k xyz) then
      cos(pi 2^k xyz) (3 channels each), in [-1, 1].
    """
    frequencies = tf.constant([math.pi * 2.0 ** k for k in range(OCTAVES)], positions.dtype)
    angles = positions[..., None, :] * frequencies[:, None]  # [..., OCTAVES, 3]
    encoded = tf.concat([tf.sin(angles), tf.cos(angles)], axis=-1)  # [..., OCTAVES, 6]
    return tf.reshape(encoded, tf.concat([tf.shape(positions)[:-1], [WIDTH]], axis=0))
