"""Crisis-language screening of user messages: rules as data, an optional embedding check, crisis
resources per locale. See docs/safety.md."""

from mascot.safety.screen import SAFETY_ACTION, SAFETY_MODES, Finding, SafetyScreen, screen_applies

__all__ = ["SAFETY_ACTION", "SAFETY_MODES", "Finding", "SafetyScreen", "screen_applies"]
