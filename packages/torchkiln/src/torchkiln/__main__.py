"""``python -m torchkiln bench|overhead|repro|minify|--version``."""

from torchkiln.bench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
