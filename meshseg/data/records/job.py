"""One mesh of a conversion, as a converter worker process handles it: the mesh file read
and checked (`meshseg.data.mesh.meshfiles`), then what the records store derived from it
(`meshseg.data.features.derived`). NumPy only (no TensorFlow), so the spawned workers
start fast; the descriptor libraries (SciPy, robust_laplacian, fast_simplification) are
loaded only here, in the processes that derive.
"""

import dataclasses
import hashlib

from meshseg.data.features.derived import Derived, derive
from meshseg.data.features.pose import turned
from meshseg.data.mesh.meshfiles import LabelledMesh, load_labelled_mesh
from meshseg.data.mesh.validate import InvalidMeshError


@dataclasses.dataclass
class ConvertedMesh(LabelledMesh):
    """A `LabelledMesh` with what the records store derived from it.

    Attributes:
      derived: the positions, features and hierarchy levels the records store
        (`meshseg.data.features.derived.Derived`).
    """

    derived: Derived | None = None


def convert_job(job: dict) -> tuple[bool, ConvertedMesh | str]:
    """Process-pool entry point: `load_labelled_mesh(**job)`, then the derived fields
    (`meshseg.data.features.derived.derive`) of the job's optional "features", "levels",
    "coarsening" and "frame", with the descriptors cached in the job's optional
    "descriptor_cache" folder. A job with "turn_seed" first turns, moves and scales the
    mesh (`meshseg.data.features.pose.turned`, evaluation on turned meshes), so everything is
    derived from the turned mesh, as from a turned file.

    Returns:
      (True, ConvertedMesh) or (False, reason) for an `InvalidMeshError` or a mesh whose
      derived fields are undefined (e.g. the HKS of a mesh of zero area).
    """
    job = dict(job)
    features, levels = job.pop("features", ()), job.pop("levels", 0)
    coarsening = job.pop("coarsening", 4.0)
    descriptor_cache = job.pop("descriptor_cache", None)
    frame = job.pop("frame", "none")
    turn_seed = job.pop("turn_seed", None)
    try:
        mesh = load_labelled_mesh(**job)
    except InvalidMeshError as error:
        return False, str(error)
    vertices, descriptor_key = mesh.vertices, mesh.sha256
    if turn_seed is not None:  # before anything is derived, as a turned file would be
        vertices = turned(mesh.vertices, turn_seed, mesh.sha256)
        descriptor_key = hashlib.sha256(f"{mesh.sha256}:turned:{turn_seed}".encode()).hexdigest()
    try:
        derived = derive(vertices, mesh.triangles, features, levels, coarsening,
                         descriptor_key, descriptor_cache, frame)
    except ValueError as error:
        return False, f"features, pose or hierarchy: {error}"
    fields = {field.name: getattr(mesh, field.name) for field in dataclasses.fields(mesh)}
    return True, ConvertedMesh(**fields, derived=derived)
