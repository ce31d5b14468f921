"""Public data sets one command away: download, check, extract and convert.

    python -m meshseg.data.download --list
    python -m meshseg.data.download rna --root datasets
    python -m meshseg.data.download human_seg --root datasets --accept-license

(console script: `meshseg-download`). For the data set NAME of the registry
(`meshseg.data.datasets.registry`):

1. Its licence is printed; terms beyond an open licence (research only, none stated) are
   printed too, and the download needs `--accept-license`.
2. Each archive is downloaded to `<root>/.downloads/<file>.part` with a progress bar and
   renamed when complete. An interrupted download resumes where it stopped when the same
   command runs again (an HTTP Range request). A pinned sha256 is checked; a mismatch
   deletes the file.
3. The archives are extracted into a temporary folder in `<root>`, checked against the
   data set's per-file manifest when it has one, and prepared for the converter (MeshCNN's
   per-edge labels become per-vertex label files, `meshseg.data.datasets.meshcnn`). Only then is
   the folder renamed to `<root>/<NAME>`, with `download.json` (sources, sha256 of every
   archive, licence). Any failure removes the temporary folder: nothing half-written is
   left, but a partial download, which a rerun resumes.
4. Unless `--no-convert`, the data set is converted to records exactly as
   `python train.py experiment=<its experiment> data.root=<root>/<NAME>` would on first
   use (`meshseg.data.pipeline.sources.resolve_files`), and that command is printed.

This module is the command line; the steps are `meshseg.data.datasets.download`.

Exit status (`meshseg.errors`): 2 for a usage mistake (unknown NAME, terms not accepted,
`<root>/<NAME>` holding something else), 4 for a failed download or check.
"""

import argparse
import sys
from pathlib import Path
from typing import Optional

from meshseg.cli import command, output_dir
from meshseg.data.datasets.download import convert, download, list_datasets, train_command
from meshseg.data.datasets.registry import DATASETS
from meshseg.errors import ConfigError
from meshseg.outputs import writing


@command
def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m meshseg.data.download",
        description="Download, check and convert a public mesh segmentation data set.")
    parser.add_argument("name", nargs="?", help="the data set (see --list)")
    parser.add_argument("--root", default="datasets",
                        help="folder the data set goes into, as <root>/<name> (default: "
                             "datasets)")
    parser.add_argument("--accept-license", action="store_true",
                        help="accept the data set's terms (research-only use, or none stated)")
    parser.add_argument("--no-convert", action="store_true",
                        help="download and check only; train.py converts on first use")
    parser.add_argument("--list", action="store_true", help="list the data sets and exit")
    args = parser.parse_args(argv)
    if args.list:
        print(list_datasets())
        return
    if args.name is None:
        raise ConfigError("name a data set (python -m meshseg.data.download --list shows them)")
    if args.name not in DATASETS:
        raise ConfigError(f"unknown data set {args.name!r}; choose one of "
                          f"{', '.join(DATASETS)}")
    output_dir("--root", args.root)
    dataset = DATASETS[args.name]
    print(f"{dataset.name}: {dataset.title}\nlicence: {dataset.license} ({dataset.homepage})")
    if dataset.terms:
        print(f"terms: {dataset.terms}")
    with writing(args.root, f"the {dataset.name} data set"):
        folder = download(dataset, Path(args.root), args.accept_license)
    if not args.no_convert:
        convert(dataset, folder)
    print(f"train: {train_command(dataset, folder)}")


if __name__ == "__main__":
    sys.exit(main())
