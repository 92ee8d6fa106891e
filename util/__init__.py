"""What every command shares and no model needs to know about.

`cli` (the entry point: a wrong input is one line and exit 2), `startup_log` (every command's
first import: TensorFlow's start-up lines held back), `interrupts` (stops by signal, and worker
pools a Ctrl-C does not reach), `io_utils` (data root, atomic writes, stamps, locks), `resumable`
(outputs a re-run resumes), `runs` (the job an output dir holds), `parts` (a job split into parts
and merged), `progress` (rate and ETA), `machine` (the CPU and commit behind a figure),
`distribute_utils` (tf.distribute strategies).
"""
