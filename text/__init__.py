"""Text before tokenization: `corpus` (the corpus job of corpus.py), `text_cleaning` (its
per-document rules) and `normalization` (what every model records and every reader applies).
"""
