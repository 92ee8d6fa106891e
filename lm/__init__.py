"""Language models as users load them: text in, log-probabilities and vectors out.

`inference` is the one inference path (`load_lm`), `scoring_graph` its graph functions, `backends`
and `onnx_backend` what runs them, `windows` the sliding windows over a long sentence and
`stage_clock` the per-stage times; `lm_options` the LM options of every command that loads one;
`model_dir`, `hf_checkpoint`, `checkpoints` and `conversion` the models on disk, `warm_start`
training's start from any of them; `ngram_lm` KenLM; `flops` the matmul FLOPs per kind; the jobs
of score.py (`scoring_job`), convert_checkpoint.py (`checkpoint_job`), ngram.py (`ngram_job`)
and export_saved_model.py (`export_job`, which `saved_model_export` serves: the SavedModel's
module and writer).
"""
