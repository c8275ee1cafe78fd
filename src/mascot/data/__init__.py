"""Datasets: the registry (`registry`: names users know, domain, reader, splits, roster) and the
loaders (`loaders`), each imported from its own module, so that looking a name up in the registry
(help texts, settings) does not load the readers."""

from __future__ import annotations
