"""Shipping a trained model: ``export`` (a CTranslate2 folder, float32 or int8) and ``hub`` (``push_to_hub`` with a
model card). What they ship is an ordinary model folder (``encdec.folders``), loaded back by ``encdec.inference``."""
