"""Training inside multi-agent workflows (Stronger-MAS, docs/mas_training.md): the workflows as
training environments, their rewards, and the training data they draw problems from."""
