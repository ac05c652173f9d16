"""``python -m x402mw``: the command line."""

from x402mw.cli import main

if __name__ == "__main__":  # not when a worker process (multiprocessing's spawn) imports it
    main()
