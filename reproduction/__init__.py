"""The two long jobs' engines and reports: reproduce.py's (`stages`, `runner`, `modes`,
`seed_runs`, `reproduction_report`) and run_benchmark.py's (`benchmark`, `benchmark_report`, and
the peers it times, `peers`).
"""
