"""The two long jobs' engines and reports: the reproduction (reproduce.py) and the benchmark.

`stages` runs the reproduction's stages in order (each a command run by `runner`, skipped when its
stamp says it is done) for the `modes` preset and flags; `reproduction_report` renders report.md /
report.json and the learning curves from the stages' results; `seed_runs` lays out and compares
the seeds of reproduce.py --seeds; `benchmark` is run_benchmark.py's engine (latency, throughput,
matmul peak, bandwidth), `benchmark_report` renders its tables, headline and plot; `peers` times
the benchmark's peers (Hugging Face BERT on PyTorch and ONNX Runtime, minicons).
"""
