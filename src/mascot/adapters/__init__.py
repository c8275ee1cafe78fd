"""Adapters after training: the registry of versions (`registry`), comparisons between versions,
promotion and rollback, serving them with vLLM (`serve`), a server that follows the current version
(`follow`) and the watchdog that stops a server whose parent died (`watchdog`)."""
