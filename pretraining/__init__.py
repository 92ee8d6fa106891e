"""Pretraining: `pretraining_data` and `pretraining_records` make the TFRecords, `input_pipeline`
batches them, `training_setup` decides what a run trains, `training` runs it in `training_loop`,
with `losses` and `training_metrics`.
"""
