"""What the commands that play games share: their help lines (the use cases share
`mars.api.game_runs`)."""

from __future__ import annotations

SEATS_HELP = "Seats the player takes: both | first | second."
INVALID_HELP = "Invalid replies: penalty (the game ends, the paper's rule) | retry:K (K re-asks)."
STYLE_HELP = (
    "Prompts: full (rules, one growing chat per seat) | compact (short, for tiny models) | "
    "numbered (compact, answered with a number of the legal list)."
)
PLAYER_HELP = (
    "llm (--model), llm:PATH (a checkpoint served for the run), llm:NAME@URL (a model at a URL), "
    "random, mcts:SIMS, cfr:ITERS, nash."
)
LABEL_HELP = (
    "Who --model is in records and ratings (default: its folder's absolute path, or the name "
    "given with --base-url)."
)
