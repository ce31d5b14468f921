"""Fourier features of vertex positions (`data.features` xyz_fourier): the positional
encoding of NeRF (Mildenhall et al., ECCV 2020) as studied by Tancik et al. (NeurIPS
2020, "Fourier features let networks learn high frequency functions"). A per-vertex
network given xyz alone fits a smooth function of position; given sin and cos of xyz at
octave frequencies it can fit a label map with detail at the scale of the highest one.

Computed when a mesh is read, from the positions as normalised and augmented, so it
needs nothing in the records. On unit-area meshes (`data.scale=unit_area`) the periods
run from 2 down to 2 / 2**(octaves-1): 1/16 at the default 6 octaves
(`data.fourier_octaves`; an RNA surface of rms radius 0.28 spans about 1.2).
"""

import math

import tensorflow as tf

from meshseg.config import FOURIER_OCTAVES


def fourier_features(positions: tf.Tensor, octaves: int = FOURIER_OCTAVES) -> tf.Tensor:
    """sin and cos of every coordinate at the frequencies pi * 2**k, k < octaves.

    Args:
      positions: float [..., 3] vertex positions (normalised: `data.center`, `data.scale`).
      octaves: how many frequencies (`data.fourier_octaves`).

    Returns:
      [..., 6 * octaves] of the positions' dtype: for k = 0 .. octaves-1, sin(pi 2^k xyz)
      then cos(pi 2^k xyz) (3 channels each), in [-1, 1].
    """
    frequencies = tf.constant([math.pi * 2.0 ** k for k in range(octaves)], positions.dtype)
    angles = positions[..., None, :] * frequencies[:, None]  # [..., octaves, 3]
    encoded = tf.concat([tf.sin(angles), tf.cos(angles)], axis=-1)  # [..., octaves, 6]
    return tf.reshape(encoded, tf.concat([tf.shape(positions)[:-1], [6 * octaves]], axis=0))
