"""Small file helpers: every output is written atomically, and nothing is overwritten without consent."""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import EncdecError, InputFileError, OverwriteError

try:
    import fcntl
except ImportError:  # Windows: no POSIX locks; outputs go unguarded there
    fcntl = None


@contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path in the folder of ``path``; when the block succeeds it is renamed over ``path``
    (``os.replace``), so a reader sees the old file or the new one, never half of one. On failure the
    temporary file is removed and ``path`` is untouched. The file gets the usual permissions (0666 & ~umask),
    not ``mkstemp``'s owner-only 0600."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


class WriterLock:
    """One writer per output: an exclusive lock on ``path`` (a small file beside the output, holding the writer's
    PID), taken before anything is written. A second writer, in another process, is refused in one line that names
    the first one's PID. The lock is the kernel's (``fcntl.lockf``), so it dies with its holder: a ``kill -9``
    never leaves a stale lock behind, and ``--resume`` right after works. The lock file goes when the writer
    releases it.

    POSIX locks belong to a process, not to a file handle: a process that takes the lock again (a second call in
    one Python session after the first failed) gets it. Two threads of one process are not kept apart."""

    def __init__(self, path: str | os.PathLike, what: str) -> None:
        self.path, self.what, self.fd = Path(path), what, None

    def acquire(self) -> WriterLock:
        if fcntl is None:
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
                os.close(fd)
                raise EncdecError(f"{self.what} is being written by another process (PID {holder}, which holds "
                                  f"{self.path}); wait for it to finish, or stop it, then rerun.") from None
            try:  # a writer that finished meanwhile removed the file this one locked: lock the new one instead
                if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            self.path.unlink(missing_ok=True)
            os.close(self.fd)  # closing releases the lock
            self.fd = None

    def __enter__(self) -> WriterLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically (see ``atomic_output``), flushed to disk before the rename."""
    with atomic_output(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def atomic_write_json(path: str | os.PathLike, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def publish_folder(save: Callable[[Path], Any], folder: Path) -> None:
    """``save(tmp)`` into a folder beside ``folder``, then renamed to it: an interrupted run leaves no half folder,
    and when another process published the same key first, theirs (the same) is kept."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".tmp"))
    try:
        save(tmp)
        try:
            os.replace(tmp, folder)
        except OSError:  # another process saved the same key first: theirs is the same
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def replace_folder(save: Callable[[Path], Any], folder: Path) -> Any:
    """``save(staging)`` into a new folder beside ``folder`` (with the usual permissions, not ``mkdtemp``'s 0700),
    then swapped in for ``folder``; the old folder, if any, is removed only once the new one is complete, so an
    interrupted or failed run leaves the old one as it was. Returns what ``save`` returned."""
    folder = Path(folder).resolve()  # `.` too has a name and a parent to write beside
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".tmp"))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)
    try:
        made = save(staging)
        if folder.exists():
            old = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".old"))
            os.replace(folder, old / "folder")
            os.replace(staging, folder)
            shutil.rmtree(old)
        else:
            os.replace(staging, folder)
        return made
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def refuse_existing(path: str | os.PathLike, overwrite: bool, what: str, option: str | None = "--output", *,
                    folder: bool = False, consent: str = "--overwrite", example: str = "results.json",
                    resume: str | None = None) -> Path:
    """The one answer to "may I write here?", for every output: ``path`` (a ``folder``, or else a file) is free when
    it is absent, or an empty folder; what is there is replaced only with ``overwrite``; a file where a folder goes,
    or a folder where a file goes, never. Returns ``path`` as a Path; otherwise an ``OverwriteError`` in one message
    (``The WHAT PATH already exists; pass --overwrite to replace it or choose another OPTION path.``) that names the
    output, the flag that consents (``consent``), the one that continues what is there (``resume``, when the output
    can be continued: ``..., --training.resume_from_checkpoint true to continue it, or ...``) and the one that moves
    it (``option``; None when its name is fixed). Whether the output overlaps an input is ``refuse_overlap``'s
    question, asked first."""
    path = Path(path)
    another = f"another {option} path" if option else "another path"
    if folder and path.exists() and not path.is_dir():
        raise OverwriteError(f"The {what} {path} exists and is a file; choose {another}.")
    if not folder and path.is_dir():
        raise OverwriteError(f"The {what} {path} is a folder; give a file path such as {path / example}.")
    if overwrite or not path.exists() or (folder and not any(path.iterdir())):
        return path
    state = "already exists and is not empty" if folder else "already exists"
    ways = f"{consent} to replace it" + (f", {resume} to continue it" if resume else "")
    elsewhere = f"{',' if resume else ''} or choose {another}" if option else ""
    raise OverwriteError(f"The {what} {path} {state}; pass {ways}{elsewhere}.")


def ensure_output_dir(path: str | os.PathLike, overwrite: bool, what: str = "output directory",
                      option: str | None = "--output") -> Path:
    """Create the folder ``path``; an existing non-empty one is emptied with ``overwrite``, refused without
    (``refuse_existing``)."""
    path = refuse_existing(path, overwrite, what, option, folder=True)
    if path.is_dir() and any(path.iterdir()):
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    return path


