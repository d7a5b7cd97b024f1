""".docx and .odt files read and written in worker processes, so that the native memory of their parsers (lxml's
trees, python-docx's and odfdo's objects) goes back to the system with the process, and a document that needs more
than its share fails alone.

``DocumentPool`` is the standard library's ``concurrent.futures.ProcessPoolExecutor`` in the ``spawn`` context (a
fresh interpreter: never a fork of the threaded server), each worker replaced after ``TASKS_PER_CHILD`` documents
(``max_tasks_per_child``; on Python 3.10, which lacks it, the pool itself is replaced after as many). A worker
starts light: it imports ``formats`` without running the package ``__init__`` of ``encdec`` (which loads torch
and transformers), then limits its address space (``RLIMIT_AS``, on systems that have it) to what it holds at
start plus ``--document-memory-mb``. A document that needs more is ``TooLarge`` (413, naming the option); a worker
that dies (killed for memory, a crash in native code) is ``WorkerDied`` (500) for the uploads it held, and the pool
is made again for the next ones. The server itself never parses a .docx or an .odt.

A task is stateless: ``extract`` reads a document's texts, ``rebuild`` reads it again and writes the translations in
(``encdec.serve.documents.formats``: the same reading gives the same texts, in the same order).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from .formats import ARCHIVES, Bounds, DocumentError, TooLarge, check_archive, read_document

TASKS_PER_CHILD = 32  # documents a worker reads or writes before a fresh one takes its place
NATIVE_RECYCLING = sys.version_info >= (3, 11)  # ProcessPoolExecutor's max_tasks_per_child
PACKAGES = {"encdec": Path(__file__).parents[2], "encdec.serve": Path(__file__).parents[1],
            "encdec.serve.documents": Path(__file__).parent}
# run by each worker as it starts (``exec``, a builtin, is what a spawned process can be handed without importing
# encdec): the packages as bare namespaces, so that importing this module runs no package ``__init__``
BOOTSTRAP = """
import sys, types
for name, path in packages.items():
    if name not in sys.modules:
        sys.modules[name] = types.ModuleType(name)
        sys.modules[name].__path__ = [path]
from encdec.serve.documents.worker import limit_memory
limit_memory(memory_mb)
"""


class WorkerDied(DocumentError):
    """The process that read or wrote a document ended before it answered: 500."""

    status = 500


def limit_memory(memory_mb: int) -> None:
    """This process's address space limited to what it holds now plus ``memory_mb`` MiB (where ``resource`` and
    ``RLIMIT_AS`` exist: Linux and most Unix systems)."""
    try:
        import resource

        import psutil
    except ImportError:
        return
    ceiling = psutil.Process().memory_info().vms + memory_mb * 2**20
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    resource.setrlimit(resource.RLIMIT_AS, (ceiling if hard == resource.RLIM_INFINITY else min(ceiling, hard), hard))


def out_of_memory(memory_mb: int) -> TooLarge:
    return TooLarge(f"the document needs more than the {memory_mb:,} MiB a document may use to read and write "
                    "(--document-memory-mb, an option of encdec serve)")


def extract(memory_mb: int, extension: str, data: bytes, bounds: Bounds) -> list[str]:
    """The texts to translate of a document (in a worker)."""
    try:
        return read_document(extension, data, bounds).texts
    except MemoryError:
        raise out_of_memory(memory_mb) from None


def rebuild(memory_mb: int, extension: str, data: bytes, bounds: Bounds, translations: list[str]) -> bytes:
    """The document with ``translations`` in place of its texts (in a worker)."""
    try:
        return read_document(extension, data, bounds).rebuild(translations)
    except MemoryError:
        raise out_of_memory(memory_mb) from None


class DocumentPool:
    """Worker processes for documents (module docstring), started with the first document and stopped by
    ``close``."""

    def __init__(self, memory_mb: int, workers: int = 2) -> None:
        self.memory_mb, self.workers = memory_mb, workers
        self.executor: ProcessPoolExecutor | None = None
        self.tasks = 0  # given to the current pool (Python 3.10 replaces the pool after TASKS_PER_CHILD)
        self.lock = threading.Lock()

    def current(self) -> ProcessPoolExecutor:
        with self.lock:
            if self.executor is not None and not NATIVE_RECYCLING and self.tasks >= TASKS_PER_CHILD:
                self.executor.shutdown(wait=False)  # its tasks in flight finish; its workers then end
                self.executor = None
            if self.executor is None:
                recycling = {"max_tasks_per_child": TASKS_PER_CHILD} if NATIVE_RECYCLING else {}
                self.executor, self.tasks = ProcessPoolExecutor(
                    self.workers, multiprocessing.get_context("spawn"), initializer=exec,
                    initargs=(BOOTSTRAP, {"packages": {k: str(v) for k, v in PACKAGES.items()},
                                          "memory_mb": self.memory_mb}), **recycling), 0
            self.tasks += 1
            return self.executor

    async def run(self, function: Any, *args: Any) -> Any:
        """``function(memory_mb, *args)`` in a worker; ``WorkerDied`` if its process ends first."""
        executor = self.current()
        try:
            return await asyncio.wrap_future(executor.submit(function, self.memory_mb, *args))
        except BrokenProcessPool:
            with self.lock:
                if self.executor is executor:  # the first to see it makes a new pool for the next documents
                    self.executor = None
            executor.shutdown(wait=False)
            raise WorkerDied("the document could not be read or written: the process doing it ended (killed for "
                             "memory, or a crash in its parser); the server goes on: send it again, or a smaller "
                             "file") from None

    async def read(self, extension: str, data: bytes, bounds: Bounds) -> tuple[list[str], str, Any]:
        """A document's texts, how to read them (``formats.Document.text_format``) and what writes their
        translations back: a .docx or .odt read and written in a worker (its archive checked first, in a thread: no
        worker for a bomb), a .txt or .html in a thread. Its refusals are ``DocumentError``."""
        if extension in ARCHIVES:
            await asyncio.to_thread(check_archive, data, extension, bounds)
            texts = await self.run(extract, extension, data, bounds)
            return texts, "runs", lambda found: self.run(rebuild, extension, data, bounds, found)
        document = await asyncio.to_thread(read_document, extension, data, bounds)
        return document.texts, document.text_format, lambda found: asyncio.to_thread(document.rebuild, found)

    def close(self) -> None:
        with self.lock:
            executor, self.executor = self.executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)


__all__ = ["DocumentPool", "WorkerDied", "extract", "rebuild"]
