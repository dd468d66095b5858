"""The embedded CPU self-play trainer: batched in-process rollouts, PPO-clip update, checkpoints.

See docs/training.md. Entry point: `train_backend.local.trainer.train_local(config, run, ...)`.
"""
