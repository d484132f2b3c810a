"""``python -m tests.fuzz --programs N --seed S``: see run.py."""

import sys

from tests.fuzz.run import main

sys.exit(main())
