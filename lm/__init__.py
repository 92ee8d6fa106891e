"""Language models as users load them: text in, log-probabilities and vectors out.

`inference` is the one inference path (`load_lm` for a model dir, `kenlm:`, `bert:` or `hf:`
spec; `NeuralLM`, `NgramLM`); `scoring_graph` holds the graph functions it compiles and the
SavedModel traces; `backends` (with `stage_clock`) and `onnx_backend` are what runs them;
`model_dir` and `hf_checkpoint` read and write models on disk, `checkpoints` the checkpoint files
(newest first, roll-back, TF1 names), `conversion` turns a release into a model dir; `ngram_lm`
trains and scores KenLM 5-grams; `flops` counts a model's matmul FLOPs per kind (the
benchmark's and training's GFLOP/s).
"""
