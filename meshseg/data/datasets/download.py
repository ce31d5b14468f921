"""A public data set fetched, checked, extracted and converted: the library under
`python -m meshseg.data.download` (`meshseg.data.download`, the command line, whose
docstring tells the steps). The registry of data sets is `meshseg.data.datasets.registry`.
"""

import http.client
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from tqdm.auto import tqdm

from meshseg.config import train_config
from meshseg.console import hydra_override, shell_command
from meshseg.data.datasets.registry import DATASETS, Archive, Dataset, manifest_entries
from meshseg.data.mesh.meshfiles import file_sha256
from meshseg.errors import ConfigError, DataError
from meshseg.outputs import make_dirs, temporary_dir, write_json, writing

DOWNLOADS = ".downloads"
RECORD = "download.json"
CHUNK_BYTES = 1 << 20
TIMEOUT_S = 60


def fetch(archive: Archive, folder: Path, progress: bool = True) -> tuple[Path, str]:
    """Downloads `archive.url` to `<folder>/<archive.filename>`, resuming an earlier
    partial download (`.part`), and checks its pinned sha256.

    Returns:
      (the downloaded file, its sha256). A file already downloaded is only checked.

    Raises:
      DataError: "<url>: download interrupted after N of M bytes (...); run the same
        command again to resume" (the `.part` file is kept), an HTTP error, or a sha256
        that differs from the pinned one (the file is deleted).
      OutputError: "<folder or .part file>: cannot write ...: <cause>" when the download
        cannot be written (a full disk, a read-only folder); the `.part` file is kept.
    """
    make_dirs(str(folder))
    path = folder / archive.filename
    part = path.with_name(path.name + ".part")
    if not path.exists():
        _download(archive.url, part, progress)
        with writing(str(path), "the download", _KEPT):
            part.rename(path)
    digest = file_sha256(path)
    if archive.sha256 is not None and digest != archive.sha256:
        path.unlink()
        raise DataError(f"{archive.url}: sha256 {digest} differs from the pinned "
                        f"{archive.sha256}; the download was deleted")
    return path, digest


_KEPT = "what was downloaded is kept; run the same command again to resume"


def _download(url: str, part: Path, progress: bool) -> None:
    """Appends the rest of `url` to `part` (all of it when `part` does not exist).

    Raises:
      DataError: an HTTP error, no connection, or a download interrupted (`fetch`).
      OutputError: "<part>: cannot write the download: <cause>; what was downloaded is
        kept; ..." when the local file cannot be written (ENOSPC, EROFS, EACCES, ...).
    """
    start = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": "meshseg-download"}
    if start:
        headers["Range"] = f"bytes={start}-"
    total = None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=TIMEOUT_S) as response:
            if start and response.status != 206:  # the server ignored the range
                start = 0
            length = response.headers.get("Content-Length")
            total = start + int(length) if length is not None else None
            # A failure to write the local file (a full disk, a read-only folder) is an
            # OutputError naming it (`meshseg.outputs.writing`), not an interruption of the
            # download; what was written stays in `part` for the next run to resume.
            with writing(str(part), "the download", _KEPT):
                # unbuffered: every byte written is in the file, and closing it has
                # nothing left to write (and to fail on)
                out = open(part, "ab" if start else "wb", buffering=0)
            with out, tqdm(total=total, initial=start, unit="B", unit_scale=True,
                           desc=part.stem, disable=not progress) as bar:
                while chunk := response.read(CHUNK_BYTES):
                    with writing(str(part), "the download", _KEPT):
                        left = memoryview(chunk)
                        while left:
                            left = left[out.write(left):]
                    bar.update(len(chunk))
    except urllib.error.HTTPError as error:
        if error.code == 416 and start:  # nothing left to send: the file is complete
            return
        raise DataError(f"{url}: HTTP {error.code} {error.reason}") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
        received = part.stat().st_size if part.exists() else 0
        if not received:  # no connection at all (no network, unknown host, refused)
            raise DataError(f"{url}: could not download ({type(error).__name__}: "
                            f"{getattr(error, 'reason', error)}); check the network") from None
        raise DataError(f"{url}: download interrupted after {received} bytes "
                        f"({type(error).__name__}: {error}); run the same command again to "
                        "resume") from None
    if total is not None and part.stat().st_size != total:
        raise DataError(f"{url}: download interrupted after {part.stat().st_size} of {total} "
                        "bytes; run the same command again to resume")


def extract(archive: Path, into: Path) -> None:
    """Extracts a zip or tar archive into `into`; an archive holding one top folder only
    is extracted without it.

    Raises:
      DataError: for a file that is neither, or a member that would land outside `into`.
    """
    unpacked = Path(tempfile.mkdtemp(prefix=".unpack-", dir=into))
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zipped:
                for name in zipped.namelist():
                    if not (unpacked / name).resolve().is_relative_to(unpacked.resolve()):
                        raise DataError(f"{archive}: member {name} lies outside the archive")
                zipped.extractall(unpacked)
        elif tarfile.is_tarfile(archive):
            if not hasattr(tarfile, "data_filter"):  # Python 3.10.12, 3.11.4 and newer
                raise DataError(f"{archive}: extracting a tar archive safely needs a newer "
                                "Python (3.10.12 or 3.11.4 or later)")
            with tarfile.open(archive) as tarred:
                try:
                    tarred.extractall(unpacked, filter="data")
                except tarfile.FilterError as error:
                    raise DataError(f"{archive}: {error}") from None
        else:
            raise DataError(f"{archive}: neither a zip nor a tar archive")
        entries = list(unpacked.iterdir())
        top = entries[0] if len(entries) == 1 and entries[0].is_dir() else unpacked
        for entry in top.iterdir():
            shutil.move(str(entry), into / entry.name)
    finally:
        shutil.rmtree(unpacked, ignore_errors=True)