def refuse_overlap(output: str | os.PathLike, inputs: Sequence[str | os.PathLike], option: str = "--output") -> None:
    """No command writes over its own input: ``output`` may not be one of ``inputs``, lie inside one (an input
    folder), or contain one (replacing it would delete the input). An ``OverwriteError`` naming both otherwise;
    checked before any work, ``--overwrite`` or not."""
    target = Path(output).resolve()
    for source in inputs:
        source = Path(source).resolve()
        if target == source or source in target.parents or target in source.parents:
            relation = "is" if target == source else "lies inside" if source in target.parents else "contains"
            raise OverwriteError(f"{option} {output} {relation} the input {source}; writing there would destroy the "
                                 f"input. Choose another {option} path.")


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's content (hex), read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def require_file(path: str | os.PathLike, what: str = "file") -> Path:
    """Return ``path`` if it is a readable file, else raise an ``InputFileError`` naming it."""
    path = Path(path)
    if not path.exists():
        raise InputFileError(f"The {what} {path} does not exist; check the path.")
    if not path.is_file():
        raise InputFileError(f"The {what} {path} is not a file.")
    if not os.access(path, os.R_OK):
        raise InputFileError(f"The {what} {path} is not readable; check its permissions.")
    return path


def read_lines(path: str | os.PathLike, what: str = "text file") -> list[str]:
    """The lines of a UTF-8 text file, without their line ends. Only ``\\n`` (or ``\\r\\n``) ends a line, so a
    stray ``\\r`` or U+2028 inside a sentence cannot break the line alignment of a parallel corpus.

    :raises InputFileError: naming a missing, unreadable, non-UTF-8 or empty (blank) file
    """
    path = require_file(path, what)
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:  # newline="": no universal-newline translation
            text = f.read()
    except UnicodeDecodeError as err:
        raise InputFileError(f"The {what} {path} is not UTF-8 text (byte {err.start}: {err.reason}); "
                             "convert it to UTF-8.") from None
    if not text.strip():
        raise InputFileError(f"The {what} {path} is empty.")
    lines = text.split("\n")
    if lines[-1] == "":  # the line end of the last line
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def batched(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """``items`` in lists of ``size`` (the last may be shorter), consumed lazily."""
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def text_lines(raw_lines: Iterable[bytes], name: str) -> Iterator[str]:
    """The lines of UTF-8 text read as bytes (a file opened ``"rb"``, ``sys.stdin.buffer``), without their line
    ends, one at a time. Only ``\n`` (or ``\r\n``) ends a line, as in ``read_lines``; a byte-order mark is dropped.

    :raises InputFileError: at the first line that is not UTF-8, naming ``name``, the line and the fix
    """
    for number, raw in enumerate(raw_lines, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise InputFileError(f"{name}, line {number}, is not UTF-8 (byte {err.start + 1} of the line: "
                                 f"{err.reason}); convert the file to UTF-8, e.g. `iconv -f latin1 -t utf-8`."
                                 ) from None
        if number == 1:
            line = line.removeprefix("\ufeff")
        yield line.removesuffix("\n").removesuffix("\r")


def count_lines(path: str | os.PathLike) -> int:
    """The number of lines of a file (a last line without a line end counts), read in blocks."""
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def count_text_lines(path: str | os.PathLike, what: str = "text file") -> int:
    """``count_lines`` of a file that must be UTF-8 text, checked in the same pass (block by block, with an
    incremental decoder); a byte that is not UTF-8 is an ``InputFileError`` naming the file and the line."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            try:
                decoder.decode(block)
            except UnicodeDecodeError as err:
                line = count + block[:err.start].count(b"\n") + 1
                raise InputFileError(f"The {what} {path}, line {line}, is not UTF-8 ({err.reason}); convert the file "
                                     "to UTF-8, e.g. `iconv -f latin1 -t utf-8`.") from None
            count += block.count(b"\n")
            last = block[-1:]
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as err:
        raise InputFileError(f"The {what} {path} ends inside a UTF-8 character ({err.reason}); the file is cut "
                             "short or not UTF-8.") from None
    return count + (last != b"\n")


def is_blank(path: str | os.PathLike) -> bool:
    """Whether a file holds nothing but white space (read in blocks, up to its first other byte)."""
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            if block.strip():
                return False
    return True


def read_aligned_lines(source_file: str | os.PathLike, target_file: str | os.PathLike,
                       target_what: str = "target file") -> tuple[list[str], list[str]]:
    """Two line-aligned files (line i of one translates line i of the other); different line counts are an
    ``InputFileError`` naming both files and both counts."""
    sources = read_lines(source_file, "source file")
    targets = read_lines(target_file, target_what)
    if len(sources) != len(targets):
        raise InputFileError(
            f"The parallel files are not aligned: the source file {source_file} has {len(sources)} lines but the "
            f"{target_what} {target_file} has {len(targets)}. Line i of one must be the translation of line i of "
            "the other."
        )
    return sources, targets
