"""Pretraining: `data_job` is create_pretraining_data.py's job (params, identity, parts, merge) around
`pretraining_data`, which makes the TFRecords (inputs read by `sentence_files`, records written by
`pretraining_records`), `input_pipeline` batches them, `training_setup` decides what a
run trains, `training` runs it in `training_loop`, with `losses` and `training_metrics`;
`distillation` mixes a teacher's masked predictions into a T-TA's targets (--teacher).
"""
