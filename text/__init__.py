"""Text before tokenization: cleaning raw books into sentences and normalising text.

`corpus` is the corpus job (Gutenberg archives or plain files -> train.txt, eval.txt,
stats.json; its command is corpus.py), `text_cleaning` its per-document rules, and
`normalization` the LibriSpeech-style normalisation every model records and every reader applies.
"""
