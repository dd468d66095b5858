"""Start models: a model taught a reply format by supervised training on its replies only.

`build` (over `recipe`, `examples`, `format_data`, `format_eval` and `reply_training`) is the
game format pre-training (`mars tiny-model pretrain`); `mas_start`, `plan_start` and
`code_start` build the starting models of the MAS workflow miniatures.
"""
