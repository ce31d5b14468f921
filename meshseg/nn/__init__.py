"""The network: feature-steered convolution implementations (`ops`), the Keras layer
(`layers`) and the mesh segmentation demo network (`model`).

Importing `meshseg.nn` registers the custom Keras classes, so that
`keras.models.load_model("<run>/model.keras")` finds them (`import meshseg` alone does not
import TensorFlow, which keeps the converter's worker processes fast).
"""

from meshseg.nn import model  # noqa: F401  (registers the Keras classes for load_model)
