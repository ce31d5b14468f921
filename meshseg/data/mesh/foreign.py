"""The one read path for files meshseg did not write itself: split lists, label files,
mesh-file text and `.keras` archives (NumPy and the standard library, no TensorFlow).

- Text is decoded strictly as UTF-8 (a byte-order mark allowed): a file in another
  encoding is refused naming the line and column of its first undecodable byte, e.g.
  "line 2: not UTF-8 text (byte 0xe8 at column 3); save the file as UTF-8", instead of
  being guessed at or read with replacement characters (`decode_text`, `text_lines`,
  `list_file_lines`).
- OFF files: `#` starts a comment anywhere on a line and blank lines are skipped
  (`off_data_lines`), so comments between the count line and the data are read, not
  counted as data.
- Label files: text holds integers separated by white space (`#` comments allowed); an
  `.npy` array may hold any integer dtype, or floats holding integers; every value must
  fit int32. Strings, booleans, complex numbers, objects, non-integral or non-finite
  floats and values beyond int32 are refused naming the file, the index and the value
  (`label_values`).
- A `.keras` model is a zip archive holding `config.json`, `metadata.json` and
  `model.weights.h5` (Keras 3's format); a file that is not a zip, a cut archive, a
  member that fails its CRC or a missing member is refused as damaged
  (`check_keras_archive`) before Keras reads it (Keras reports a cut archive as "File
  not found").
- JSON and YAML records (`read_json`, `read_yaml`): a file cut short, not UTF-8, not
  JSON/YAML, or of the wrong type is refused in one line naming the file and why,
  "<path> is not <what> (damaged: <why>)", with the error class the caller names
  (a run's own records are `ConfigError`s, a data file's `DataError`s).
"""

import json
import zipfile
from pathlib import Path

import numpy as np

from meshseg.data.mesh.validate import InvalidMeshError
from meshseg.errors import DataError

INT32 = np.iinfo(np.int32)
KERAS_MEMBERS = ("config.json", "metadata.json", "model.weights.h5")


def decode_text(data: bytes) -> str:
    """`data` decoded as UTF-8 (a leading byte-order mark dropped).

    Raises:
      InvalidMeshError: "line L: not UTF-8 text (byte 0xNN at column C); save the file as
        UTF-8", L and C 1-based, for the first byte that is not UTF-8.
    """
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        start = error.start
        line = data.count(b"\n", 0, start) + 1
        column = start - (data.rfind(b"\n", 0, start) + 1) + 1
        raise InvalidMeshError(f"line {line}: not UTF-8 text (byte 0x{data[start]:02x} at "
                               f"column {column}); save the file as UTF-8") from None


def text_lines(path: str | Path) -> list[str]:
    """The lines of a text file (`decode_text`), without their line ends.

    Raises:
      InvalidMeshError: from `decode_text`, naming the line (not the file).
      OSError: if the file cannot be read.
    """
    return decode_text(Path(path).read_bytes()).splitlines()


def list_file_lines(path: str | Path) -> list[str]:
    """The lines of a list file a user wrote (a split file, a data-set manifest).

    Raises:
      DataError: "<path>: line L: not UTF-8 text ...", or "<path>: cannot read: <cause>".
    """
    try:
        return text_lines(path)
    except InvalidMeshError as error:
        raise DataError(f"{path}: {error}") from None
    except OSError as error:
        raise DataError(f"{path}: cannot read: {error.strerror or error}") from None


def _damage(error: Exception) -> str:
    """Why a JSON or YAML file could not be read, in one line."""
    mark = getattr(error, "problem_mark", None)
    if mark is not None:
        return f"not YAML: line {mark.line + 1}, column {mark.column + 1}: {error.problem}"
    return " ".join(str(error).split()) or type(error).__name__


def _read_record(path: str | Path, what: str, error: type, parse, kind: type | tuple):
    """`parse(text)` of the file `path` (`decode_text`), checked to be a `kind`."""
    try:
        text = decode_text(Path(path).read_bytes())
    except InvalidMeshError as damage:
        raise error(f"{path} is not {what} (damaged: {damage})") from None
    except OSError as failure:
        raise error(f"{path}: cannot read: {failure.strerror or failure}") from None
    try:
        value = parse(text)
    except Exception as damage:  # json's ValueError, yaml's YAMLError
        raise error(f"{path} is not {what} (damaged: {_damage(damage)})") from None
    if not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise error(f"{path} is not {what} (damaged: it holds a "
                    f"{type(value).__name__}, not a {names})")
    return value


def read_json(path: str | Path, what: str, error: type = DataError,
              kind: type | tuple = dict):
    """The JSON value in the file `path`, which must be a `kind` (default a dict).

    Raises:
      `error` (default DataError): "<path> is not <what> (damaged: <why>)" for a file
        that is not UTF-8, not JSON (e.g. cut short) or not a `kind`; "<path>: cannot
        read: <cause>" for one that cannot be read.
    """
    return _read_record(path, what, error, json.loads, kind)


