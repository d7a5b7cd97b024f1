"""Shipping a trained model: each backend's exporter (``*_export``: the folder its engine reads, as
``encdec.backends`` declares it; ``web_export``: the site that translates in the browser) and ``hub``
(``push_to_hub`` with a model card). What ``hub`` ships is an ordinary model folder (``encdec.folders``), loaded back
by ``encdec.inference``."""
