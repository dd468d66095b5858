"""Orchestration: the use cases that run other commands (the checkpoint -> evaluation loop, the
papers' experiments, the demo). It sits at the top with the program, beside mars.main."""
