"""`mascot pipeline`: the two-stage method from one config, step by step, resumable.

Every step is a `mascot` command a user could type, run in-process (`mascot.cli.invoke`); the
pipeline only chooses each command's flags, tells from the files whether a step is complete,
partial or absent, and writes `pipeline.json` and the report.
"""
