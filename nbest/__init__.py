"""N-best lists end to end: the types, the first-pass settings, the toolkits' formats, the one
combination s(h) and its tuning, rescoring a user's files, and the jobs of run_rescoring.py
(`rescoring_job`) and convert_nbest.py (`conversion_job`) (docs/DESIGN.md §5.3).
"""
