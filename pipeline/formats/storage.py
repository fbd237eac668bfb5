"""Paths on any of Beam's file systems, local or an object store, with one set of rules.

An object store (GCS, S3) has no directories: `gs://b/out/.incomplete` is not an object, so `exists()` of it is
false and `delete([it])` matches nothing, although thousands of objects may sit under it. Every check and removal
of a "directory" here therefore goes by its prefix (`DIR/**`), which also works on a local disk. Nothing here
creates a local directory for a path that is not local. Local paths use the os module directly (Beam is imported
only for other schemes, so the trainer can use these without it).
"""
from __future__ import annotations

import glob
import os
import shutil
import socket
import threading


def _filesystems():
    from apache_beam.io.filesystems import FileSystems   # deferred: Beam (~1 s), for paths that are not local

    return FileSystems


def is_local(path: str) -> bool:
    """A path on this machine's disk (no scheme, or file://)."""
    return "://" not in path or path.startswith("file://")


def absolute(path: str) -> str:
    """`path` as a manifest records it, to be found from any directory: a local one absolute (file:// dropped), a
    URI (gs://, s3://) as given."""
    return os.path.abspath(path.removeprefix("file://")) if is_local(path) else path


def join(directory: str, *names: str) -> str:
    return os.path.join(directory, *names) if is_local(directory) else _filesystems().join(directory, *names)


def has_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


_SIZES: dict[str, int] = {}   # object -> bytes, as the last match of a pattern that named it listed it


def match(pattern: str) -> list[str]:
    """The files a path or glob names, sorted (`**` crosses directories). On an object store one listing call a
    pattern, which also gives each object's size (`size` asks no more of the store for those)."""
    return sorted(sizes(pattern))


def sizes(pattern: str) -> dict[str, int]:
    """{file: bytes} of the files a path or glob names: on an object store one listing call, whatever their
    number."""
    if is_local(pattern):
        pattern = pattern.removeprefix("file://")
        return {p: os.path.getsize(p) for p in glob.glob(pattern, recursive=True) if os.path.isfile(p)}
    listed = {m.path: m.size_in_bytes for m in _filesystems().match([pattern])[0].metadata_list}
    _SIZES.update(listed)
    return listed


def size(path: str) -> int:
    """A file's bytes: from the listing that found it where there was one (an object store's launcher would
    otherwise ask once per file: 18,000 requests for BooksCorpus), else one request."""
    if is_local(path):
        return os.path.getsize(path.removeprefix("file://"))
    if path not in _SIZES:
        _SIZES[path] = _filesystems().match([path])[0].metadata_list[0].size_in_bytes
    return _SIZES[path]


def exists(path: str) -> bool:
    return os.path.exists(path.removeprefix("file://")) if is_local(path) else _filesystems().exists(path)


def is_dir(path: str) -> bool:
    """A local directory, or on an object store a prefix with objects under it."""
    if is_local(path):
        return os.path.isdir(path.removeprefix("file://"))
    return not has_glob(path) and bool(files_under(path))


def read_bytes(path: str) -> bytes:
    if is_local(path):
        with open(path.removeprefix("file://"), "rb") as f:
            return f.read()
    with _filesystems().open(path, compression_type="uncompressed") as f:
        return f.read()


def write_bytes(path: str, data: bytes) -> None:
    with _filesystems().create(path) as f:
        f.write(data)


def files_under(directory: str) -> list[str]:
    """Every file (object) under `directory`, at any depth, hidden ones included, sorted."""
    if is_local(directory):
        local = directory.removeprefix("file://")
        return sorted(os.path.join(d, f) for d, _, names in os.walk(local) for f in names)
    return match(join(directory, "**"))


def remove_tree(directory: str) -> None:
    """Removes everything under `directory` (every object with its prefix, on an object store), and the
    directory itself where there are directories."""
    if is_local(directory):
        local = directory.removeprefix("file://")
        if os.path.isdir(local):
            shutil.rmtree(local)
        return
    found = files_under(directory)
    if found:
        _filesystems().delete(found)


GCS_ENDPOINT = ("storage.googleapis.com", 443)
REACH_SECONDS = 5.0   # each of the two probes below


def _within(seconds: float, probe):
    """probe() run in a daemon thread: its result, or its exception raised here; TimeoutError when it has not
    ended within `seconds` (a thread cannot be stopped, so one that hangs is left to die with the process)."""
    out: dict = {}

    def run():
        try:
            out["value"] = probe()
        except BaseException as e:   # handed to the caller
            out["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"no answer within {seconds:g} s")
    if "error" in out:
        raise out["error"]
    return out.get("value")


def check_reachable(paths: list[str]) -> None:
    """Refuses, in one line and within seconds, gs:// paths this machine cannot reach: no credentials, or no route
    to Cloud Storage. Beam's own first access would retry either for minutes (its credential lookup 4 times with
    backoff, then each request until a 120 s deadline) before failing with a RetryError that names neither."""
    gcs = [p for p in paths if p.startswith("gs://")]
    if not gcs:
        return
    try:   # deferred: the optional GCP libraries (bertprep[dataflow]), for gs:// paths only
        import google.auth
        from google.auth import exceptions
    except ImportError:
        raise SystemExit(f"{gcs[0]}: gs:// paths need Beam's GCP client libraries: pip install 'bertprep[dataflow]'")
    try:
        _within(REACH_SECONDS, google.auth.default)
    except (exceptions.DefaultCredentialsError, TimeoutError) as e:
        why = str(e).split(". ")[0].rstrip(".")
        raise SystemExit(f"{gcs[0]}: cannot read Cloud Storage from this machine: no Google Cloud credentials "
                         f"({why}); run `gcloud auth application-default login` or set "
                         "GOOGLE_APPLICATION_CREDENTIALS") from None
    host, port = GCS_ENDPOINT
    try:
        _within(REACH_SECONDS, lambda: socket.create_connection((host, port), timeout=REACH_SECONDS).close())
    except (OSError, TimeoutError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise SystemExit(f"{gcs[0]}: cannot read Cloud Storage from this machine: {host}:{port} is not reachable "
                         f"({why})") from None
