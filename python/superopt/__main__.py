"""``python -m superopt ...``: the same command line as ``superopt ...``.

Owns: nothing but the entry; imports the command line.
"""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
