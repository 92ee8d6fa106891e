"""Text before tokenization: `corpus` (the corpus library: books or text files -> sentences, the
dedup, the held-out split, stats.json), `corpus_job` (corpus.py's job: its params and `run`),
`text_cleaning` (the corpus' per-document rules) and `normalization` (what every model records and
every reader applies).
"""
