"""``python -m x402mw``: the command line."""

from x402mw.cli import main

main()
