"""The element counts a mesh file declares, checked against what the file holds (NumPy and
`meshseg.data.mesh.foreign`'s strict text reading, no TensorFlow).

An OFF file's vertex and face lines (`#` comments and blank lines skipped) are checked
against its count line, a PLY file's
elements against its `element <name> <count>` lines (ASCII: lines; binary: bytes, list
lengths taken from each element's first item, as trimesh assumes), and a binary STL's
size against its triangle count (84 + 50 * count bytes). A file cut short, or holding
more than it declares, is refused with both counts before trimesh reads it: trimesh would
read what is there, and an OFF cut inside its vertex list would even have its face lines
read as coordinates. A binary PLY whose faces have different corner counts, which trimesh
misreads as a count mismatch, is refused saying so.
"""

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from meshseg.data.mesh.foreign import decode_text, off_data_lines, text_lines
from meshseg.data.mesh.validate import InvalidMeshError


def _check_counts(declared: list[tuple[str, int]], read: list[int]) -> None:
    """Raises InvalidMeshError "<n> <element> declared, <m> read" for the first element
    whose count read differs from the count declared ((element, n) pairs)."""
    for (element, count), present in zip(declared, read):
        if count != present:
            raise InvalidMeshError(f"{count} {element} declared, {present} read")


def _is_off_face(fields: list[str]) -> bool:
    """Whether an OFF data line's fields are a face: a corner count n >= 3, then n vertex
    indices (colour values may follow). A vertex line (x y z) never is one."""
    corners = int(fields[0]) if fields[0].isdigit() else 0
    return corners >= 3 and len(fields) > corners and all(
        index.isdigit() for index in fields[1:corners + 1])


OffLines = list[tuple[int, list[str]]]


def off_header(lines: OffLines) -> tuple[tuple[int, int], OffLines]:
    """((vertex count, face count), the data lines after the counts) of an OFF file's data
    lines (`meshseg.data.mesh.foreign.off_data_lines`). The first data line starts with the
    keyword (OFF, or a variant such as COFF or NOFF); the counts follow on it or on the
    next data line.

    Raises:
      InvalidMeshError: naming the line, for a missing keyword or count line, or a binary
        OFF file (not read: save it as ASCII OFF).
    """
    if not lines or not lines[0][1][0].endswith("OFF"):
        where = f"line {lines[0][0]}" if lines else "the file"
        raise InvalidMeshError(f"{where} of the OFF file: no OFF keyword")
    (number, keyword), rest = lines[0], lines[1:]
    if "BINARY" in keyword[1:2]:
        raise InvalidMeshError(f"line {number} of the OFF file: binary OFF is not read; save "
                               "the mesh as ASCII OFF, PLY or OBJ")
    if len(keyword) == 1:
        if not rest:
            raise InvalidMeshError(f"line {number} of the OFF file: no count line follows")
        (number, counts), rest = rest[0], rest[1:]
    else:
        counts = keyword[1:]
    try:
        num_vertices, num_faces = (int(count) for count in counts[:2])
        if min(num_vertices, num_faces) < 0:
            raise ValueError("negative")
    except ValueError:
        raise InvalidMeshError(f"line {number} of the OFF file: {' '.join(counts)!r} is not "
                               "a vertex and face count") from None
    return (num_vertices, num_faces), rest


def _check_off_counts(path: str | Path) -> None:
    """Raises InvalidMeshError if an OFF file's vertex or face lines (non-blank lines after
    the count line, comments removed) disagree with its counts, or its text or header is
    not valid (`off_header`)."""
    (vertices, faces), body = off_header(off_data_lines(text_lines(path)))
    if len(body) != vertices + faces:
        vertex_lines = next((i for i, (_, fields) in enumerate(body) if _is_off_face(fields)),
                            len(body))
        _check_counts([("vertices", vertices), ("faces", faces)],
                      [vertex_lines, len(body) - vertex_lines])