def read_yaml(path: str | Path, what: str, error: type = DataError,
              kind: type | tuple = dict):
    """The YAML value in the file `path` (`yaml.safe_load`), which must be a `kind`; see
    `read_json`."""
    import yaml

    return _read_record(path, what, error, yaml.safe_load, kind)


def off_data_lines(lines: list[str]) -> list[tuple[int, list[str]]]:
    """(1-based line number, fields) of an OFF file's lines that hold data: text from `#`
    to the line end is a comment, and lines left blank are skipped."""
    kept = []
    for number, line in enumerate(lines, start=1):
        fields = line.split("#", 1)[0].split()
        if fields:
            kept.append((number, fields))
    return kept


def _label_text_values(path: str | Path) -> np.ndarray:
    """int64 [N] of a text label file: its white-space separated values, `#` comments
    skipped. Raises InvalidMeshError naming the line of a value that is not an integer."""
    values = []
    for number, line in enumerate(text_lines(path), start=1):
        for field in line.split("#", 1)[0].split():
            try:
                value = int(field)
            except ValueError:
                try:
                    value = float(field)
                except ValueError:
                    value = None
                if value is None or not np.isfinite(value) or value != round(value):
                    raise InvalidMeshError(
                        f"line {number}: {field!r} is not an integer label") from None
                value = int(value)
            values.append(value)
    return label_values(np.array(values, dtype=object))


def label_values(values: np.ndarray) -> np.ndarray:
    """int64 [N] of an array of labels of any dtype and shape (flattened).

    Raises:
      InvalidMeshError: "labels hold <kind>, not integers" for strings, booleans, complex
        numbers or objects that are not Python integers; "label <v> at index <i> is not an
        integer" for a non-integral or non-finite float; "label <v> at index <i> is
        outside int32 [-2147483648, 2147483647]".
    """
    values = np.asarray(values).reshape(-1)
    kind = values.dtype.kind
    if kind == "O":
        bad = next((i for i, v in enumerate(values) if not isinstance(v, (int, np.integer))
                    or isinstance(v, bool)), None)
        if bad is not None:
            raise InvalidMeshError(f"label {values[bad]!r} at index {bad} is not an integer")
    elif kind == "f":
        bad = ~np.isfinite(values) | (values != np.round(values))
        if bad.any():
            index = int(np.flatnonzero(bad)[0])
            raise InvalidMeshError(f"label {values[index].item()!r} at index {index} is not an "
                                   "integer")
    elif kind not in "iu":
        names = {"U": "strings", "S": "byte strings", "b": "booleans", "c": "complex numbers",
                 "V": "structured records", "M": "dates", "m": "time spans"}
        raise InvalidMeshError(f"labels hold {names.get(kind, values.dtype)} "
                               f"({values.dtype}), not integers")
    if kind == "O":
        outside = np.array([not INT32.min <= v <= INT32.max for v in values], bool)
    else:
        outside = (values < INT32.min) | (values > INT32.max)
    if outside.any():
        index = int(np.flatnonzero(outside)[0])
        value = values[index:index + 1].tolist()[0]
        raise InvalidMeshError(f"label {value!r} at index {index} is outside int32 "
                               f"[{INT32.min}, {INT32.max}]")
    return values.astype(np.int64)


def read_label_file(path: str | Path) -> np.ndarray:
    """The labels of a `.npy` array or a text file (`label_values`), int64 [N].

    Raises:
      InvalidMeshError: "labels <path>: <reason>" for a file that cannot be read, is not
        UTF-8 text or a valid `.npy`, or holds a value that is not an int32 integer.
    """
    try:
        if Path(path).suffix == ".npy":
            return label_values(np.load(path, allow_pickle=False))
        return _label_text_values(path)
    except InvalidMeshError as error:
        raise InvalidMeshError(f"labels {path}: {error}") from None
    except (OSError, ValueError, EOFError) as error:
        cause = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise InvalidMeshError(f"labels {path}: cannot read: {cause}") from None


def check_keras_archive(path: str | Path) -> None:
    """Checks that `path` is a whole Keras 3 `.keras` archive (see the module docstring).

    Raises:
      DataError: "<path> is damaged: <what> (...)", naming what is wrong: not a zip
        archive, cut short, a member that fails its check, or a missing member.
    """
    advice = "copy or save the model again"
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            missing = [name for name in KERAS_MEMBERS if name not in names]
            if missing:
                raise DataError(f"{path} is damaged: the Keras archive has no "
                                f"{', '.join(missing)}; {advice}")
            broken = archive.testzip()
    except zipfile.BadZipFile as error:
        raise DataError(f"{path} is damaged: not a whole zip archive as a .keras model is "
                        f"({error}); {advice}") from None
    except (OSError, EOFError) as error:
        raise DataError(f"{path} is damaged: cannot read it ({error}); {advice}") from None
    if broken is not None:
        raise DataError(f"{path} is damaged: its member {broken} fails its CRC check; "
                        f"{advice}")
