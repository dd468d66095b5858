"""The built-in game specs; importing a module registers its games."""
