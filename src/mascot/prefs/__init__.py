"""Preference pairs for training: the pair rules (`pairs`), Stage-2 episode- and directive-level
pairs (`group`) and pairs from people's ratings and choices (`feedback`). Everything is written as
`schema.PreferencePair`; Stage 1's own pairs are made in `mascot.stage1`."""
