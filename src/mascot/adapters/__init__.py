"""Adapters after training, as versions (the registry file itself: `mascot.adapter_registry`, which
the settings and the trainers read): `mascot adapters` (`command`), comparisons between versions
(`compare`), promotion and rollback (`promotion`), serving them with vLLM (`serve`, the command in
`serve_command`), a server that follows the current version (`follow`) and the watchdog that stops
a server whose parent died (`watchdog`)."""
