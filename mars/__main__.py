"""`python -m mars` is the `mars` command."""

from mars.main import run

run()
