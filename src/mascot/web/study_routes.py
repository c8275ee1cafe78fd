"""The human-study pages and endpoints, mounted by `mascot.web.app`."""

from fastapi import APIRouter

router = APIRouter()
