"""TFRecord framing: the container every bertprep record file uses (pairs and masked shards).

A TFRecord file is a sequence of frames:
    uint64 length (little-endian) | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)
Readers here check both CRCs and raise `CorruptRecordError` naming the file and record index, so a flipped or
truncated byte stops a job instead of feeding garbage to training. No tensorflow needed.
"""
from __future__ import annotations

import struct
from typing import BinaryIO, Iterable, Iterator

import google_crc32c

_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8


class CorruptRecordError(IOError):
    """A TFRecord frame failed its length or CRC check, or the file ends inside a frame."""


def masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One record as the bytes of a TFRecord frame."""
    length = _LENGTH.pack(len(data))
    return b"".join((length, _CRC.pack(masked_crc(length)), data, _CRC.pack(masked_crc(data))))


FRAME_OVERHEAD = 16   # u64 length, u32 CRC of the length, (data), u32 CRC of the data


def payload(framed: bytes) -> bytes:
    """The record inside a frame made by `frame` (unchecked: for frames this job wrote moments ago)."""
    return framed[12:-4]


def write_records(f: BinaryIO, records: Iterable[bytes]) -> int:
    """Writes records as TFRecord frames to an open binary file; returns how many were written."""
    n = 0
    for record in records:
        f.write(frame(record))
        n += 1
    return n


def iter_records(f: BinaryIO, name: str = "<stream>", check_crc: bool = True) -> Iterator[bytes]:
    """Yields the records of a TFRecord stream, raising CorruptRecordError on any damage."""
    index = 0
    while True:
        header = f.read(12)
        if not header:
            return
        if len(header) < 12:
            raise CorruptRecordError(f"{name}: record {index}: file ends inside a record header (truncated)")
        length_bytes = header[:8]
        (length,) = _LENGTH.unpack(length_bytes)
        (length_crc,) = _CRC.unpack(header[8:])
        if check_crc and masked_crc(length_bytes) != length_crc:
            raise CorruptRecordError(f"{name}: record {index}: length CRC mismatch (corrupt header)")
        data = f.read(length)
        footer = f.read(4)
        if len(data) < length or len(footer) < 4:
            raise CorruptRecordError(f"{name}: record {index}: file ends inside a record (truncated)")
        if check_crc and masked_crc(data) != _CRC.unpack(footer)[0]:
            raise CorruptRecordError(f"{name}: record {index}: data CRC mismatch (corrupt record)")
        yield data
        index += 1


def read_file(path: str, check_crc: bool = True) -> Iterator[bytes]:
    """Yields the records of one TFRecord file (local or any Beam filesystem path)."""
    from apache_beam.io.filesystem import CompressionTypes   # deferred: Beam (~1 s) to the first file read
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        yield from iter_records(f, name=path, check_crc=check_crc)
