"""Apache Beam pipelines of the jobs that split into parts (docs/DESIGN.md §5.6): the data job's
blocks, score.py's shards and the rescoring score cache's parts, each a DoFn around the job's own
library, so the outputs are the bytes of the one-process commands. One job module per command:
`beam_data_job` (beam_data.py), `beam_score_job` (beam_score.py), `beam_rescore_job`
(beam_rescore.py); `options`, the runner flags every pipeline shares. Beam comes from
requirements-beam.txt (scripts/setup_beam.sh); nothing outside this package imports it."""
