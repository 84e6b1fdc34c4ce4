"""``python -m agentwarm.cli`` is ``agentwarm``."""

from agentwarm.cli import main

main()
