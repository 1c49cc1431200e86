"""The benchmarks behind docs/benchmarks.md: ``python -m jaxrl_dist.bench SUBCOMMAND`` (see
``cli.py``). Nothing here is used by training, and importing the package imports nothing:
``common.py`` holds the shared helpers, one module per bench imports it (and, one way, the
bench it builds on), and only ``__main__`` imports the command line."""
