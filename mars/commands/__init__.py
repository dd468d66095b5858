"""The command line: one module per command group. Each parses its options into a plan and
calls the library API (mars.api)."""
