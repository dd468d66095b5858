"""The ground floor: what every layer above stands on.

Errors, the model endpoint and its transport, the response cache, usage, model servers and their
state files, the run store, statistics, JSONL and atomic writes, the checkpoint contract and the
embedded tiny model. Nothing here imports any other package of this project.
"""
