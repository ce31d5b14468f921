"""The network: feature-steered convolution implementations (`ops`), the Keras layer
(`layers`), the mesh segmentation demo network (`model`), the multi-scale FeaStUNet
(`unet`, with `pooling`) and the choice between them (`networks`).

Importing `meshseg.nn` registers the custom Keras classes, so that
`keras.models.load_model("<run>/model.keras")` finds them (`import meshseg` alone does not
import TensorFlow, which keeps the converter's worker processes fast).
"""

from meshseg.nn import model, unet  # noqa: F401  (registers the Keras classes for load_model)
