"""``python -m spectrag``: the ``spectrag`` command line."""

from spectrag.cli.main import main

if __name__ == "__main__":
    main(prog_name="spectrag")
