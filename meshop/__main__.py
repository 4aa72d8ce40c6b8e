"""``python -m meshop`` runs the ``meshop`` command (also under ``torchrun -m meshop``)."""

from meshop.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
