"""`mascot pipeline`: the two-stage method from one config, step by step, resumable.

Every step is a `mascot` command a user could type: the pipeline builds that command's settings
(`mascot.commands`) and calls its function. It only chooses each command's settings, tells from
the files whether a step is complete, partial or absent, and writes `pipeline.json` and the report.
"""