PLY_TYPES = {"char": "i1", "uchar": "u1", "short": "i2", "ushort": "u2", "int": "i4",
             "uint": "u4", "float": "f4", "double": "f8", "int8": "i1", "uint8": "u1",
             "int16": "i2", "uint16": "u2", "int32": "i4", "uint32": "u4", "float32": "f4",
             "float64": "f8"}


@dataclass
class PlyElement:
    """One `element <name> <count>` of a PLY header and its properties, each a NumPy type
    code for a scalar or a (length type, item type) pair for a list."""

    name: str
    count: int
    properties: list


def _ply_header(data: bytes) -> tuple[str, list[PlyElement], int] | None:
    """(format, elements, offset of the data) of a PLY file's bytes; None when the header
    cannot be parsed (trimesh's reader then reports it)."""
    end = data.find(b"end_header")
    start = data.find(b"\n", end) + 1
    if not data.startswith(b"ply") or end < 0 or start == 0:
        return None
    fields = [line.split() for line in decode_text(data[:end]).splitlines()]
    file_format, elements = "", []
    try:
        for line in fields:
            if line[:1] == ["format"]:
                file_format = line[1]
            elif line[:1] == ["element"]:
                elements.append(PlyElement(line[1], int(line[2]), []))
            elif line[:2] == ["property", "list"]:
                elements[-1].properties.append((PLY_TYPES[line[2]], PLY_TYPES[line[3]]))
            elif line[:1] == ["property"]:
                elements[-1].properties.append(PLY_TYPES[line[1]])
    except (IndexError, KeyError, ValueError):
        return None
    return file_format, elements, start


def _fits_ply_element(line: str, element: PlyElement) -> bool:
    """Whether an ASCII data line has the shape of one item of `element`."""
    fields, position = line.split(), 0
    try:
        for prop in element.properties:
            position += 1 + (int(fields[position]) if isinstance(prop, tuple) else 0)
    except (IndexError, ValueError):
        return False
    return position == len(fields)


def _ply_ascii_read(elements: list[PlyElement], data: bytes) -> list[int]:
    """Items per element in the non-empty lines of an ASCII PLY's data: when their number
    is not the declared total, each element takes the lines of its shape that follow, the
    last one the rest."""
    lines = [line for line in decode_text(data).splitlines() if line.strip()]
    if len(lines) == sum(element.count for element in elements):
        return [element.count for element in elements]
    read, start = [], 0
    for element in elements[:-1]:
        end = start
        while end < len(lines) and _fits_ply_element(lines[end], element):
            end += 1
        read.append(end - start)
        start = end
    return read + [len(lines) - start]


def _ply_item_bytes(element: PlyElement, data: bytes, offset: int, endian: str) -> int:
    """Bytes of one item of `element` in binary data, with list lengths read from the item
    at `offset`; 0 if the data ends before them."""
    size = 0
    for prop in element.properties:
        if not isinstance(prop, tuple):
            size += np.dtype(prop).itemsize
            continue
        length_type, item_type = np.dtype(endian + prop[0]), np.dtype(prop[1])
        if offset + size + length_type.itemsize > len(data):
            return 0
        length = int(np.frombuffer(data, length_type, 1, offset + size)[0])
        size += length_type.itemsize + length * item_type.itemsize
    return size


def _ply_binary_read(elements: list[PlyElement], data: bytes, endian: str) -> list[int]:
    """Whole items per element in a binary PLY's data bytes, each element's list lengths
    those of its first item; the last element takes the bytes left."""
    read, offset = [], 0
    for index, element in enumerate(elements):
        size = _ply_item_bytes(element, data, offset, endian)
        available = (len(data) - offset) // size if size else 0
        read.append(available if index == len(elements) - 1 else min(element.count, available))
        offset += read[-1] * size
    return read


