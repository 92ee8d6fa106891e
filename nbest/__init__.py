"""N-best lists end to end: the types, the first-pass settings, the toolkits' formats, the one
combination s(h) and its tuning, and rescoring a user's files.

`types` (lists, selection), `settings` (first-pass settings), `text_files` (rules the readers
share), `formats` (one module per toolkit format, each registering itself), `shared_data` (the
shared LibriSpeech and WMT21 sets), `combination` (s(h), the weights file, the paper's λ rule),
`tuning` (the λ grid and Powell), `rescoring` (a user's sets in and out). Metrics (WER, BLEU) are
evaluation/metrics.py's; the LM score cache is evaluation/score_cache.py's.
"""
