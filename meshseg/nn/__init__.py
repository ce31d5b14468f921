"""The network: feature-steered convolution implementations (`ops`), the Keras layer
(`layers`) and the mesh segmentation demo network (`model`).

Importing `meshseg.nn.model` registers the custom Keras classes, so
`keras.models.load_model("<run>/model.keras")` finds them.
"""