def _ply_list_lengths(elements: list[PlyElement], data: bytes, endian: str
                      ) -> dict[str, set[int]] | None:
    """{element: the list lengths its items hold} of binary data read item by item, for
    the elements with a list property; None unless the items fill the data exactly as
    declared."""
    lengths, offset = {}, 0
    for element in elements:
        for _ in range(element.count):
            size = _ply_item_bytes(element, data, offset, endian)
            if not size or offset + size > len(data):
                return None
            if any(isinstance(prop, tuple) for prop in element.properties):
                first = next(p for p in element.properties if isinstance(p, tuple))
                head = sum(np.dtype(p).itemsize for p in element.properties[
                    :element.properties.index(first)])
                lengths.setdefault(element.name, set()).add(int(np.frombuffer(
                    data, np.dtype(endian + first[0]), 1, offset + head)[0]))
            offset += size
    return lengths if offset == len(data) else None


def _uniform_lists(elements: list[PlyElement], data: bytes, endian: str) -> bool:
    """Whether every item of each element of binary data has the list lengths of its first
    item (which trimesh assumes), read at the strided places those lengths imply; True too
    where the data end before an element's items (the count check reports that)."""
    offset = 0
    for element in elements:
        size = _ply_item_bytes(element, data, offset, endian)
        if not size or offset + element.count * size > len(data):
            return True
        head = 0
        for prop in element.properties:
            if not isinstance(prop, tuple):
                head += np.dtype(prop).itemsize
                continue
            length_type = np.dtype(endian + prop[0])
            lengths = np.ndarray((element.count,), length_type, data, offset + head, (size,))
            if element.count and np.any(lengths != lengths[0]):
                return False
            head += length_type.itemsize + int(lengths[0]) * np.dtype(prop[1]).itemsize
        offset += element.count * size
    return True


def _check_ply_counts(path: str | Path) -> None:
    """Raises InvalidMeshError if a PLY file's data disagree with its element counts, or
    if it is binary with faces of different corner counts, which trimesh misreads (it
    takes every item's list length from the first item)."""
    data = Path(path).read_bytes()
    header = _ply_header(data)
    if header is None:
        return
    file_format, elements, start = header
    endian = ">" if "big" in file_format else "<"
    if file_format == "ascii":
        read = _ply_ascii_read(elements, data[start:])
    else:
        read = _ply_binary_read(elements, data[start:], endian)
    declared = [e.count for e in elements]
    if file_format != "ascii" and not _uniform_lists(elements, data[start:], endian):
        varying = {name: found for name, found in (
            _ply_list_lengths(elements, data[start:], endian) or {}).items() if len(found) > 1}
        if varying:
            name, found = next(iter(varying.items()))
            raise InvalidMeshError(
                f"binary PLY whose {name} lists have {min(found)} to {max(found)} entries "
                "(faces of different corner counts), which trimesh cannot read; save the mesh "
                "as ASCII PLY, OFF or OBJ")
    plural = {"vertex": "vertices"}
    _check_counts([(plural.get(e.name, e.name + "s"), e.count) for e in elements], read)


def _check_stl_counts(path: str | Path) -> None:
    """Raises InvalidMeshError if a binary STL's size is not 84 + 50 * its triangle count.
    It is binary when its first 84 bytes hold a NUL byte, as its uint32 triangle count
    (bytes 80-83) does below 2**24 triangles; an ASCII STL declares no count."""
    with open(path, "rb") as stream:
        head = stream.read(84)
    if len(head) < 84 or b"\0" not in head:
        return
    declared, size = int.from_bytes(head[80:], "little"), os.path.getsize(path)
    if size != 84 + 50 * declared:
        raise InvalidMeshError(f"{declared} triangles declared, {(size - 84) // 50} read (a "
                               f"binary STL of {size} bytes, {84 + 50 * declared} expected)")


COUNT_CHECKS = {".off": _check_off_counts, ".ply": _check_ply_counts, ".stl": _check_stl_counts}


def check_declared_counts(path: str | Path) -> None:
    """Checks the element counts a mesh file declares (OFF and PLY headers, a binary STL's
    triangle count) against what it holds; other formats pass.

    Raises:
      InvalidMeshError: naming both counts, e.g. "80 faces declared, 40 read".
    """
    check = COUNT_CHECKS.get(Path(path).suffix.lower())
    if check is not None:
        check(path)
