"""N-best lists end to end (docs/DESIGN.md §5.3): `types` (lists, hypotheses, selection),
`settings` (the first-pass settings), `text_files` (the rules the readers share), `formats` (one
module per toolkit format, registered behind one contract), `combination` (the one combination
s(h) and its weights file) tuned by `tuning`, `rescoring` (a user's files rescored),
`paper_protocol` (the paper's reranking protocol), `shared_data` (the shared LibriSpeech and WMT21
sets), and the jobs of run_rescoring.py (`rescoring_job`) and convert_nbest.py (`conversion_job`).
"""
