"""A simulated object store: a Beam FileSystem under the scheme `simstore://BUCKET/KEY` with the semantics of
Beam 2.77's GCS file system (apache_beam/io/gcp/gcsfilesystem.py, gcsio.py), for tests and benches offline.

- No directories: objects have flat keys; `exists` is true only for an object; `mkdirs` does nothing; `match`
  lists by key prefix; `delete(PATH)` deletes what `match(PATH)` finds (a "directory" matches nothing), and
  `delete(PREFIX/)` deletes every key under the prefix.
- Reads are buffered like google-cloud-storage's BlobReader (gcsio.DEFAULT_READ_BUFFER_SIZE = 16 MiB): a read
  the buffer cannot serve downloads max(missing bytes, 16 MiB) from the current position in one request; a seek
  outside the buffer drops it. Opening a reader costs one request (BeamBlobReader calls blob.reload()). As on
  GCSFileSystem, `_gcsIO().open(path, "rb", read_buffer_size=N)` opens one with an N-byte buffer instead.
- Writes are buffered in 16 MiB chunks (BeamBlobWriter) and the object appears whole when the writer closes.
- `rename` is a server-side copy and delete, as GCS does it (no bytes downloaded or uploaded).

It counts requests, bytes downloaded and uploaded, and the peak of open read streams and of bytes buffered by
them, per process (each Beam worker process is one), in files beside the objects: `usage(bucket)` sums them.
Objects live under `<tmp>/bertprep-simstore/BUCKET/`. Worker processes load it with
`--beam_plugins=tests.simstore`.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import threading
import uuid
from urllib.parse import quote, unquote

from apache_beam.io.filesystem import (BeamIOError, CompressedFile, CompressionTypes, FileMetadata, FileSystem)

SCHEME = "simstore"
ROOT = os.path.join(tempfile.gettempdir(), "bertprep-simstore")
READ_BUFFER = 16 << 20    # gcsio.DEFAULT_READ_BUFFER_SIZE
WRITE_CHUNK = 16 << 20    # BeamBlobWriter's chunk_size

_lock = threading.Lock()
_usage: dict[str, dict[str, int]] = {}   # bucket -> this process's counts


def _parse(path: str) -> tuple[str, str]:
    if not path.startswith(SCHEME + "://"):
        raise ValueError(f"not a {SCHEME}:// path: {path}")
    bucket, _, key = path[len(SCHEME) + 3:].partition("/")
    return bucket, key


def _object(bucket: str, key: str) -> str:
    return os.path.join(ROOT, bucket, "objects", quote(key, safe=""))


def _count(bucket: str, **deltas: int) -> None:
    """Adds to this process's counts; `open_reads`/`buffered` also move their peaks. Written out on every call."""
    with _lock:
        u = _usage.setdefault(bucket, {"requests": 0, "downloaded": 0, "uploaded": 0, "open_reads": 0,
                                       "peak_open_reads": 0, "buffered": 0, "peak_buffered": 0})
        for name, n in deltas.items():
            u[name] += n
        u["peak_open_reads"] = max(u["peak_open_reads"], u["open_reads"])
        u["peak_buffered"] = max(u["peak_buffered"], u["buffered"])
        os.makedirs(os.path.join(ROOT, bucket, "usage"), exist_ok=True)
        with open(os.path.join(ROOT, bucket, "usage", f"{os.getpid()}.json"), "w") as f:
            json.dump(u, f)


def new_bucket(name: str | None = None) -> str:
    """A fresh, empty bucket; returns its name."""
    name = name or f"b{uuid.uuid4().hex[:12]}"
    shutil.rmtree(os.path.join(ROOT, name), ignore_errors=True)
    os.makedirs(os.path.join(ROOT, name, "objects"))
    with _lock:
        _usage.pop(name, None)
    return name


def objects(bucket: str) -> list[str]:
    """Every key in the bucket, sorted."""
    return sorted(unquote(n) for n in os.listdir(os.path.join(ROOT, bucket, "objects")) if not n.startswith("."))


def usage(bucket: str) -> dict[str, int]:
    """Counts summed over every process that used the bucket; peaks are the largest of any one process."""
    total = {"requests": 0, "downloaded": 0, "uploaded": 0, "peak_open_reads": 0, "peak_buffered": 0}
    folder = os.path.join(ROOT, bucket, "usage")
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        with open(os.path.join(folder, name)) as f:
            u = json.load(f)
        for k in ("requests", "downloaded", "uploaded"):
            total[k] += u[k]
        for k in ("peak_open_reads", "peak_buffered"):
            total[k] = max(total[k], u[k])
    return total


class _Reader(io.RawIOBase):
    """BlobReader's buffering: [buffer_start, buffer_start + len(buffer)) is held; reads beyond it download
    max(missing, buffer_size) bytes from the current position."""

    def __init__(self, bucket: str, key: str, buffer_size: int = READ_BUFFER):
        super().__init__()
        self.bucket, self.path, self.buffer_size = bucket, _object(bucket, key), buffer_size
        if not os.path.exists(self.path):
            raise FileNotFoundError(f"{SCHEME}://{bucket}/{key}: no such object")
        self.size = os.path.getsize(self.path)
        self.pos, self.buffer_start, self.buffer = 0, 0, b""
        _count(bucket, requests=1, open_reads=1)   # blob.reload()

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, offset, whence=io.SEEK_SET):
        new = {io.SEEK_SET: offset, io.SEEK_CUR: self.pos + offset, io.SEEK_END: self.size + offset}[whence]
        if not self.buffer_start <= new <= self.buffer_start + len(self.buffer):
            _count(self.bucket, buffered=-len(self.buffer))
            self.buffer_start, self.buffer = new, b""
        self.pos = new
        return new

    def read(self, size=-1):
        if size is None or size < 0:
            size = self.size - self.pos
        at = self.pos - self.buffer_start
        have = self.buffer[at:at + size]
        missing = size - len(have)
        if missing > 0 and self.pos + len(have) < self.size:
            start = self.pos + len(have)
            with open(self.path, "rb") as f:
                f.seek(start)
                fetched = f.read(max(missing, self.buffer_size))
            _count(self.bucket, requests=1, downloaded=len(fetched), buffered=len(fetched) - len(self.buffer))
            self.buffer_start, self.buffer = start, fetched
            have += fetched[:missing]
        self.pos += len(have)
        return have

    def readinto(self, b):
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def close(self):
        if not self.closed:
            _count(self.bucket, open_reads=-1, buffered=-len(self.buffer))
            self.buffer = b""
        super().close()


