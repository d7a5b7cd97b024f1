"""Jobs that chain the stages: ``demo`` (build a tokenizer, train, evaluate and plot on the built-in dates) and
``distill`` (a teacher translates a corpus, a smaller student trains on it: Kim and Rush 2016). Each is a command
(``make demo``, ``encdec distill``) and a function of its own."""
