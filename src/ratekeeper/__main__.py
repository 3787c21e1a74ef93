"""``python -m ratekeeper``: the `ratekeeper` command."""

from ratekeeper.cli import main

raise SystemExit(main())
