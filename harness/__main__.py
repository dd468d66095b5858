"""`python -m harness` is the `mars` command."""

from harness.cli.main import run

run()
