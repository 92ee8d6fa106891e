"""Pretraining: from TFRecords to a trained model dir.

`training` is the loop (steps, checkpoints, eval, stop requests); `training_setup` decides what a
run trains (vocab, config, datasets); `input_pipeline` is the bucketed tf.data with dynamic
masking; `losses` the three objectives; `training_metrics` what a run reports;
`pretraining_records` writes the TFRecords that `create_pretraining_data.py` makes.
"""
