"""The benchmarks behind docs/benchmarks.md: ``python -m benches SUBCOMMAND``, run from the
repository root (see ``cli.py`` and README.md). A plain package of the checkout, beside the
installed one and never inside it: it imports ``jaxrl_dist``, ``jaxrl_dist`` never imports it.
Nothing here is used by training, and importing the package imports nothing: ``common.py``
holds the shared helpers, one module per bench imports it (and, one way, the bench it builds
on), and only ``__main__`` imports the command line."""
