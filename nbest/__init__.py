"""N-best lists end to end: the types, the first-pass settings, the toolkits' formats, the one
combination s(h) and its tuning, and rescoring a user's files (docs/DESIGN.md §5.3).
"""
