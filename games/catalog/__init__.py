"""The built-in games: each module registers its specs (`games.spec.register_game`) when imported.

This tuple is the games' one registration: `games.spec` imports these modules, in this order, the
first time a game is looked up. A new game is a module here (its spec: rules, views, labels,
rewards and `board`, how the dashboard's replays draw it) and its line below (docs/games.md).
"""

MODULES = (
    "board",
    "hanabi",
    "poker",
)
