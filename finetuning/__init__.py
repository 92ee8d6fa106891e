"""Fine-tuning a pretrained LM as an N-best rescorer with the MWER loss (docs/DESIGN.md §4.5):
`mwer_data` (lists -> training data), `mwer` (score, loss, step), `mwer_training` (the run),
`mwer_report` (the test sets against the baselines), and run_mwer.py's job (`mwer_job`).
"""
