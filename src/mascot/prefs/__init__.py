"""Preference data: pair rules (`pairs`), Stage-1 candidates and pairs (`individual`), Stage-2
episode- and directive-level pairs (`group`). Everything is written as `schema.PreferencePair`."""
