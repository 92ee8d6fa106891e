"""Evaluation data and metrics: N-best lists, STS pairs, WER/BLEU, significance.

`sts_data` reads the STS sets, `pair_files` a user's sentence pairs and SentEval's
STS12-16; `nbest` reranks and measures (WER with jiwer, BLEU with sacrebleu, the λ sweep, oracle,
pseudo-perplexity); `pair_similarity` turns pairs into cosines and correlations; `significance`
gives paired bootstrap CIs; `score_cache` keeps the LM scores of a rescoring run so it resumes.
"""
