"""Stage 1, persona alignment data: K candidate replies per context and persona (`candidates`,
`individual`), judged with the rubric (and, optionally, as every other persona: `cross_persona`),
the preference pairs between them, and the run that writes them (`run`, settings in `settings`).
The persona reward model and the Speaker then train on them (`mascot.train`)."""
