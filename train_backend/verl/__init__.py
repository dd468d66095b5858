"""The verl backend of `mars train`: MARSHAL's estimators, self-play loop and trainer inside verl.

`launch.run_verl(config, run, dry_run=...)` is the entry point. Modules that import verl
(`estimators`, `agent_loop`, `trainer`, `plugin`, `compose`) are loaded only when needed; the
others (`names`, `turns`, `data`, `overrides`, `checkpoints`, `launch`) work without it.
See docs/verl.md.
"""
