"""Fine-tuning a pretrained LM as an N-best rescorer, discriminatively (MWER).

`mwer_data` turns N-best lists into training data (token ids, first-pass scores, word errors,
the held-out split by speaker, the batch order); `mwer` holds the rescorer's score, the MWER
loss, the regularisers and one training step; `mwer_training` is the run (epochs, checkpoints,
exact resume, held-out selection, the model dir it leaves); `mwer_report` evaluates the result
on the test sets against the baselines, with paired bootstrap CIs. run_mwer.py is the command.
"""
