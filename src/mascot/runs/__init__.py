"""Run folders: what a run writes and how it continues. `store` (the JSONL records, summary and
lock of one run folder), `open` (opening a run: resume checks, backends, closing lines) and
`folder` (the refusal of a folder an earlier run holds)."""
