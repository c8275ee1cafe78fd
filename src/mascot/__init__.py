"""MASCOT: multi-agent socio-collaborative companions."""

__version__ = "0.1.0"
