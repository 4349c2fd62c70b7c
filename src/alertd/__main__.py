"""`python -m alertd` is the `alertd` command."""

from alertd.cli import main

raise SystemExit(main())
