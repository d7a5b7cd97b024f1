"""Trained Marian models (transformers' ``MarianMTModel``: the OPUS-MT family) brought into encdec's Transformer
exactly: ``encdec import --from DIR_OR_HUB_ID --output OUT`` (docs/import.md). ``importer.import_marian`` is the
entry point; ``convert`` maps the config and the weights, ``tokenizer`` the two SentencePiece models."""
