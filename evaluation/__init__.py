"""Evaluation: WER/BLEU (`metrics`), STS pairs and their cosines (`sts_data`, `pair_files`,
`pair_similarity`, `whitening`, `sts_job`), paired bootstrap (`significance`, `comparisons`) and
the LM scores a rescoring run resumes from (`score_cache`)."""
