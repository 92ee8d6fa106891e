"""The two long jobs' engines and reports: reproduce.py's (its job `reproduction_job`; `stages`,
`runner`, `modes`, `seed_runs`, `reproduction_report`) and run_benchmark.py's (its job
`benchmark_job`; `benchmark`, `benchmark_report`, and the peers it times, `peers`).
"""