def check_manifest(folder: Path, manifest: Path) -> int:
    """Checks every file a manifest lists (size and sha256) under `folder`.

    Returns:
      the number of files checked.

    Raises:
      DataError: "<n> of <N> files missing or changed, e.g. <path>: <what>".
    """
    entries = manifest_entries(manifest)
    problems = []
    for name, (size, digest) in entries.items():
        path = folder / name
        if not path.is_file():
            problems.append(f"{name}: missing")
        elif path.stat().st_size != size or file_sha256(path) != digest:
            problems.append(f"{name}: size or sha256 differs from {manifest.name}")
    if problems:
        raise DataError(f"{len(problems)} of {len(entries)} files missing or changed, e.g. "
                        f"{problems[0]}")
    return len(entries)


def download(dataset: Dataset, root: Path, accept_license: bool = False,
             progress: bool = True) -> Path:
    """Downloads, checks, extracts and prepares `dataset` into `<root>/<name>` (see the
    module docstring); a data set already there is left as it is.

    Returns:
      the data set's folder.

    Raises:
      ConfigError: terms not accepted, or `<root>/<name>` exists and is not a download.
      DataError: a failed download, checksum, manifest check or preparation; nothing is
        left in `<root>` but a resumable partial download.
    """
    target = root / dataset.name
    if (target / RECORD).is_file():
        print(f"{target} is already downloaded")
        return target
    if target.exists():
        raise ConfigError(f"{target} exists and is not a meshseg download; remove it or "
                          "choose another --root")
    if dataset.terms and not accept_license:
        raise ConfigError(f"{dataset.name}: {dataset.terms} Rerun with --accept-license to "
                          "accept these terms")
    make_dirs(str(root))
    staging = Path(temporary_dir(str(root), f".{dataset.name}.partial-"))
    try:
        sources = []
        for archive in dataset.archives:
            path, digest = fetch(archive, root / DOWNLOADS, progress)
            if archive.sha256 is None and dataset.manifest is None:
                print(f"note: no checksum is pinned for {archive.url}; its sha256 is {digest} "
                      f"(recorded in {target / RECORD})")
            sources.append({"url": archive.url, "sha256": digest,
                            "pinned": archive.sha256 is not None})
            with writing(str(staging), f"the files of {archive.filename}",
                         "the download is kept; run the same command again"):
                extract(path, staging)
        folder = staging / dataset.subdir if dataset.subdir else staging
        if not folder.is_dir():
            raise DataError(f"{dataset.name}: the archives hold no folder {dataset.subdir}")
        checked = check_manifest(folder, dataset.manifest) if dataset.manifest else 0
        with writing(str(folder), "the prepared data set",
                     "the download is kept; run the same command again"):
            if dataset.layout == "meshcnn":
                from meshseg.data.datasets.meshcnn import write_vertex_labels

                write_vertex_labels(folder, dataset.num_classes)
            write_json(str(folder / RECORD), {
                "name": dataset.name, "license": dataset.license, "terms": dataset.terms,
                "terms_accepted": accept_license if dataset.terms else None,
                "sources": sources, "files_checked_against_manifest": checked})
        with writing(str(target), "the data set folder"):
            folder.rename(target)
    except DataError:
        for archive in dataset.archives:  # a corrupt archive would fail again
            if dataset.manifest is not None:
                (root / DOWNLOADS / archive.filename).unlink(missing_ok=True)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def convert(dataset: Dataset, folder: Path) -> None:
    """Converts the data set to records as the first `python train.py
    experiment=<experiment> data.root=<folder>` would (its settings composed by
    `meshseg.config.train_config`), so that run starts training at once.

    Raises:
      DataError: for a mesh or label file that does not convert (naming it).
    """
    # imports TensorFlow: only when converting
    from meshseg.data.pipeline.sources import resolve_files

    data = train_config([f"experiment={dataset.experiment}", f"data.root={folder}",
                         *dataset.overrides]).data
    files = resolve_files(data)
    print(f"records: {len(files['train'])} train and {len(files['test'])} test shard(s)"
          + (f" in {data.cache_dir}" if data.cache_dir else ""))


def train_command(dataset, folder: Path) -> str:
    """The train.py command that trains on `dataset` downloaded to `folder`: its experiment,
    and `data.root` and the data set's overrides where the experiment's own root is
    another copy (it has overrides, or `folder` is not `datasets/<name>`)."""
    root_override = ([] if folder == Path("datasets") / dataset.name and not dataset.overrides
                     else [hydra_override("data.root", str(folder))])
    return shell_command(["python", "train.py", f"experiment={dataset.experiment}",
                          *root_override, *dataset.overrides])


def list_datasets() -> str:
    """A table of the data sets: name, download size (and size on disk; "unknown" for
    archives never fetched where the registry was written), licence, whether
    `--accept-license` is needed, and the experiment that trains on it."""
    rows = [("NAME", "SIZE", "LICENCE", "TERMS", "TRAIN WITH")]
    for dataset in DATASETS.values():
        size = (f"{dataset.download_mb:.0f} MB ({dataset.extracted_mb:.0f} MB on disk)"
                if dataset.download_mb else "unknown")
        terms = "--accept-license" if dataset.terms else "-"
        rows.append((dataset.name, size, dataset.license, terms,
                     train_command(dataset, Path("datasets") / dataset.name)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                     for row in rows)
