"""Pretraining: the jobs of create_pretraining_data.py and run_pretraining.py and their libraries.

- `data_job`: create_pretraining_data.py's job (params, fingerprint, parts, merge, resume) around
  `pretraining_data` (sources, scan, vocab, blocks, assembly), which reads inputs through
  `sentence_files` and writes records through `pretraining_records`.
- `training_job`: run_pretraining.py's job (params, run record, resume, locks, strategy, summary):
  `training_setup` decides what a run trains and batches the records (`input_pipeline`),
  `training` holds the step functions and the run's state, run in `training_loop`, with `losses`
  and `training_metrics`; `distillation` mixes a teacher's masked predictions into a T-TA's
  targets (--teacher).
"""
