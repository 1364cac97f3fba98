"""A bounded reader for GGUF headers: metadata and tensor infos, never tensor data.

Why our own reader instead of ``gguf.GGUFReader``: a GGUF file is untrusted input.
``GGUFReader`` memory-maps the whole file and builds views into tensor data, so a
header-only file (metadata, no data) or a truncated one fails in ways that do not
say what is wrong. This reader walks the header with explicit limits on every count
and length, and reports "truncated inside its metadata" / "inside its tensor data",
"wrong magic", "unsupported version" or "absurd count" as one-line reasons.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from kvtop.runner.units import MIB

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32

# Limits: far above any real model, far below what exhausts memory.
MAX_KV_COUNT = 1_000_000
MAX_TENSOR_COUNT = 1_000_000
MAX_STRING_BYTES = 64 * MIB
MAX_DIMS = 4  # GGML_MAX_DIMS
# Arrays longer than this keep only their length (tokenizer vocabularies).
KEEP_ARRAY_ITEMS = 4096

_SCALAR_FORMATS = {
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
    10: "<Q", 11: "<q", 12: "<d",
}
_STRING = 8
_ARRAY = 9


class GGUFFormatError(ValueError):
    """The file is not a GGUF kvtop can read; the message is one line for a user."""


@dataclass(frozen=True)
class ArraySummary:
    """A long metadata array: its element type and length, items dropped."""

    item_type: int
    length: int


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass
class GGUFHeader:
    path: str
    version: int
    metadata: dict[str, Any] = field(default_factory=dict)
    tensors: list[TensorInfo] = field(default_factory=list)
    data_offset: int = 0
    file_size: int = 0

    @property
    def has_tensor_data(self) -> bool:
        """True when the file is long enough to hold every tensor's bytes."""
        return self.file_size >= self.data_offset + self.tensor_data_bytes()

    def tensor_data_bytes(self) -> int:
        from kvtop.runner.model.quant_types import tensor_bytes

        end = 0
        for t in self.tensors:
            nbytes = tensor_bytes(t.ggml_type, t.n_elements)
            if nbytes is None:
                continue
            end = max(end, t.offset + nbytes)
        return end


class _Reader:
    def __init__(self, fh: BinaryIO, size: int):
        self.fh = fh
        self.size = size

    def read(self, n: int, what: str) -> bytes:
        data = self.fh.read(n)
        if len(data) != n:
            raise GGUFFormatError(f"truncated inside its metadata (while reading {what})")
        return data

    def scalar(self, type_id: int, what: str) -> Any:
        fmt = _SCALAR_FORMATS[type_id]
        return struct.unpack(fmt, self.read(struct.calcsize(fmt), what))[0]

    def u32(self, what: str) -> int:
        return int(struct.unpack("<I", self.read(4, what))[0])

    def u64(self, what: str) -> int:
        return int(struct.unpack("<Q", self.read(8, what))[0])

    def string(self, what: str) -> str:
        n = self.u64(what)
        if n > MAX_STRING_BYTES or n > self.size:
            raise GGUFFormatError(f"absurd string length {n} in {what}")
        return self.read(n, what).decode("utf-8", errors="replace")

    def skip(self, n: int, what: str) -> None:
        here = self.fh.tell()
        if here + n > self.size:
            raise GGUFFormatError(f"truncated inside its metadata (while reading {what})")
        self.fh.seek(n, os.SEEK_CUR)

    def value(self, type_id: int, key: str) -> Any:
        if type_id in _SCALAR_FORMATS:
            return self.scalar(type_id, key)
        if type_id == _STRING:
            return self.string(key)
        if type_id == _ARRAY:
            item_type = self.u32(key)
            length = self.u64(key)
            if length > self.size:
                raise GGUFFormatError(f"absurd array length {length} in {key}")
            if item_type not in _SCALAR_FORMATS and item_type != _STRING:
                raise GGUFFormatError(f"unsupported array item type {item_type} in {key}")
            if length > KEEP_ARRAY_ITEMS:
                if item_type in _SCALAR_FORMATS:
                    self.skip(length * struct.calcsize(_SCALAR_FORMATS[item_type]), key)
                else:
                    for _ in range(length):
                        n = self.u64(key)
                        if n > MAX_STRING_BYTES:
                            raise GGUFFormatError(f"absurd string length {n} in {key}")
                        self.skip(n, key)
                return ArraySummary(item_type, length)
            return [self.value(item_type, key) for _ in range(length)]
        raise GGUFFormatError(f"unknown metadata value type {type_id} for {key}")


def read_header(path: str | os.PathLike[str]) -> GGUFHeader:
    """Read a GGUF file's header; raise ``GGUFFormatError`` or ``OSError`` with a reason."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise GGUFFormatError("is a directory, not a GGUF file")
    size = os.path.getsize(path)
    if size == 0:
        raise GGUFFormatError("is empty (0 bytes)")
    with open(path, "rb") as fh:
        r = _Reader(fh, size)
        magic = fh.read(4)
        if magic != GGUF_MAGIC:
            raise GGUFFormatError(f"is not a GGUF file (magic {magic!r}, expected b'GGUF')")
        version = r.u32("version")
        if version not in SUPPORTED_VERSIONS:
            raise GGUFFormatError(f"has unsupported GGUF version {version}")
        n_tensors = r.u64("tensor count")
        n_kv = r.u64("metadata count")
        if n_tensors > MAX_TENSOR_COUNT:
            raise GGUFFormatError(f"has an absurd tensor count ({n_tensors})")
        if n_kv > MAX_KV_COUNT:
            raise GGUFFormatError(f"has an absurd metadata count ({n_kv})")
        header = GGUFHeader(path=path, version=version, file_size=size)
        for _ in range(n_kv):
            key = r.string("metadata key")
            type_id = r.u32(key)
            header.metadata[key] = r.value(type_id, key)
        for _ in range(n_tensors):
            name = r.string("tensor name")
            n_dims = r.u32(name)
            if n_dims > MAX_DIMS:
                raise GGUFFormatError(f"tensor {name} has {n_dims} dimensions (max {MAX_DIMS})")
            shape = tuple(r.u64(name) for _ in range(n_dims))
            ggml_type = r.u32(name)
            offset = r.u64(name)
            header.tensors.append(TensorInfo(name, shape, ggml_type, offset))
        alignment = header.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
            raise GGUFFormatError(f"has an invalid alignment {alignment!r}")
        pos = fh.tell()
        header.data_offset = (pos + alignment - 1) // alignment * alignment
    return header


def check_loadable(header: GGUFHeader) -> None:
    """Refuse a header whose tensor data is missing or cut short."""
    if header.tensors and not header.has_tensor_data:
        need = header.data_offset + header.tensor_data_bytes()
        raise GGUFFormatError(
            f"is truncated inside its tensor data ({header.file_size} of {need} bytes)"
        )