class _Writer(io.RawIOBase):
    """BlobWriter's chunks: bytes are uploaded 16 MiB at a time; the object appears whole on close."""

    def __init__(self, bucket: str, key: str):
        super().__init__()
        self.bucket, self.key = bucket, key
        os.makedirs(os.path.join(ROOT, bucket, "objects", ".tmp"), exist_ok=True)
        self.tmp = os.path.join(ROOT, bucket, "objects", ".tmp", uuid.uuid4().hex)
        self.file, self.pending = open(self.tmp, "wb"), 0
        _count(bucket, requests=1)   # the resumable upload session

    def writable(self):
        return True

    def write(self, b):
        n = len(b)
        self.file.write(b)
        self.pending += n
        while self.pending >= WRITE_CHUNK:
            self.pending -= WRITE_CHUNK
            _count(self.bucket, requests=1, uploaded=WRITE_CHUNK)
        return n

    def tell(self):
        return self.file.tell()

    def close(self):
        if not self.closed:
            self.file.close()
            _count(self.bucket, requests=1, uploaded=self.pending)
            os.replace(self.tmp, _object(self.bucket, self.key))
        super().close()


class _GcsIO:
    """GcsIO.open's signature: the read buffer size that FileSystems.open does not pass on."""

    def open(self, filename, mode="r", read_buffer_size=READ_BUFFER, mime_type="application/octet-stream"):
        bucket, key = _parse(filename)
        if mode in ("r", "rb"):
            return _Reader(bucket, key, read_buffer_size)
        if mode in ("w", "wb"):
            return _Writer(bucket, key)
        raise ValueError(f"Invalid file open mode: {mode}.")


class SimStoreFileSystem(FileSystem):
    """`simstore://BUCKET/KEY` objects (see the module docstring)."""

    @classmethod
    def scheme(cls):
        return SCHEME

    def join(self, basepath, *paths):
        path = basepath
        for p in paths:
            path = path.rstrip("/") + "/" + p.lstrip("/")
        return path

    def split(self, path):
        bucket, key = _parse(path)
        head, _, tail = key.rpartition("/")
        return f"{SCHEME}://{bucket}/{head}", tail

    def mkdirs(self, path):
        pass

    def _gcsIO(self):   # GCSFileSystem's accessor, for readers with a buffer of their own size
        return _GcsIO()

    def has_dirs(self):
        return False

    def _list(self, dir_or_prefix):
        bucket, prefix = _parse(dir_or_prefix)
        _count(bucket, requests=1)
        for key in objects(bucket):
            if key.startswith(prefix):
                st = os.stat(_object(bucket, key))
                yield FileMetadata(f"{SCHEME}://{bucket}/{key}", st.st_size, st.st_mtime)

    def _open(self, path, mode, compression_type):
        bucket, key = _parse(path)
        raw = _Reader(bucket, key) if mode == "rb" else _Writer(bucket, key)
        compression_type = FileSystem._get_compression_type(path, compression_type)
        return raw if compression_type == CompressionTypes.UNCOMPRESSED else CompressedFile(raw, compression_type)

    def create(self, path, mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO):
        return self._open(path, "wb", compression_type)

    def open(self, path, mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO):
        return self._open(path, "rb", compression_type)

    def copy(self, source_file_names, destination_file_names):
        for src, dst in zip(source_file_names, destination_file_names):
            (b1, k1), (b2, k2) = _parse(src), _parse(dst)
            if not os.path.exists(_object(b1, k1)):
                raise BeamIOError("Copy operation failed", {(src, dst): FileNotFoundError(src)})
            shutil.copyfile(_object(b1, k1), _object(b2, k2))
            _count(b1, requests=1)   # a server-side rewrite: no bytes through the client

    def rename(self, source_file_names, destination_file_names):
        self.copy(source_file_names, destination_file_names)
        self.delete(source_file_names)

    def exists(self, path):
        bucket, key = _parse(path)
        _count(bucket, requests=1)
        return bool(key) and os.path.exists(_object(bucket, key))

    def size(self, path):
        return self.metadata(path).size_in_bytes

    def last_updated(self, path):
        return self.metadata(path).last_updated_in_seconds

    def checksum(self, path):
        return str(self.size(path))

    def metadata(self, path):
        bucket, key = _parse(path)
        _count(bucket, requests=1)
        try:
            st = os.stat(_object(bucket, key))
        except OSError as e:
            raise BeamIOError("Metadata operation failed", {path: e})
        return FileMetadata(path, st.st_size, st.st_mtime)

    def delete(self, paths):
        for path in paths:
            bucket, key = _parse(path)
            found = ([m.path for m in self._list(path)] if path.endswith("/")
                     else [m.path for m in self.match([path])[0].metadata_list])
            for p in found:
                os.remove(_object(*_parse(p)))
                _count(bucket, requests=1)

    def report_lineage(self, path, lineage):
        pass

