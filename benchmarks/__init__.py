"""pygpukit_torch's benchmarks: one command-line tool, `python -m benchmarks`
(run from the repository root; docs/benchmarks.md). Investigation scripts
that answer one question each are in benchmarks/experiments/."""
