"""Trained artefacts as versions: the registry, comparisons between versions, promotion and rollback."""
