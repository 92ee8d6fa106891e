"""Apache Beam pipelines of the jobs that split into parts (docs/DESIGN.md §5.6): the data job's
blocks (beam_data.py), score.py's shards (beam_score.py) and the rescoring score cache's parts
(beam_rescore.py), each a DoFn around the job's own library, so the outputs are the bytes of the
one-process commands: `data_pipeline` (beam_data.py), `scoring_pipeline` (beam_score.py and
beam_rescore.py) and `options`, the runner flags every pipeline shares. Beam comes from
requirements-beam.txt (scripts/setup_beam.sh); nothing outside this package imports it."""
