"""Whether a local gzip or bz2 file was cut short, found before a job reads it (the job would find it only when
its reader reaches the end, after the plan and minutes of work).

bz2: a stream ends with the 48-bit end-of-stream magic (the digits of sqrt(pi), 0x177245385090), its 32-bit CRC
and at most 7 bits of padding, so the last 11 bytes say whether the file ends a stream, whatever its size. gzip has
no such mark (its trailer is a CRC and a length, which any bytes can look like): a file of at most GZIP_CHECK_BYTES
is decompressed whole (a fraction of a second), a larger one is left to the job's reader.
"""
from __future__ import annotations

import os
import zlib

BZ2_SUFFIXES = (".bz2", ".tbz2")
GZIP_SUFFIXES = (".gz", ".tgz")
GZIP_CHECK_BYTES = 64 << 20
_BZ2_END = 0x177245385090   # bz2's end-of-stream magic
_BLOCK = 1 << 20
_CUT = "{path}: the {format} stream ends before its end marker (a file cut short?)"   # as the readers say it


def cut_short(path: str) -> str | None:
    """Why the local file `path` (named .gz/.tgz or .bz2/.tbz2) is a stream cut short, as one line, or None: it ends
    as its format ends (module doc), or it is named as neither, or it is not checked (a large gzip file)."""
    name = path.lower()
    if name.endswith(BZ2_SUFFIXES):
        return None if _ends_bz2(path) else _CUT.format(path=path, format="bz2")
    if name.endswith(GZIP_SUFFIXES) and os.path.getsize(path) <= GZIP_CHECK_BYTES:
        return _gzip_problem(path)
    return None


def _ends_bz2(path: str) -> bool:
    with open(path, "rb") as f:
        f.seek(max(0, os.path.getsize(path) - 11))
        tail = int.from_bytes(f.read(), "big")
    # the magic, then the 32-bit CRC, then 0-7 bits of padding up to the last byte
    return any((tail >> (32 + pad)) & ((1 << 48) - 1) == _BZ2_END for pad in range(8))


def _gzip_problem(path: str) -> str | None:
    d, fed = zlib.decompressobj(zlib.MAX_WBITS | 16), False
    try:
        with open(path, "rb") as f:
            while raw := f.read(_BLOCK):
                while raw:
                    fed = True
                    d.decompress(raw, _BLOCK)   # at most a block out at a time: memory stays small
                    raw = d.unconsumed_tail
                    if d.eof:   # a member ended: what follows it is the next one (or nothing)
                        raw, d, fed = d.unused_data, zlib.decompressobj(zlib.MAX_WBITS | 16), False
    except zlib.error as e:
        return f"{path}: not a valid gzip stream ({e})"
    return _CUT.format(path=path, format="gzip") if fed else None
