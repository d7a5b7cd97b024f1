"""Pushing a model folder to the Hugging Face Hub, exactly the files ``check_model_folder`` lists, in one commit."""

from __future__ import annotations

import os

from huggingface_hub import CommitOperationAdd, HfApi

from ..cards import write_model_card
from ..folders import check_model_folder, require_dir
from ..inference import load_model_and_tokenizer
from ..version import __version__


def push_model(model_dir: str | os.PathLike, repo_id: str, private: bool = False, token: str | None = None,
               commit_message: str = "Upload encdec model") -> str:
    """Push a checked model folder to the Hub in one commit; returns the commit URL.

    The folder is checked (``check_model_folder``) and loaded through the Auto classes (model and tokenizer must
    agree); a README.md card is written first if there is none. Then ``HfApi.create_repo`` and one
    ``HfApi.create_commit`` upload exactly the checked files, from the folder as they are. (``model.push_to_hub``
    would re-serialise without ``pipeline_seq2seq.py`` and replace README.md with a default card, in separate
    commits.)
    """
    model_dir = require_dir(model_dir)
    check_model_folder(model_dir)
    load_model_and_tokenizer(model_dir)  # loads through the Auto classes, and the tokenizer matches the model
    if not (model_dir / "README.md").exists():
        write_model_card(model_dir, repo_id=repo_id)
    files = check_model_folder(model_dir)
    api = HfApi(token=token, library_name="encdec", library_version=__version__)
    repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
    operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(model_dir / name)) for name in files]
    commit = api.create_commit(repo_id=repo_id, operations=operations, commit_message=commit_message)
    return commit.commit_url


__all__ = ["push_model"]
