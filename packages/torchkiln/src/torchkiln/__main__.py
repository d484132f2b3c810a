"""``python -m torchkiln bench|overhead|--version``."""

from torchkiln.bench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
