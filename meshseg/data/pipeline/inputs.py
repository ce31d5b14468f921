"""How a run builds one mesh's model inputs from its record: `MeshInputs`, the `data`
settings that decide them (no TensorFlow, so command-line tools can read a run's settings
before they import it; `meshseg.data.pipeline.dataset` builds the inputs)."""

from dataclasses import dataclass

from meshseg.config import FOURIER_OCTAVES, feature_widths
from meshseg.data.features.stored import stored_features


@dataclass(frozen=True)
class MeshInputs:
    """How one mesh's model inputs are built from its record: the `data` settings that
    decide them (`meshseg.config.DataConfig`; `of` reads them from there).

    Attributes:
      features: the per-vertex inputs, concatenated in this order into "inputs"
        ("xyz", "xyz_fourier", "normals", "hks"; the last two must be stored in the
        records).
      levels: coarser hierarchy levels read from the records (0: none).
      center, scale: the normalisation of `meshseg.data.pipeline.dataset.normalize_vertices`.
      frame: "pca" turns each mesh into its principal frame after any rotation
        (`meshseg.data.pipeline.principal_frame`), "none" keeps its orientation.
      fourier_octaves: the frequencies of "xyz_fourier" (`meshseg.data.pipeline.positional`).
    """

    features: tuple = ("xyz",)
    levels: int = 0
    center: str = "mean"
    scale: str = "rms"
    frame: str = "none"
    fourier_octaves: int = FOURIER_OCTAVES

    @classmethod
    def of(cls, data) -> "MeshInputs":
        """The `MeshInputs` of a `DataConfig` (or anything with its six attributes)."""
        return cls(tuple(data.features), int(data.levels), data.center, data.scale, data.frame,
                   int(data.fourier_octaves))

    @property
    def width(self) -> int:
        """F, the channels of "inputs": the `features`' widths summed
        (`meshseg.config.feature_widths`)."""
        widths = feature_widths(self.fourier_octaves)
        return sum(widths[name] for name in self.features)

    @property
    def stored(self) -> tuple:
        """The features the records must store (`meshseg.data.features.stored.stored_features`)."""
        return stored_features(self.features)
