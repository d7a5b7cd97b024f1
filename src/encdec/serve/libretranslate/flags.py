"""LibreTranslate's flags of ``encdec serve``: file translation (``files.FileSettings``: the largest file, how long a
translated file is kept and where, a document's memory and bounds, ``documents.Bounds``) and ``--suggestions``
(``POST /libretranslate/suggest`` stored in the key database). ``encdec.serve.apis`` names this module on
LibreTranslate's line; ``add_flags`` puts them on ``encdec serve``'s parser, ``settings`` turns the parsed arguments
into the keyword arguments of ``adapter.LibreTranslateSettings``.

Standard library only: ``encdec serve --help`` reads this file without importing encdec (which loads torch)."""

from __future__ import annotations

import argparse
from typing import Any

CHAR_LIMIT = "a request of LibreTranslate's (all its texts)"  # what --char-limit counts in this API
FILE_FLAGS = ["max_file_bytes", "file_expiry_minutes", "files_dir", "document_memory_mb", "max_archive_entries",
              "max_unpacked_bytes", "max_compression_ratio", "max_document_paragraphs", "max_document_chars"]


def add_flags(p: argparse._ActionsContainer) -> None:
    """The flags of file translation and of suggestions."""
    p.add_argument("--max-file-bytes", type=int, default=10_000_000,
                   help="largest file that LibreTranslate's /translate_file takes (default 10 MB)")
    p.add_argument("--file-expiry-minutes", type=float, default=30.0,
                   help="how long a translated file can be downloaded before it is deleted (default 30)")
    add_document_options(p)
    p.add_argument("--suggestions", action="store_true",
                   help="store LibreTranslate's POST /libretranslate/suggest in the --api-keys-db database")


def add_document_options(p: argparse._ActionsContainer) -> None:
    """The folder of translated files and the bounds of a document (``files``, ``documents``)."""
    p.add_argument("--files-dir", default=None, metavar="DIR",
                   help="where translated files are kept (default: encdec-files-<user id> in the temporary folder); "
                        "a server started on it deletes the files of servers on it that were killed")
    p.add_argument("--document-memory-mb", type=int, default=1024, metavar="MB",
                   help="memory a worker process may take to read and write one .docx or .odt (default 1024)")
    for flag, default, what in (("--max-archive-entries", 1_000, "files in a .docx or .odt archive"),
                                ("--max-unpacked-bytes", 100_000_000, "bytes of a .docx or .odt once unpacked"),
                                ("--max-compression-ratio", 100, "unpacked / packed size of an entry over 1 MB"),
                                ("--max-document-paragraphs", 100_000, "paragraphs of a .docx or .odt"),
                                ("--max-document-chars", 10_000_000, "characters to translate in a file")):
        p.add_argument(flag, type=int, default=default, metavar="N", help=f"most {what} (default {default:,})")


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """``LibreTranslateSettings``' keyword arguments from the parsed arguments: ``files`` (``FileSettings``'),
    ``suggestions``."""
    return {"files": {name: getattr(args, name) for name in FILE_FLAGS}, "suggestions": args.suggestions}


__all__ = ["CHAR_LIMIT", "FILE_FLAGS", "add_flags", "settings"]
