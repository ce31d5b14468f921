"""The registry of public mesh segmentation data sets `python -m meshseg.data.download`
fetches: where each comes from, its licence, how its integrity is checked, how it becomes
records, and the experiment that trains on it.

Integrity: an archive with a pinned `sha256` is checked as a whole. GitHub's archives of a
commit are not byte-stable (their compression may change), so the RNA set is checked file
by file against a manifest made from the repository at the pinned commit
(`manifests/rna.sha256`: sha256, size in bytes and path of every file). Archives with
neither (`sha256=None`, no manifest) could not be fetched where this registry was written
(only package registries are reachable there): their sha256 is printed and recorded in
the data set's `download.json` at the first download, for the user to compare and pin.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

from meshseg.data.mesh.foreign import list_file_lines

MANIFESTS = Path(__file__).parent / "manifests"


@dataclass(frozen=True)
class Archive:
    """One file to download: `url`, saved as `filename`, with its sha256 when pinned."""

    url: str
    filename: str
    sha256: Optional[str] = None


@dataclass(frozen=True)
class Dataset:
    """A public data set.

    Attributes:
      name: the command line's NAME; the data set lands in `<root>/<name>`.
      title: one line: what it is and who made it.
      homepage: where it is documented.
      license: its licence, as its authors state it.
      terms: terms beyond an open licence (research-only use, or no licence stated):
        printed, and the download needs `--accept-license`. None for open licences.
      archives: what to download; every archive is extracted into the same folder, and
        an archive holding a single top folder is extracted without it.
      subdir: the folder of the extracted files that is the data set (None: all of it).
      manifest: the per-file manifest (sha256, size, path) the extracted files are checked
        against, or None.
      layout: "mesh_folder" (meshes, per-vertex label files and split files, converted by
        `meshseg.data.records.prepare`), "tfrecords" (records in the demo schema, used as they
        are) or "meshcnn" (MeshCNN's train/ and test/ OBJ folders with per-edge labels in
        seg/*.eseg, turned into per-vertex label files by
        `meshseg.data.datasets.meshcnn.write_vertex_labels`, then converted).
      num_classes: the classes K of its labels, as the experiment trains them.
      experiment: `python train.py experiment=<experiment> data.root=<folder>` trains on
        it, with `overrides` appended.
      overrides: settings the experiment needs for this download's layout (the
        experiment may be set up for another copy, e.g. `../shared/data/rna`'s PLY files).
      download_mb: the size of its archives (MB), when known.
      extracted_mb: its size on disk after extraction (MB), when known.
    """

    name: str
    title: str
    homepage: str
    license: str
    terms: Optional[str]
    archives: Tuple[Archive, ...]
    layout: str
    num_classes: int
    experiment: str
    overrides: Tuple[str, ...] = ()
    subdir: Optional[str] = None
    manifest: Optional[Path] = None
    download_mb: Optional[float] = None
    extracted_mb: Optional[float] = None


RNA_COMMIT = "1667b9f178bee52949ea3bcc6d4f471decfb30cf"
MARON_TERMS = ("Research use only: the meshes derive from FAUST, SCAPE, MIT and Adobe Fuse "
                "scans whose licences allow non-commercial research only; do not redistribute.")
MESHCNN_COSEG = Archive("https://www.dropbox.com/s/34vy4o5fthhz77d/coseg.tar.gz?dl=1",
                        "coseg.tar.gz")
COSEG_TERMS = ("Research use only: the Shape COSEG meshes (Wang et al. 2012) are distributed "
               "by MeshCNN for academic research; no open licence is stated.")
TFG_TERMS = ("No licence is stated for the data files (published by Google with the "
             "Apache-2.0 tensorflow-graphics notebooks); use them for research and evaluation.")


def _coseg(name: str, num_classes: int) -> Dataset:
    return Dataset(
        name=f"coseg_{name}", num_classes=num_classes, experiment=f"coseg_{name}",
        title=f"Shape COSEG {name} (Wang et al. 2012), simplified by MeshCNN (Hanocka et al. "
              "2019); per-edge part labels",
        homepage="https://ranahanocka.github.io/MeshCNN/", license="research only",
        terms=COSEG_TERMS, archives=(MESHCNN_COSEG,), subdir=f"coseg_{name}", layout="meshcnn")


DATASETS = {dataset.name: dataset for dataset in (
    Dataset(
        name="rna", num_classes=260, experiment="rna_full", overrides=("data.meshes=off",),
        title="RNA surface segmentation (Poulenard et al. 3DV 2019): 683 molecular surface "
              "meshes (547 train / 136 test), 259 labels + unlabelled",
        homepage="https://github.com/nmwsharp/RNA-Surface-Segmentation-Dataset",
        license="MIT", terms=None, layout="mesh_folder",
        archives=(Archive("https://github.com/nmwsharp/RNA-Surface-Segmentation-Dataset/"
                          f"archive/{RNA_COMMIT}.zip", f"rna-{RNA_COMMIT[:7]}.zip"),),
        # download_mb: `git archive --format=zip` of the pinned commit (GitHub's zip of
        # the same commit may differ by a few bytes); extracted_mb: the manifest's sum.
        manifest=MANIFESTS / "rna.sha256", download_mb=211.0, extracted_mb=656.2),
    Dataset(
        name="tfg_dancer", num_classes=16, experiment="tfg_dancer",
        title="The tensorflow-graphics mesh segmentation demo's TFRecords: Dancer meshes "
              "with 16 body-part labels",
        homepage="https://github.com/tensorflow/graphics/tree/master/tensorflow_graphics/"
                 "notebooks",
        license="none stated", terms=TFG_TERMS, layout="tfrecords",
        archives=(Archive("https://storage.googleapis.com/tensorflow-graphics/notebooks/"
                          "mesh_segmentation/train_data.zip", "tfg_train_data.zip"),
                  Archive("https://storage.googleapis.com/tensorflow-graphics/notebooks/"
                          "mesh_segmentation/data.zip", "tfg_data.zip"))),
    Dataset(
        name="human_seg", num_classes=8, experiment="human_seg",
        title="Human body segmentation (Maron et al. 2017), simplified by MeshCNN (Hanocka "
              "et al. 2019): 8 body parts, per-edge labels",
        homepage="https://ranahanocka.github.io/MeshCNN/", license="research only",
        terms=MARON_TERMS, layout="meshcnn", subdir="human_seg",
        archives=(Archive("https://www.dropbox.com/s/s3n05sw0zg27fz3/human_seg.tar.gz?dl=1",
                          "human_seg.tar.gz"),)),
    _coseg("vases", 4),
    _coseg("chairs", 3),
    _coseg("aliens", 4),
)}


def manifest_entries(path: Path) -> dict[str, tuple[int, str]]:
    """{relative path: (size in bytes, sha256)} of a manifest file (lines
    `<sha256>  <size>  <path>`; `#` starts a comment)."""
    entries = {}
    for line in list_file_lines(path):
        if line.strip() and not line.startswith("#"):
            digest, size, name = line.split(maxsplit=2)
            entries[name] = (int(size), digest)
    return entries
